// Ada-KV / SnapKV token scores of one layer: how much attention the observation window (the
// last W prompt queries) pays to each earlier position, smoothed along the sequence and
// aggregated over each GQA group. Window positions themselves are always kept, so only the
// prefix (positions 0..n-W-1) is scored.
#pragma once

#include <vector>

#include "kernels/backend.h"
#include "runtime/compression/config.h"

namespace adakv::compression {

// q: [n][Hq][Dh] (row stride q_stride), k: [n][Hkv][Dh] (row stride k_stride), both after RoPE
// and in `backend`'s memory, which runs the scoring; the scores come back in host memory.
// Returns scores [Hkv][n - W], row-major. Requires W < n. With config.pool_sink = s, positions
// 0..s-1 keep their unpooled mass and are zeros to the pooling of the others. When peak_scores
// is not null it receives, in the same shape, the scores of budget_scores = peak: each
// position's largest attention from one observed query, pooled and aggregated the same way.
std::vector<float> score_layer(const float* q, size_t q_stride, const float* k, size_t k_stride,
                               size_t n, size_t Hq, size_t Hkv, size_t Dh,
                               const CompressionConfig& config, std::vector<float>* peak_scores,
                               kernels::Backend& backend);

// The general form: n_obs observed queries at positions n_keys - n_obs .. n_keys - 1 (q_obs:
// [n_obs][Hq][Dh], row stride q_stride) over n_keys keys ([n_keys][Hkv][Dh]). The scored
// prefix is positions 0 .. n_keys - n_obs - 1. score_layer is this with the window's queries;
// with look-ahead the observed queries are the window's followed by the pseudo-queries of the
// tokens decoded after the prompt (their keys then extend k). Requires 1 <= n_obs < n_keys.
// When n_obs > config.window, the queries after the first window ones are look-ahead queries
// and their attention is scaled by config.lookahead_weight (for the peak too). With key_weights
// (host memory, [Hq][n_keys]), each query head's attention to key j (and its peak) is multiplied
// by key_weights[h][j] before pooling and GQA aggregation: output-aware scoring.
std::vector<float> score_observations(const float* q_obs, size_t q_stride, const float* k,
                                      size_t k_stride, size_t n_keys, size_t n_obs, size_t Hq,
                                      size_t Hkv, size_t Dh, const CompressionConfig& config,
                                      std::vector<float>* peak_scores, kernels::Backend& backend,
                                      const std::vector<float>* key_weights = nullptr);

// The smoothing step alone (exposed for tests): 1-D pooling with stride 1 and padding
// kernel/2, like torch's max_pool1d / avg_pool1d (the average counts the padding as zeros).
// shift (<= kernel/2) moves the span of position i back: [i - kernel/2 - shift, i + kernel/2 -
// shift].
void pool1d(const float* in, float* out, size_t n, size_t kernel, Pooling pooling,
            size_t shift = 0);

}  // namespace adakv::compression
