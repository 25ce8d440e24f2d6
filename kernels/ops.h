// The op set the model's forward pass is written against. kernels/cpu implements it; the
// CUDA backend implements the same signatures. Raw pointers, sizes and strides; row-major;
// the stream comes last (ignored on the CPU); every op returns a Status.
//
// Shapes use the names: T tokens, D model width, Hq query heads, Hkv KV heads, Dh head size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/half.h"
#include "kernels/kv_layout.h"
#include "kernels/rope_frequencies.h"

namespace adakv::kernels {

enum class Status { kOk, kInvalidArgument };

// A CUDA stream on the GPU backend; the CPU backend ignores it.
struct Stream {
  void* handle = nullptr;
};

// Throws std::invalid_argument naming `op` unless s is kOk.
void check(Status s, const char* op);

// out[t][:] = x[t][:] / rms(x[t][:]) * w[:]   x, out: [rows][dim] (may alias), w: [dim]
Status rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim, float eps,
               Stream stream = {});

// y[m][n] = sum_k x[m][k] * w[n][k]   x: [M][K], w: [N][K] (PyTorch's [out][in]), y: [M][N].
// When accumulate is set, adds to y instead of overwriting it.
Status matmul(float* y, const float* x, const float* w, size_t M, size_t N, size_t K,
              bool accumulate = false, Stream stream = {});

// RoPE on adjacent pairs, in place (the layout of llama GGUF files): (x[2i], x[2i+1]) rotated
// by pos * freqs.inv_freq[i] with cos and sin times freqs.cos_sin_scale, for 2i < rot_dim.
// x: [T][n_heads][head_dim] with row stride `token_stride` floats; positions: [T].
Status rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t token_stride, const RopeFrequencies& freqs, Stream stream = {});

// SwiGLU: out[t][i] = silu(gate_up[t][i]) * gate_up[t][F + i]   gate_up: [T][2F], out: [T][F].
Status swiglu(float* out, const float* gate_up, size_t T, size_t F, Stream stream = {});

// out[i] = a[i] + b[i] (out may alias a or b).
Status add(float* out, const float* a, const float* b, size_t n, Stream stream = {});

// y[r][i] += bias[i] for r < rows, i < n: a linear layer's bias on its output rows, which lie ldy
// floats apart (the q, k and v of one token share a row). kInvalidArgument when ldy < n.
Status add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy, Stream stream = {});

// out[t][:] = table[ids[t]][:]   table: [n_rows][dim]; ids outside [0, n_rows) -> kInvalidArgument.
Status embed(float* out, const float* table, const int32_t* ids, size_t T, size_t n_rows,
             size_t dim, Stream stream = {});

// Causal grouped-query attention of T new queries over a contiguous cache of n_kv tokens whose
// last T entries are the new tokens (query t sits at cache index n_kv - T + t and sees cache
// entries 0..n_kv-T+t).
//   q:   [T][Hq][Dh], row stride q_stride floats
//   k,v: [n_kv][Hkv][Dh], row stride kv_stride floats
//   out: [T][Hq][Dh], row stride out_stride floats
// Query head h reads KV head h / (Hq / Hkv). Scores are scaled by `scale`. Blocked with an
// online softmax, so no [T][n_kv] matrix is ever materialised.
Status attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale, Stream stream = {});

// ---- Head-paged KV cache (Ada-KV) ----------------------------------------------------------

// Writes n token rows (k, v: [n][head_dim], row stride src_stride floats) into `block` at
// rows row0..row0+n-1 (row0 + n <= block_tokens), converting to the block's dtype.
Status kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0, const float* k,
                      const float* v, size_t n, size_t src_stride, Stream stream = {});
// Reads rows row0..row0+n-1 back as float32 into k, v ([n][head_dim], contiguous).
Status kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0, size_t n,
                     float* k, float* v, Stream stream = {});

// One sequence of a paged attention batch. Each KV head g holds lengths[g] tokens in the blocks
// block_ids[g][0..ceil(lengths[g] / block_tokens)), in token order; lengths may differ per head
// (Ada-KV budgets). The sequence's n_queries new tokens are the LAST n_queries entries of every
// head, so new query i (0-based) sees the first lengths[g] - n_queries + i + 1 entries of head g.
struct PagedSequence {
  const int32_t* const* block_ids;  // [Hkv] -> block ids of that head
  const uint32_t* lengths;          // [Hkv]
  size_t n_queries;                 // >= 1, <= min(lengths)
  const float* q;                   // [n_queries][Hq][head_dim], row stride q_stride floats
  size_t q_stride;
  float* out;  // [n_queries][Hq][head_dim], row stride out_stride floats
  size_t out_stride;
};

