// Builds one retrieval prompt of an exact token length: an intro, a haystack of filler units
// with a needle inserted at a chosen depth, then the question. Shared by passkey and NIAH.
//
// The user message is  intro "\n\n" haystack "\n\n" question,  where the haystack is the units
// (sentences) taken in order from `first_unit` (cycling), cut at a word so that the whole
// prompt, as the counter measures it, is as close to the target as the words allow (never
// longer). The needle goes between two units: the boundary whose token offset is nearest to
// depth * haystack tokens (depth 0 = first thing of the haystack, 1 = last).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace adakv::eval {

// Tokens of the whole prompt (chat template included) whose user message is `user_text`.
using TokenCounter = std::function<size_t(const std::string& user_text)>;

struct TaskText {
  std::string intro;      // before the haystack (may be empty)
  std::string needle;     // the sentence that carries the answer
  std::string question;   // after the haystack
  std::string answer;     // the digits the model must produce
  std::string reference;  // a whole right answer, as the model writes one (teacher-forced)
};

struct Sample {
  std::string user_text;       // the message to send (chat-wrapped by the caller's counter)
  std::string answer;          // expected digits
  std::string reference;       // TaskText::reference
  size_t prompt_tokens = 0;    // counter(user_text)
  size_t haystack_tokens = 0;  // estimated tokens of the haystack without the needle
  size_t needle_offset = 0;    // estimated haystack tokens before the needle
  double depth = 0;            // needle_offset / haystack_tokens: the depth actually reached
};

// `units` must be non-empty and hold at least one word. Throws std::invalid_argument when even
// an empty haystack does not fit `target_tokens` or depth is outside [0, 1].
Sample build_sample(const TaskText& text, const std::vector<std::string>& units, size_t first_unit,
                    size_t target_tokens, double depth, const TokenCounter& count);

// Deterministic random numbers: the same seed gives the same prompts on every platform
// (std::uniform_int_distribution is implementation-defined, so it is not used).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();                             // splitmix64
  uint64_t uniform(uint64_t lo, uint64_t hi);  // in [lo, hi]

 private:
  uint64_t state_;
};

// One seed per prompt of a grid, from the run's seed and the cell's coordinates.
uint64_t prompt_seed(uint64_t seed, size_t length, size_t depth_index, size_t trial);

}  // namespace adakv::eval
