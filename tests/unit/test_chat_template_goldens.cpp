// adakv's chat templates against transformers' apply_chat_template on the real Jinja templates
// of each family (tests/data/chat_template_goldens.jsonl, written by
// tests/tools/gen_chat_template_goldens.py): the same text for every conversation the template
// renders, an std::invalid_argument (with the template's own message for a role order) for
// every one it refuses. With ADAKV_CHAT_TEMPLATE_SOURCES naming the directory the script wrote
// the sources to (--sources-out), each source is also recognised as its family.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/tokenizer/chat_template.h"

namespace {

using adakv::tokenizer::ChatMessage;
using adakv::tokenizer::ChatTemplate;
using json = nlohmann::json;

std::vector<json> golden_lines() {
  std::ifstream in(std::string(ADAKV_TEST_DATA_DIR) + "/chat_template_goldens.jsonl");
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

TEST(ChatTemplateGoldens, RenderAsTransformersDoes) {
  const std::vector<json> lines = golden_lines();
  ASSERT_FALSE(lines.empty()) << "tests/data/chat_template_goldens.jsonl is missing";
  std::map<std::string, std::pair<int, int>> matched;  // family: matched, total
  for (const json& j : lines) {
    const std::string family = j.at("family");
    std::vector<ChatMessage> messages;
    for (const json& m : j.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    const ChatTemplate t = ChatTemplate::named(family);
    const bool gen = j.at("add_generation_prompt");
    const std::string where = family + " (" + j.at("source").get<std::string>() + ") on " +
                              j.at("messages").dump() + (gen ? " +gen" : "");
    auto& [ok, total] = matched[family];
    ++total;
    if (j.contains("text")) {
      std::string got;
      try {
        got = t.render(messages, gen);
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << ": threw " << e.what();
        continue;
      }
      EXPECT_EQ(got, j.at("text").get<std::string>()) << where;
      ok += got == j.at("text").get<std::string>();
      continue;
    }
    const std::string expected = j.at("error");
    try {
      t.render(messages, gen);
      ADD_FAILURE() << where << ": rendered, but the template refuses it: " << expected;
    } catch (const std::invalid_argument& e) {
      if (expected == "undefined") {
        ++ok;
      } else {
        EXPECT_EQ(std::string(e.what()), expected) << where;
        ok += expected == e.what();
      }
    }
  }
  for (const auto& [family, counts] : matched) {
    std::printf("chat template goldens: %s matched %d/%d\n", family.c_str(), counts.first,
                counts.second);
  }
}

TEST(ChatTemplateGoldens, TheSourcesAreRecognised) {
  const char* dir = std::getenv("ADAKV_CHAT_TEMPLATE_SOURCES");
  if (!dir || !*dir) {
    GTEST_SKIP() << "set ADAKV_CHAT_TEMPLATE_SOURCES to the --sources-out directory of "
                    "tests/tools/gen_chat_template_goldens.py to recognise the real sources";
  }
  std::map<std::string, std::string> family_of;  // sha256: family
  for (const json& j : golden_lines()) family_of[j.at("source_sha256")] = j.at("family");
  for (const auto& [sha, family] : family_of) {
    const std::filesystem::path path = std::filesystem::path(dir) / (sha + ".jinja");
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    const auto t = ChatTemplate::recognise(ss.str());
    ASSERT_TRUE(t.has_value()) << family << " source " << path << " is not recognised";
    EXPECT_EQ(t->name, family) << path;
  }
}

}  // namespace
