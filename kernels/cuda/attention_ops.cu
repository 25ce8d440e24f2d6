// The attention group's kernels (attention_ops.h), their index math and softmax steps in
// attention_math.cuh, the KV elements' decoding in kv_elements.cuh.
//
// Both ops run one block of kAttnThreads threads per (query row, query head), grid-stride over
// those items; the block folds the row over its visible keys in tiles of kKeyTile keys with an
// online softmax (attention_math.cuh says the order), so nothing larger than a tile of scores
// is ever formed:
//   1. thread j < n of the tile records where key j's K and V rows are (and their E4M3 scales);
//   2. each warp takes keys j = warp, warp + kAttnWarps, ...: its lanes sum q . k_j over
//      d = lane, lane + 32, ... and fold their partials with a butterfly of shuffles;
//   3. every thread forms the tile's maximum and the weights' sum itself, in key order (the
//      same values in every thread, no reduction tree), thread j the weight of key j;
//   4. thread t owns acc[d] for d = t, t + kAttnThreads, ... and adds the tile's weighted V rows
//      in key order.
// The query row and the accumulator sit in dynamic shared memory (2 * head_dim floats), so any
// head size up to kMaxHeadDim runs.
//
// attention_paged reads its descriptors (PagedSequence) from device memory, as the contract
// says (the runtime uploads them, kernels/backend.h): a one-block kernel first checks every
// sequence and head as the CPU twin does and lays the sequences' rows end to end (row offsets
// in scratch); the host reads back whether all is well and how many rows there are (one wait for
// the stream), throws std::invalid_argument naming the op before anything is written when the
// CPU would, and otherwise launches one item per (row, query head). A row finds its sequence by
// a binary search of the offsets. Each item's arithmetic depends on its own row and head only,
// so a sequence's output is bit for bit the same alone or in any batch.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_math.cuh"
#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_elements.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/stream_scratch.cuh"

