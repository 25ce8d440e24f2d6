#include "runtime/eval/passkey.h"

#include <string>
#include <vector>

namespace adakv::eval {

Sample make_passkey(size_t target_tokens, double depth, uint64_t seed, const TokenCounter& count) {
  static const std::vector<std::string> filler = {
      "The grass is green.", "The sky is blue.",      "The sun is yellow.",
      "Here we go.",         "There and back again.",
  };
  Rng rng(seed);
  const std::string key = std::to_string(rng.uniform(10000, 99999));
  TaskText t;
  t.intro =
      "There is an important piece of information hidden inside a lot of irrelevant text. "
      "Find it and memorize it. I will quiz you about the important information there.";
  t.needle = "The pass key is " + key + ". Remember it. " + key + " is the pass key.";
  t.question = "What is the pass key? Answer with the number.";
  t.answer = key;
  t.reference = "The pass key is " + key + ".";
  return build_sample(t, filler, 0, target_tokens, depth, count);
}

}  // namespace adakv::eval
