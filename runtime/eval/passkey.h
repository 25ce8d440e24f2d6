// Passkey retrieval: a random 5-digit key hidden at a chosen depth in the classic repeated
// filler ("The grass is green. The sky is blue. ..."), then "What is the pass key? Answer with
// the number.".
#pragma once

#include <cstdint>

#include "runtime/eval/prompt_builder.h"

namespace adakv::eval {

// A prompt of `target_tokens` (as `count` measures it) with the needle at `depth` in [0, 1];
// the key is drawn from `seed`, so the same arguments give the same sample.
Sample make_passkey(size_t target_tokens, double depth, uint64_t seed, const TokenCounter& count);

}  // namespace adakv::eval
