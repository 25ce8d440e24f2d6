// Multi-key passkey retrieval for query-agnostic compression: one document hides several 5-digit
// pass keys, each the key of a named door ("The pass key of the red door is 12345. ..."), one
// needle per depth band; each key is asked in its own question ("What is the pass key of the red
// door? ...") after the document. The document alone is the context that is compressed once; the
// questions come after it, so the compression cannot know which key will be asked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/eval/prompt_builder.h"

namespace adakv::eval {

// Most keys one document holds: one door name each.
inline constexpr size_t kMaxPasskeyDoors = 8;

// The doors' names. kColors (red, blue, green, yellow, ...) is the default, so that grids run
// with it reproduce; but blue, green and yellow are also words of the filler ("The sky is
// blue."), hundreds of times in a long document, so a question about those doors also tests
// telling the needle's word from the filler's. kDistinct's names (red, purple, orange, white,
// ...) occur nowhere else in the document: a question names one place.
enum class DoorNames { kColors, kDistinct };

// "colors" / "distinct"; std::invalid_argument naming the value otherwise.
DoorNames parse_door_names(const std::string& name);
std::string to_string(DoorNames names);

struct MultiSample {
  std::string document;                 // intro and haystack with every needle
  std::vector<std::string> questions;   // [key]: asked after the document
  std::vector<std::string> answers;     // [key]: the digits
  std::vector<std::string> references;  // [key]: a whole right answer, for teacher forcing
  std::vector<double> depths;           // [key]: needle offset / haystack length, in [0, 1]
  size_t document_tokens = 0;           // count(document)
};

// The user message of question k: the document, a blank line, the question.
std::string question_prompt(const MultiSample& s, size_t k);

// A document of at most `target_tokens` (as `count` measures it, chat template included) whose
// needle k lies in depth band [k / keys, (k + 1) / keys) of the haystack, away from the band's
// edges; the keys (distinct) and the needles' places come from `seed`. Throws
// std::invalid_argument when keys is 0 or above kMaxPasskeyDoors, or the needles alone do not fit.
// Door k is names' k-th; a seed draws the same keys and places under either names.
MultiSample make_passkey_multi(size_t target_tokens, size_t keys, uint64_t seed,
                               const TokenCounter& count, DoorNames names = DoorNames::kColors);

// Length of the longest common prefix of `prompts` (at least one): the tokens of the shared
// context when every prompt is that context followed by its own question.
size_t common_prefix(const std::vector<std::vector<int32_t>>& prompts);

}  // namespace adakv::eval
