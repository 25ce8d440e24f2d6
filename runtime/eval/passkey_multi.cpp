#include "runtime/eval/passkey_multi.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace adakv::eval {
namespace {

const char* const kColorDoors[kMaxPasskeyDoors] = {"red",    "blue",   "green", "yellow",
                                                   "purple", "orange", "white", "black"};
// No word of kIntro or kFiller.
const char* const kDistinctDoors[kMaxPasskeyDoors] = {"red",   "purple", "orange", "white",
                                                      "black", "silver", "brown",  "pink"};

const char* const kFiller[] = {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                               "Here we go.", "There and back again."};
constexpr size_t kFillerUnits = sizeof kFiller / sizeof kFiller[0];

constexpr const char* kIntro =
    "There are several important pieces of information hidden inside a lot of irrelevant text. "
    "Find them and memorize them. I will quiz you about the important information there.";

// The document with `units` filler sentences and needle k after unit slots[k] (ascending).
std::string compose(size_t units, const std::vector<size_t>& slots,
                    const std::vector<std::string>& needles) {
  std::string hay;
  size_t next = 0;
  for (size_t u = 0; u <= units; ++u) {
    while (next < slots.size() && slots[next] == u) {
      hay += (hay.empty() ? "" : " ") + needles[next];
      ++next;
    }
    if (u < units) hay += (hay.empty() ? "" : " ") + std::string(kFiller[u % kFillerUnits]);
  }
  return std::string(kIntro) + "\n\n" + hay;
}

std::vector<size_t> slots_for(size_t units, const std::vector<double>& depths) {
  std::vector<size_t> slots;
  for (double d : depths) slots.push_back(size_t(std::lround(d * double(units))));
  return slots;
}

}  // namespace

std::string question_prompt(const MultiSample& s, size_t k) {
  return s.document + "\n\n" + s.questions.at(k);
}

DoorNames parse_door_names(const std::string& name) {
  if (name == "colors") return DoorNames::kColors;
  if (name == "distinct") return DoorNames::kDistinct;
  throw std::invalid_argument("door names must be colors or distinct, got \"" + name + "\"");
}

std::string to_string(DoorNames names) {
  return names == DoorNames::kDistinct ? "distinct" : "colors";
}

MultiSample make_passkey_multi(size_t target_tokens, size_t keys, uint64_t seed,
                               const TokenCounter& count, DoorNames names) {
  if (keys == 0 || keys > kMaxPasskeyDoors) {
    throw std::invalid_argument("passkey-multi: keys must be in [1, " +
                                std::to_string(kMaxPasskeyDoors) + "], got " +
                                std::to_string(keys));
  }
  Rng rng(seed);
  MultiSample s;
  std::vector<std::string> needles;
  std::vector<double> wanted;
  for (size_t k = 0; k < keys; ++k) {
    std::string key;
    do {
      key = std::to_string(rng.uniform(10000, 99999));
    } while (std::find(s.answers.begin(), s.answers.end(), key) != s.answers.end());
    const std::string door = names == DoorNames::kDistinct ? kDistinctDoors[k] : kColorDoors[k];
    needles.push_back("The pass key of the " + door + " door is " + key + ". Remember it. " + key +
                      " is the pass key of the " + door + " door.");
    s.questions.push_back("What is the pass key of the " + door + " door? Answer with the number.");
    s.answers.push_back(key);
    s.references.push_back("The pass key of the " + door + " door is " + key + ".");
    // Inside band k, at least a tenth of a band from its edges.
    const double u = 0.1 + 0.8 * double(rng.uniform(0, 1000)) / 1000.0;
    wanted.push_back((double(k) + u) / double(keys));
  }
  if (count(compose(0, slots_for(0, wanted), needles)) > target_tokens) {
    throw std::invalid_argument("passkey-multi: a document of " + std::to_string(target_tokens) +
                                " tokens cannot hold " + std::to_string(keys) + " needles");
  }
  // The most filler sentences that fit: tokens grow with sentences.
  size_t lo = 0, hi = 1;
  while (count(compose(hi, slots_for(hi, wanted), needles)) <= target_tokens) {
    lo = hi;
    hi *= 2;
  }
  while (lo + 1 < hi) {
    const size_t mid = (lo + hi) / 2;
    if (count(compose(mid, slots_for(mid, wanted), needles)) <= target_tokens) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const auto slots = slots_for(lo, wanted);
  s.document = compose(lo, slots, needles);
  s.document_tokens = count(s.document);
  for (size_t k = 0; k < keys; ++k) {
    s.depths.push_back(lo ? double(slots[k]) / double(lo) : 0.0);
  }
  return s;
}

size_t common_prefix(const std::vector<std::vector<int32_t>>& prompts) {
  if (prompts.empty()) throw std::invalid_argument("common_prefix: no prompt");
  size_t n = prompts.front().size();
  for (const auto& p : prompts) {
    size_t i = 0;
    while (i < n && i < p.size() && p[i] == prompts.front()[i]) ++i;
    n = i;
  }
  return n;
}

}  // namespace adakv::eval
