// The multi-key passkey document of the query-agnostic eval (runtime/eval/passkey_multi.h): the
// keys are distinct and found in the document in band order, every question names its own door,
// the length stays within the target, the same seed gives the same document; and the context
// split (common_prefix) stops where the prompts part.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "runtime/eval/passkey_multi.h"

namespace e = adakv::eval;

namespace {

// Words as tokens, plus a chat template's few.
size_t words(const std::string& text) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string w; in >> w;) ++n;
  return n + 5;
}

// Whole-word occurrences of `word` in `text`.
size_t occurrences(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string w; in >> w;) {
    while (!w.empty() && (w.back() == '.' || w.back() == '?')) w.pop_back();
    n += w == word;
  }
  return n;
}

}  // namespace

TEST(PasskeyMulti, KeysInBandOrderWithinTheTarget) {
  const auto s = e::make_passkey_multi(900, 4, 7, words);
  ASSERT_EQ(s.answers.size(), 4u);
  ASSERT_EQ(s.questions.size(), 4u);
  ASSERT_EQ(s.depths.size(), 4u);
  EXPECT_LE(s.document_tokens, 900u);
  EXPECT_GT(s.document_tokens, 850u);  // filled up to the target, a sentence short at most
  size_t last = 0;
  for (size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(s.answers[k].size(), 5u);
    for (size_t j = 0; j < k; ++j) EXPECT_NE(s.answers[k], s.answers[j]);
    const size_t at = s.document.find("is " + s.answers[k] + ".");
    ASSERT_NE(at, std::string::npos);
    EXPECT_GT(at, last);
    last = at;
    EXPECT_GE(s.depths[k], k / 4.0);
    EXPECT_LT(s.depths[k], (k + 1) / 4.0);
    // Each question names the door of its own key, and the needle ties them.
    const std::string ask = "What is the pass key of the ";
    ASSERT_EQ(s.questions[k].rfind(ask, 0), 0u);
    const std::string door =
        s.questions[k].substr(ask.size(), s.questions[k].find(" door") - ask.size());
    EXPECT_NE(s.document.find("The pass key of the " + door + " door is " + s.answers[k]),
              std::string::npos);
    EXPECT_EQ(e::question_prompt(s, k), s.document + "\n\n" + s.questions[k]);
  }
}

TEST(PasskeyMulti, SameSeedSameDocument) {
  const auto a = e::make_passkey_multi(500, 3, 11, words);
  const auto b = e::make_passkey_multi(500, 3, 11, words);
  const auto c = e::make_passkey_multi(500, 3, 12, words);
  EXPECT_EQ(a.document, b.document);
  EXPECT_EQ(a.answers, b.answers);
  EXPECT_NE(a.answers, c.answers);
}

TEST(PasskeyMulti, DistinctDoorNamesOccurOnlyInTheirNeedles) {
  const size_t keys = e::kMaxPasskeyDoors;
  const auto colors = e::make_passkey_multi(2000, keys, 7, words);
  const auto distinct = e::make_passkey_multi(2000, keys, 7, words, e::DoorNames::kDistinct);
  // The names change nothing else a seed draws.
  EXPECT_EQ(colors.answers, distinct.answers);
  EXPECT_EQ(colors.depths, distinct.depths);
  const std::string ask = "What is the pass key of the ";
  size_t filler_named = 0;
  for (size_t k = 0; k < keys; ++k) {
    SCOPED_TRACE(k);
    const auto door = [&](const e::MultiSample& s) {
      return s.questions[k].substr(ask.size(), s.questions[k].find(" door") - ask.size());
    };
    // A needle names its door twice; a distinct name is nowhere else in the document.
    EXPECT_EQ(occurrences(distinct.document, door(distinct)), 2u) << door(distinct);
    EXPECT_GE(occurrences(colors.document, door(colors)), 2u);
    filler_named += occurrences(colors.document, door(colors)) > 2;
  }
  EXPECT_EQ(filler_named, 3u);  // blue, green and yellow are filler words too
}

TEST(PasskeyMulti, DoorNamesParseAndPrint) {
  for (auto names : {e::DoorNames::kColors, e::DoorNames::kDistinct}) {
    EXPECT_EQ(e::parse_door_names(e::to_string(names)), names);
  }
  EXPECT_THROW(e::parse_door_names("pastel"), std::invalid_argument);
}

TEST(PasskeyMulti, RejectsTooManyKeysOrTooShortATarget) {
  EXPECT_THROW(e::make_passkey_multi(900, 0, 1, words), std::invalid_argument);
  EXPECT_THROW(e::make_passkey_multi(900, e::kMaxPasskeyDoors + 1, 1, words),
               std::invalid_argument);
  EXPECT_THROW(e::make_passkey_multi(60, 4, 1, words), std::invalid_argument);
}

TEST(PasskeyMulti, CommonPrefixEndsWhereThePromptsPart) {
  EXPECT_EQ(e::common_prefix({{1, 2, 3, 4}, {1, 2, 3, 5}, {1, 2, 9}}), 2u);
  EXPECT_EQ(e::common_prefix({{1, 2, 3}}), 3u);
  EXPECT_EQ(e::common_prefix({{1, 2, 3}, {1, 2}}), 2u);
  EXPECT_EQ(e::common_prefix({{4}, {1, 2}}), 0u);
  EXPECT_THROW(e::common_prefix({}), std::invalid_argument);
}