namespace adakv::kernels::cuda {
namespace {

constexpr unsigned kAttnThreads = 128;
constexpr unsigned kAttnWarps = kAttnThreads / kAttnWarp;
// The query row and the accumulator take 2 * head_dim floats of dynamic shared memory, within
// the 48 KiB a block gets without opting in (the tile's arrays take about 2 KiB more).
constexpr size_t kMaxHeadDim = 4096;

void reject(const char* op) {
  check(Status::kInvalidArgument, op);
}

void check_head_dim(size_t head_dim, const char* op) {
  if (head_dim > kMaxHeadDim) {
    throw std::runtime_error(std::string("cuda backend: ") + op + " with a head size above " +
                             std::to_string(kMaxHeadDim) + " is not implemented");
  }
}

// Where key j of a row's head is: its K and V rows and, for E4M3, their scales.
struct KeyRef {
  const uint8_t* k;
  const uint8_t* v;
  float k_scale, v_scale;
};

struct TileShared {
  KeyRef refs[kKeyTile];
  float scores[kKeyTile];
  float weights[kKeyTile];
};

// out[0..dim) <- attention of the query row q[0..dim) over keys 0..n_keys-1 (n_keys >= 1),
// key j found by ref_of(j), its elements stored as D. Every thread of the block calls it with
// the same arguments; q_s and acc are dim floats of shared memory each.
template <KvDtype D, typename RefOf>
__device__ void attend_row(const float* q, float* out, size_t n_keys, size_t dim, float scale,
                           const RefOf& ref_of, TileShared& sh, float* q_s, float* acc) {
  const unsigned t = threadIdx.x, lane = t % kAttnWarp, warp = t / kAttnWarp;
  __syncthreads();  // the previous item is done with the shared arrays
  for (size_t d = t; d < dim; d += kAttnThreads) {
    q_s[d] = q[d];
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (size_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const unsigned n = static_cast<unsigned>(n_keys - j0 < kKeyTile ? n_keys - j0 : kKeyTile);
    __syncthreads();  // q_s is written; the previous tile's arrays are read
    if (t < n) sh.refs[t] = ref_of(j0 + t);
    __syncthreads();
    for (unsigned j = warp; j < n; j += kAttnWarps) {
      const KeyRef r = sh.refs[j];
      float partial = 0.0f;
      for (size_t d = lane; d < dim; d += kAttnWarp) {
        partial = attn_dot_step(partial, q_s[d], kv_load_element(r.k, D, d, r.k_scale));
      }
      for (unsigned offset = kAttnWarp / 2; offset > 0; offset /= 2) {
        partial += __shfl_xor_sync(0xffffffffu, partial, offset);
      }
      if (lane == 0) sh.scores[j] = attn_score(partial, scale);
    }
    __syncthreads();
    const float m_new = fmaxf(m, attn_tile_max(sh.scores, n));
    const float correction = attn_correction(m, m_new);
    if (t < n) sh.weights[t] = attn_weight(sh.scores[t], m_new);
    __syncthreads();
    l = attn_running_sum(l, correction, sh.weights, n);
    m = m_new;
    for (size_t d = t; d < dim; d += kAttnThreads) {
      float a = attn_rescale(acc[d], correction);
      for (unsigned j = 0; j < n; ++j) {
        a = attn_value_step(a, sh.weights[j],
                            kv_load_element(sh.refs[j].v, D, d, sh.refs[j].v_scale));
      }
      acc[d] = a;
    }
  }
  for (size_t d = t; d < dim; d += kAttnThreads) out[d] = attn_output(acc[d], l);
}

// ---- attention_causal ---------------------------------------------------------------------------

struct CausalArgs {
  float* out;
  const float* q;
  const float* k;
  const float* v;
  size_t T, n_kv, Hq, group, dim, q_stride, kv_stride, out_stride;
  float scale;
};

// Item = t * Hq + h: query t, query head h, over KV head h / group.
__global__ void __launch_bounds__(kAttnThreads) attention_causal_kernel(CausalArgs a) {
  __shared__ TileShared sh;
  extern __shared__ float dynamic_shared[];
  float* q_s = dynamic_shared;
  float* acc = dynamic_shared + a.dim;
  const size_t items = a.T * a.Hq;
  for (size_t item = blockIdx.x; item < items; item += gridDim.x) {
    const size_t t = item / a.Hq, h = item % a.Hq;
    const size_t column = h / a.group * a.dim;
    const auto ref_of = [&](size_t j) {
      return KeyRef{reinterpret_cast<const uint8_t*>(a.k + j * a.kv_stride + column),
                    reinterpret_cast<const uint8_t*>(a.v + j * a.kv_stride + column), 1.0f, 1.0f};
    };
    attend_row<KvDtype::kF32>(a.q + t * a.q_stride + h * a.dim,
                              a.out + t * a.out_stride + h * a.dim, causal_visible(a.n_kv, a.T, t),
                              a.dim, a.scale, ref_of, sh, q_s, acc);
  }
}

// ---- attention_paged ----------------------------------------------------------------------------

// What the check kernel hands back to the host.
struct PagedCheck {
  unsigned long long rows;  // the batch's query rows (valid when bad == 0)
  unsigned bad;             // nonzero: some sequence or head fails the CPU's checks
};

// One block: checks every (sequence, KV head) pair, then (thread 0, when all pass) lays the
// sequences' rows end to end: offsets[s] = first row of sequence s, offsets[n_seqs] = rows.
__global__ void paged_check_kernel(const PagedSequence* seqs, size_t n_seqs, size_t Hq, size_t Hkv,
                                   size_t head_dim, size_t block_tokens,
                                   unsigned long long* offsets, PagedCheck* result) {
  __shared__ unsigned bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (size_t item = threadIdx.x; item < n_seqs * Hkv; item += blockDim.x) {
    if (!paged_head_ok(seqs[item / Hkv], item % Hkv, Hq, head_dim, block_tokens)) {
      atomicOr(&bad, 1u);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long rows = 0;
    if (bad == 0) {
      for (size_t s = 0; s < n_seqs; ++s) {
        offsets[s] = rows;
        rows += seqs[s].n_queries;
      }
      offsets[n_seqs] = rows;
    }
    result->rows = rows;
    result->bad = bad;
  }
}

struct PagedArgs {
  const PagedSequence* seqs;
  size_t n_seqs;
  const unsigned long long* offsets;
  unsigned long long rows;
  const uint8_t* pool;
  KvGeometry g;
  size_t Hq, group;
  float scale;
};

// Item = r * Hq + h: batch row r (new query i of sequence s), query head h, over KV head
// h / group of that sequence.
template <KvDtype D>
__global__ void __launch_bounds__(kAttnThreads) attention_paged_kernel(PagedArgs a) {
  __shared__ TileShared sh;
  extern __shared__ float dynamic_shared[];
  const size_t dim = a.g.head_dim;
  float* q_s = dynamic_shared;
  float* acc = dynamic_shared + dim;
  const unsigned long long items = a.rows * a.Hq;
  for (unsigned long long item = blockIdx.x; item < items; item += gridDim.x) {
    const unsigned long long r = item / a.Hq;
    const size_t h = static_cast<size_t>(item % a.Hq);
    const size_t s = seq_of_row(a.offsets, a.n_seqs, r);
    const size_t i = static_cast<size_t>(r - a.offsets[s]);
    const PagedSequence seq = a.seqs[s];
    const size_t head = h / a.group;
    const int32_t* ids = seq.block_ids[head];
    const KvGeometry& g = a.g;
    const auto ref_of = [&](size_t j) {
      const uint8_t* block = a.pool + paged_block_offset(ids, g, j);
      const size_t row = j % g.block_tokens;
      KeyRef ref{block + kv_row_offset(g, 0, row), block + kv_row_offset(g, 1, row), 1.0f, 1.0f};
      if (D == KvDtype::kE4M3) {
        ref.k_scale = kv_load_scale(block + kv_scale_offset(g, 0, row));
        ref.v_scale = kv_load_scale(block + kv_scale_offset(g, 1, row));
      }
      return ref;
    };
    attend_row<D>(seq.q + i * seq.q_stride + h * dim, seq.out + i * seq.out_stride + h * dim,
                  paged_visible(seq.lengths[head], seq.n_queries, i), dim, a.scale, ref_of, sh, q_s,
                  acc);
  }
}

template <KvDtype D>
void launch_paged(const PagedArgs& a, cudaStream_t stream) {
  const size_t items = static_cast<size_t>(a.rows) * a.Hq;
  const size_t shared = 2 * a.g.head_dim * sizeof(float);
  attention_paged_kernel<D>
      <<<static_cast<unsigned>(std::min(items, kMaxBlocks)), kAttnThreads, shared, stream>>>(a);
  check_launch("attention_paged_kernel");
}

}  // namespace

void attention_causal(cudaStream_t stream, float* out, const float* q, const float* k,
                      const float* v, size_t T, size_t n_kv, size_t Hq, size_t Hkv, size_t Dh,
                      size_t q_stride, size_t kv_stride, size_t out_stride, float scale) {
  if (Hkv == 0 || Hq % Hkv != 0 || T > n_kv || Dh == 0) reject("attention_causal");
  if (T == 0 || Hq == 0) return;
  check_head_dim(Dh, "attention_causal");
  const CausalArgs a{out,      q,  k,        v,         T,          n_kv, Hq,
                     Hq / Hkv, Dh, q_stride, kv_stride, out_stride, scale};
  const size_t items = T * Hq, shared = 2 * Dh * sizeof(float);
  attention_causal_kernel<<<static_cast<unsigned>(std::min(items, kMaxBlocks)), kAttnThreads,
                            shared, stream>>>(a);
  check_launch("attention_causal_kernel");
}

void attention_paged(cudaStream_t stream, const PagedSequence* seqs, size_t n_seqs,
                     const uint8_t* pool, const KvBlockLayout& layout, size_t Hq, size_t Hkv,
                     float scale) {
  if (Hkv == 0 || Hq % Hkv != 0 || layout.block_tokens == 0 || layout.head_dim == 0 ||
      layout.dtype > KvDtype::kE4M3) {
    reject("attention_paged");
  }
  if (n_seqs > 0 && (!seqs || !pool)) reject("attention_paged");
  if (n_seqs == 0) return;

  // The check's result, then the row offsets.
  constexpr size_t kOffsetsAt = 16;
  static_assert(sizeof(PagedCheck) <= kOffsetsAt);
  KvScratch scratch(stream, kOffsetsAt + (n_seqs + 1) * sizeof(unsigned long long),
                    "cudaMallocAsync (attention_paged scratch)");
  auto* result = scratch.as<PagedCheck>();
  auto* offsets = reinterpret_cast<unsigned long long*>(scratch.as<uint8_t>() + kOffsetsAt);
  paged_check_kernel<<<1, kThreads, 0, stream>>>(seqs, n_seqs, Hq, Hkv, layout.head_dim,
                                                 layout.block_tokens, offsets, result);
  check_launch("paged_check_kernel");
  PagedCheck host{};
  read_back(stream, &host, result, sizeof host, "attention_paged: checking the sequences");
  if (host.bad != 0) reject("attention_paged");
  if (host.rows == 0 || Hq == 0) return;
  check_head_dim(layout.head_dim, "attention_paged");

  const PagedArgs a{seqs, n_seqs,   offsets, host.rows, pool, kv_geometry(layout),
                    Hq,   Hq / Hkv, scale};
  switch (layout.dtype) {
    case KvDtype::kF32:
      launch_paged<KvDtype::kF32>(a, stream);
      break;
    case KvDtype::kBF16:
      launch_paged<KvDtype::kBF16>(a, stream);
      break;
    case KvDtype::kE4M3:
      launch_paged<KvDtype::kE4M3>(a, stream);
      break;
  }
}

}  // namespace adakv::kernels::cuda
