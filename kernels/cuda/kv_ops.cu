// The KV pool's kernels (kv_ops.h), their per-element math in kv_elements.cuh.
//
// Stores (kv_append, kv_block_write): one warp per row of K or V; for E4M3 the lanes fold the
// row's max |x| by a shuffle tree (the same maximum in any order) before each lane encodes its
// elements and lane 0 stores the scale. Reads (kv_gather, kv_block_read): one thread per
// element. kv_copy_rows: every source slot's bytes go to scratch first, then to the
// destinations (a second kernel on the same stream), so a move list may read slots that it also
// writes (compaction in place).
//
// The slot numbers live in device memory: the ops that range-check them on the CPU take their
// smallest value back to the host first (a one-block reduction, one wait for the stream) and
// throw std::invalid_argument naming the op before anything is written. Slots past the pool's
// end and repeated destinations are not checked, as on the CPU (the pool's size is not an
// argument).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_elements.cuh"
#include "kernels/cuda/kv_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/stream_scratch.cuh"
#include "kernels/ops.h"

namespace adakv::kernels::cuda {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = kThreads / kWarp;

bool valid_layout(const KvBlockLayout& layout) {
  return layout.block_tokens > 0 && layout.head_dim > 0 && layout.dtype <= KvDtype::kE4M3;
}

// kv_block_write's and kv_block_read's rows: row0 + n within the block.
bool valid_rows(const KvBlockLayout& layout, size_t row0, size_t n) {
  return valid_layout(layout) && row0 <= layout.block_tokens && n <= layout.block_tokens - row0;
}

void reject(const char* op) {
  check(Status::kInvalidArgument, op);
}

// ---- The slots' range ---------------------------------------------------------------------------

// One block: out[0] = the smallest of a[0..na) and b[0..nb) (INT_MAX when both are empty).
__global__ void smallest_slot_kernel(const int32_t* a, size_t na, const int32_t* b, size_t nb,
                                     int32_t* out) {
  __shared__ int32_t lo[kThreads];
  int32_t m = INT_MAX;
  for (size_t i = threadIdx.x; i < na; i += blockDim.x) m = min(m, a[i]);
  for (size_t i = threadIdx.x; i < nb; i += blockDim.x) m = min(m, b[i]);
  lo[threadIdx.x] = m;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) lo[threadIdx.x] = min(lo[threadIdx.x], lo[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = lo[0];
}

// The smallest slot of a[0..na) and b[0..nb) (device memory), read back to the host.
int32_t smallest_slot(cudaStream_t stream, const int32_t* a, size_t na, const int32_t* b, size_t nb,
                      const char* op) {
  const std::string what = std::string(op) + ": slot range";
  KvScratch result(stream, sizeof(int32_t), what.c_str());
  smallest_slot_kernel<<<1, kThreads, 0, stream>>>(a, na, b, nb, result.as<int32_t>());
  check_launch("smallest_slot_kernel");
  int32_t host = 0;
  read_back(stream, &host, result.as<int32_t>(), sizeof host, what.c_str());
  return host;
}

// ---- Stores -------------------------------------------------------------------------------------

// Row `row` of the K (which = 0) or V part of `block` <- x[0..head_dim) converted to the pool's
// dtype (with its scale for E4M3), by the 32 lanes of one warp, all of which call it.
__device__ void write_row_warp(uint8_t* block, const KvGeometry& g, int which, size_t row,
                               const float* x, unsigned lane) {
  uint8_t* dst = block + kv_row_offset(g, which, row);
  float scale = 1.0f;
  if (g.dtype == KvDtype::kE4M3) {
    float amax = 0.0f;
    for (size_t d = lane; d < g.head_dim; d += kWarp) amax = e4m3_amax_step(amax, x[d]);
    for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
      amax = e4m3_amax_merge(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    }
    scale = e4m3_row_scale(amax);
    if (lane == 0) kv_store_scale(block + kv_scale_offset(g, which, row), scale);
  }
  for (size_t d = lane; d < g.head_dim; d += kWarp) kv_store_element(dst, g.dtype, d, x[d], scale);
}

// Where the n source rows of a store go. Source row i (of K, and of V likewise) starts at
// (i / n_heads) * token_stride + (i % n_heads) * head_dim floats. With slots, row i goes to slot
// slots[i] of the pool at `base` (nothing for -1); without, to row row0 + i of the block at
// `base`.
struct StoreRows {
  uint8_t* base;
  const int32_t* slots;
  size_t row0;
  const float* k;
  const float* v;
  size_t token_stride, n_heads, n;
};

// One warp per (row i, K or V): 2 * n warp tasks, grid-stride.
__global__ void store_rows_kernel(StoreRows s, KvGeometry g) {
  const unsigned lane = threadIdx.x % kWarp;
  const size_t warps = size_t{gridDim.x} * (blockDim.x / kWarp);
  for (size_t task = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp; task < 2 * s.n;
       task += warps) {
    const size_t i = task / 2;
    const int which = static_cast<int>(task % 2);
    uint8_t* block = s.base;
    size_t row = s.row0 + i;
    if (s.slots) {
      const int32_t slot = s.slots[i];  // the same for the whole warp
      if (slot < 0) continue;
      block = s.base + kv_slot_block(g, static_cast<size_t>(slot));
      row = kv_slot_row(g, static_cast<size_t>(slot));
    }
    const float* x =
        (which == 0 ? s.k : s.v) + (i / s.n_heads) * s.token_stride + (i % s.n_heads) * g.head_dim;
    write_row_warp(block, g, which, row, x, lane);
  }
}

void launch_store_rows(const StoreRows& s, const KvGeometry& g, cudaStream_t stream) {
  const size_t blocks = (2 * s.n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  store_rows_kernel<<<static_cast<unsigned>(std::min(blocks, kMaxBlocks)), kThreads, 0, stream>>>(
      s, g);
  check_launch("store_rows_kernel");
}

// ---- Reads --------------------------------------------------------------------------------------

// Where the n rows of a read come from and go: row i from slot slots[i] of the pool at `base`,
// or (slots null) from row row0 + i of the block at `base`; K into k + i * stride, V into
// v + i * stride unless v is null.
struct ReadRows {
  const uint8_t* base;
  const int32_t* slots;
  size_t row0;
  float* k;
  float* v;
  size_t stride, n;
};

// One thread per element of K (and of V).
__global__ void read_rows_kernel(ReadRows r, KvGeometry g) {
  const size_t per_part = r.n * g.head_dim;
  const size_t total = per_part * (r.v ? 2 : 1);
  for (size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total;
       e += size_t{gridDim.x} * blockDim.x) {
    const int which = static_cast<int>(e / per_part);
    const size_t i = e % per_part / g.head_dim, d = e % g.head_dim;
    const uint8_t* block = r.base;
    size_t row = r.row0 + i;
    if (r.slots) {
      const size_t slot = static_cast<size_t>(r.slots[i]);
      block = r.base + kv_slot_block(g, slot);
      row = kv_slot_row(g, slot);
    }
    const float scale =
        g.dtype == KvDtype::kE4M3 ? kv_load_scale(block + kv_scale_offset(g, which, row)) : 1.0f;
    float* out = which == 0 ? r.k : r.v;
    out[i * r.stride + d] =
        kv_load_element(block + kv_row_offset(g, which, row), g.dtype, d, scale);
  }
}

void launch_read_rows(const ReadRows& r, const KvGeometry& g, cudaStream_t stream) {
  read_rows_kernel<<<blocks_for(r.n * g.head_dim * (r.v ? 2 : 1)), kThreads, 0, stream>>>(r, g);
  check_launch("read_rows_kernel");
}

// ---- Row copies ---------------------------------------------------------------------------------

// flat[i][b] <- byte b of slot src[i] (kv_slot_byte_offset's order), for i < n.
__global__ void snapshot_slots_kernel(uint8_t* flat, const uint8_t* pool, KvGeometry g,
                                      const int32_t* src, size_t n) {
  const size_t slot_bytes = kv_slot_bytes(g), total = n * slot_bytes;
  for (size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total;
       e += size_t{gridDim.x} * blockDim.x) {
    const size_t i = e / slot_bytes;
    flat[e] = pool[kv_slot_byte_offset(g, static_cast<size_t>(src[i]), e % slot_bytes)];
  }
}

// Byte b of slot dst[i] <- flat[i][b], for i < n with src[i] != dst[i] (the rest already hold
// their bytes).
__global__ void restore_slots_kernel(uint8_t* pool, const uint8_t* flat, KvGeometry g,
                                     const int32_t* src, const int32_t* dst, size_t n) {
  const size_t slot_bytes = kv_slot_bytes(g), total = n * slot_bytes;
  for (size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total;
       e += size_t{gridDim.x} * blockDim.x) {
    const size_t i = e / slot_bytes;
    if (src[i] == dst[i]) continue;
    pool[kv_slot_byte_offset(g, static_cast<size_t>(dst[i]), e % slot_bytes)] = flat[e];
  }
}

}  // namespace

void kv_append(cudaStream_t stream, uint8_t* pool, const KvBlockLayout& layout, const float* k,
               const float* v, size_t stride, size_t n_tokens, size_t n_heads,
               const int32_t* slots) {
  if (!valid_layout(layout)) reject("kv_append");
  const size_t n = n_tokens * n_heads;
  if (n == 0) return;
  if (!pool || !k || !v || !slots) reject("kv_append");
  if (n_tokens > 1 && stride < n_heads * layout.head_dim) reject("kv_append");
  // -1 stores nothing; any other negative slot is an error.
  if (smallest_slot(stream, slots, n, nullptr, 0, "kv_append") < -1) reject("kv_append");
  launch_store_rows(StoreRows{pool, slots, 0, k, v, stride, n_heads, n}, kv_geometry(layout),
                    stream);
}

void kv_copy_rows(cudaStream_t stream, uint8_t* pool, const KvBlockLayout& layout,
                  const int32_t* src, const int32_t* dst, size_t n) {
  if (!valid_layout(layout)) reject("kv_copy_rows");
  if (n == 0) return;
  if (!pool || !src || !dst) reject("kv_copy_rows");
  if (smallest_slot(stream, src, n, dst, n, "kv_copy_rows") < 0) reject("kv_copy_rows");
  const KvGeometry g = kv_geometry(layout);
  const size_t bytes = n * kv_slot_bytes(g);
  KvScratch flat(stream, bytes, "cudaMallocAsync (kv_copy_rows snapshot)");
  snapshot_slots_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(flat.as<uint8_t>(), pool, g,
                                                                    src, n);
  check_launch("snapshot_slots_kernel");
  restore_slots_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(pool, flat.as<uint8_t>(), g, src,
                                                                   dst, n);
  check_launch("restore_slots_kernel");
}

void kv_gather(cudaStream_t stream, float* k, float* v, size_t stride, const uint8_t* pool,
               const KvBlockLayout& layout, const int32_t* slots, size_t n) {
  if (!valid_layout(layout)) reject("kv_gather");
  if (n == 0) return;
  if (!k || !pool || !slots) reject("kv_gather");
  if (n > 1 && stride < layout.head_dim) reject("kv_gather");
  if (smallest_slot(stream, slots, n, nullptr, 0, "kv_gather") < 0) reject("kv_gather");
  launch_read_rows(ReadRows{pool, slots, 0, k, v, stride, n}, kv_geometry(layout), stream);
}

void kv_block_write(cudaStream_t stream, uint8_t* block, const KvBlockLayout& layout, size_t row0,
                    const float* k, const float* v, size_t n, size_t src_stride) {
  if (!valid_rows(layout, row0, n)) reject("kv_block_write");
  if (n == 0) return;
  if (!block || !k || !v) reject("kv_block_write");
  if (n > 1 && src_stride < layout.head_dim) reject("kv_block_write");  // rows would overlap
  launch_store_rows(StoreRows{block, nullptr, row0, k, v, src_stride, 1, n}, kv_geometry(layout),
                    stream);
}

void kv_block_read(cudaStream_t stream, const uint8_t* block, const KvBlockLayout& layout,
                   size_t row0, size_t n, float* k, float* v) {
  if (!valid_rows(layout, row0, n)) reject("kv_block_read");
  if (n == 0) return;
  if (!block || !k || !v) reject("kv_block_read");
  launch_read_rows(ReadRows{block, nullptr, row0, k, v, layout.head_dim, n}, kv_geometry(layout),
                   stream);
}

}  // namespace adakv::kernels::cuda
