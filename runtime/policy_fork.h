// One prompt prefilled once and forked into several compression policies, run as steps of the
// engine (Worker::execute_step) like any request: a recording sequence takes the prompt in one
// entry and decodes its look-ahead, then each policy gets a fork of it (StepPlan::fork: what
// the policy keeps of the recorded prompt, as if prefilled under it). The forks decode together,
// one step for all, or score a known text. What eval, profile and `generate --compare` run.
//
// Rank 0 only. Each call reconfigures the engine's step pool for its own sequences (the
// caches of an earlier serving loop are dropped). Every policy must share the first one's
// window, pooling, GQA aggregation and look-ahead (the recorded scores depend on them); the
// prefill's outputs do not depend on the policy.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/compression/config.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/worker.h"

namespace adakv::runtime {

// What a recording prefill saw, for the whole model (every rank's heads): the window scores
// [layer][model kv head][prefix] and the tokens `policy` keeps per [layer][model kv head].
struct RecordedPrompt {
  std::vector<std::vector<float>> scores;
  std::vector<std::vector<size_t>> kept;
  double prefill_s = 0;
};

// How well one policy's cache predicts a known continuation of the prompt (teacher forcing).
// Position i scores continuation token i + 1 from the prompt and tokens 0..i; token 0 is left
// out, since the prefill's logits predict it and they do not depend on the policy.
struct ContinuationScore {
  std::vector<double> nll;      // [continuation - 1]: -log p(token), natural log
  std::vector<double> kl;       // KL(full cache || this cache) of the next-token distributions
  std::vector<uint8_t> agrees;  // 1 where the argmax equals the full cache's
  size_t kv_after_prefill_bytes = 0;
  size_t kv_full_after_prefill_bytes = 0;
  double prefill_s = 0;  // the shared prefill (and look-ahead)
  double forward_s = 0;  // this policy's continuation forward
};

// Each policy decodes from its fork of one prefill of request.prompt (request.compression is
// ignored); results are parallel to `policies`. With request.reference, each policy also scores
// that answer on a second fork (GenerateResult::reference_nll). Throws std::invalid_argument
// naming a bad request or policy.
std::vector<GenerateResult> generate_policies(
    Worker& engine, const GenerateRequest& request,
    const std::vector<compression::CompressionConfig>& policies);

// Perplexity under compression: `continuation` goes through each policy's fork in one forward
// and is scored against the uncompressed prompt's predictions of the same tokens. Throws
// std::invalid_argument when the continuation has fewer than 2 tokens or prompt plus
// continuation do not fit the context. Results are parallel to `policies`.
std::vector<ContinuationScore> score_continuation(
    Worker& engine, const GenerateRequest& request, const std::vector<int32_t>& continuation,
    const std::vector<compression::CompressionConfig>& policies);

// Query-agnostic answers ("compress once, ask many"): request.prompt is the context alone,
// prefilled and scored without any question (the observation window is the context's last
// tokens). Each policy forks it once per question; question i is appended to its fork
// uncompressed, as prompt rows, and answered (request.max_tokens, request.sampling), every
// question of a policy in one batch. Results [policy][question]; prefill_s is the context's
// shared prefill, decode_s the question's forward plus its decoding, the KV fields are the
// fork's. request.reference is ignored. Policies that score by reconstruction (KVzip) need
// `repeat`: the pieces that follow the context in the recording (each an instruction to repeat
// it, then a part of the context again), whose queries score the context and are then rolled
// back, piece by piece; their forward and the scoring are compression.lookahead_s. Throws
// std::invalid_argument on no question, an empty one, or context, question and new tokens (or
// context and a piece) that do not fit the model's context. With `scores`, the recording's
// scores come back there too, [layer][kv head of the model][prefix] (Worker's gather).
std::vector<std::vector<GenerateResult>> answer_questions(
    Worker& engine, const GenerateRequest& request,
    const std::vector<std::vector<int32_t>>& questions,
    const std::vector<compression::CompressionConfig>& policies,
    const compression::RepeatPieces& repeat = {},
    std::vector<std::vector<float>>* scores = nullptr);

// Prefills request.prompt recording the window scores of every head, and forks it under
// request.compression (for adakv profile). No token is generated.
RecordedPrompt record_prompt(Worker& engine, const GenerateRequest& request);

}  // namespace adakv::runtime