// Attention of every sequence's new queries over its ragged per-head paged cache (GQA: query
// head h reads KV head h / (Hq / Hkv)). No eviction or sorting happens here.
Status attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                       const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale,
                       Stream stream = {});

// ---- The KV pool: blocks of one layout side by side, block b at pool + b * block_bytes(); a
// slot is block id * block_tokens + row in the block ----------------------------------------

// Stores the K and V rows of n_tokens tokens of n_heads heads each (token t, head h at
// k + t * stride + h * head_dim, and v likewise) at slot slots[t * n_heads + h], converted as
// kv_block_write converts (the same bytes). A slot of -1 stores nothing; any other negative slot
// is kInvalidArgument. The slots other than -1 must be distinct.
Status kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                 size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots,
                 Stream stream = {});
// Slot dst[i] <- the bytes slot src[i] held before the call (the K row, the V row and, for
// E4M3, their two scales; nothing is converted), for i < n, so a move list may read slots that
// it also writes (compaction in place). The dst slots must be distinct; negative slots are
// kInvalidArgument.
Status kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                    const int32_t* dst, size_t n, Stream stream = {});
// Row i of k (and of v unless null), stride floats apart, <- slot slots[i] decoded to float32 as
// kv_block_read decodes it. Negative slots are kInvalidArgument.
Status kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                 const KvBlockLayout& layout, const int32_t* slots, size_t n, Stream stream = {});

// dst row i (dst_stride bytes apart) <- src row rows[i] (src_stride bytes apart), row_bytes each,
// for i < n. kInvalidArgument for a negative row, dst rows that overlap each other, or dst's
// rows overlapping the span of src rows read.
Status gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                   size_t row_bytes, const int32_t* rows, size_t n, Stream stream = {});

// Observation-window attention mass, the input of Ada-KV/SnapKV scoring. For each query head h:
// the softmax (over keys 0..j_max, causal) attention of the last W queries (positions
// n-W..n-1) over keys 0..n-1, summed over those W queries:
//   out[h][j] = sum_{i=n-W}^{n-1} [j <= i] softmax_j'(q_i . k_j' * scale)[j]
// q: the W window queries only, [W][Hq][Dh] (row stride q_stride; row 0 is position n-W),
// k: [n][Hkv][Dh] (row stride k_stride), out: [Hq][n]. Only W x n scores per head are formed,
// never n x n. Requires 1 <= W <= n. When peak is not null it receives, from the same pass, the
// largest of those W probabilities instead of their sum ([Hq][n]; 0 where no query reads j).
Status window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                             size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv, size_t Dh,
                             float scale, float* peak = nullptr, Stream stream = {});

// ---- Ada-KV scoring after window_attention_mass ---------------------------------------------

// The weighted look-ahead: for h < Hq and j < prefix, with i = h * n_keys + j and
// iw = h * n_window + j,
//   mass[i] = window_mass[iw] + weight * mass[i]
//   peak[i] = max(window_peak[iw], weight * peak[i])   (when peak is not null)
// Entries j >= prefix are left as they are. peak and window_peak are both null or both given;
// prefix <= n_window and prefix <= n_keys.
Status blend_scores(float* mass, float* peak, const float* window_mass, const float* window_peak,
                    size_t Hq, size_t n_keys, size_t n_window, size_t prefix, float weight,
                    Stream stream = {});

struct ScorePooling;  // kernels/backend.h
// Smoothing along the sequence and aggregation over each GQA group: the first `prefix` entries of
// each row of mass ([Hq] rows, n_keys floats apart) -> scores [Hkv][prefix] (ScorePooling says
// how). scores may alias mass. kInvalidArgument unless Hq % Hkv == 0, prefix <= n_keys,
// kernel >= 1 and shift <= kernel / 2.
Status pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix, size_t Hq,
                   size_t Hkv, const ScorePooling& pooling, Stream stream = {});
// The 1-D pooling of pool_scores: stride 1, padding kernel / 2 (the average counts the padding
// as zeros, like torch's avg_pool1d), the span of position i being
// [i - kernel/2 - shift, i + kernel/2 - shift] clipped to [0, n). Requires shift <= kernel / 2.
void pool1d(const float* in, float* out, size_t n, size_t kernel, bool max_pool, size_t shift = 0);

// float <-> storage conversions used by the KV blocks (exposed for tests).
uint16_t fp32_to_bf16(float x);  // round to nearest even; NaN stays NaN
// float bf16_to_fp32(uint16_t): kernels/half.h.
uint8_t fp32_to_e4m3(float x);  // OCP FP8 E4M3 (no infinities, max 448), round to nearest even,
                                // saturating to +-448; NaN -> 0x7F
float e4m3_to_fp32(uint8_t x);

}  // namespace adakv::kernels
