// The steps of the CUDA kernels of matmul_quant and the embeddings (quant_ops.cu) as
// __host__ __device__ functions of one thread, so that tests/gpu/device_math_quant.cu runs the
// very same index math and arithmetic on the host, thread by thread and phase by phase, for whole
// grids.
//
// matmul_quant: y[m][n] = sum_k x[m][k] W[n][k] on the float paths. A thread block of
// kTileThreads threads owns a tile of S::BM rows of x by S::BN rows of W. Per step of kTileK
// elements of K it stages the step's x tile and the W tile, dequantized by quant_blocks.cuh, in
// shared memory (stage_tile), waits, and each thread multiplies its S::TM x S::TN outputs
// (multiply_tile); after the last step it writes them (store_tile).
//
// Batch invariance: every output is one FMA chain, acc = fma(x[m][k], W[n][k], acc) for
// k = 0, 1, ..., K - 1 from acc = +0 (then y = acc, or y + acc when accumulating), whatever the
// tile shape, the thread, the grid, M, N or the other rows of the call: the tile only decides
// which thread runs which chain. So y[m][n] depends on x[m], W row n and K alone, and both tile
// shapes below give the same bits. (That is also kernels/cpu/quant_interleaved.cpp's float dots
// chain, and the reference of the tests.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/quant_blocks.cuh"
#include "kernels/cuda/quant_plan.h"

namespace adakv::kernels::cuda::qtiles {

using qblocks::fma_rn;

// Elements of K per staging step: one piece of the 32-element formats, 1/8 of a K-quant block.
inline constexpr int kTileK = 32;
inline constexpr int kTileThreads = 256;

// A tile of BM x BN outputs, TM x TN per thread. Thread t handles rows ty + i * TY and columns
// tx + j * TX of the tile (tx = t % TX, ty = t / TX): a warp reads one or two x values (a
// broadcast) and 16 or 32 consecutive W values of a staged column.
template <int BM_, int BN_, int TM_, int TN_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_;
  static constexpr int TX = BN / TN, TY = BM / TM;
  static_assert(BM % TM == 0 && BN % TN == 0 && TX * TY == kTileThreads, "one output per slot");
  static_assert(BM * kTileK % kTileThreads == 0 && BN * kTileK % kTileThreads == 0,
                "staging splits evenly over the threads");
};
// Prefill and batches above kNarrowMaxRows: 64 x 64 outputs, 16 per thread.
using WideTile = TileShape<64, 64, 4, 4>;
// Decode and small batches: 8 x 32 outputs, one per thread, so N / 32 blocks share the weights'
// reading (a wide tile would leave most SMs idle for a single row).
// quant_plan.h's plan_matmul picks it up to kNarrowMaxRows rows: one tile of rows.
using NarrowTile = TileShape<8, 32, 1, 1>;
static_assert(NarrowTile::BM == kNarrowMaxRows, "the narrow tile holds every row it is picked for");

// The staged step: x transposed ([k][m]) and W transposed ([k][n]), one float of padding per
// row so that the staging stores (k varying along a warp) fall in distinct banks.
template <class S>
struct TileSmem {
  float x[kTileK][S::BM + 1];
  float w[kTileK][S::BN + 1];
};

// One matmul_quant call on kRows weights as the kernel sees it. Preconditions (checked by the
// caller): K >= 1, a multiple of the format's block; ldy >= N; the pointers valid for the sizes.
struct MatmulArgs {
  float* y;          // [M][ldy]
  const float* x;    // [M][K]
  const uint8_t* w;  // N rows of row_bytes
  size_t M, N, K, ldy, row_bytes;
  bool accumulate;
};

// Thread `tid`'s share of staging the step at k0 of the tile at (m0, n0): elements outside
// [0, M) x [0, K) or [0, N) x [0, K) are staged as 0 (multiply_tile never reads those of k >= K,
// and the others only feed outputs that are not stored).
template <WeightFormat F, class S>
__host__ __device__ inline void stage_tile(const MatmulArgs& a, size_t m0, size_t n0, size_t k0,
                                           unsigned tid, TileSmem<S>& s) {
  for (unsigned e = tid; e < S::BM * kTileK; e += kTileThreads) {
    const unsigned r = e / kTileK, c = e % kTileK;
    const size_t m = m0 + r, k = k0 + c;
    s.x[c][r] = m < a.M && k < a.K ? a.x[m * a.K + k] : 0.0f;
  }
  for (unsigned e = tid; e < S::BN * kTileK; e += kTileThreads) {
    const unsigned r = e / kTileK, c = e % kTileK;
    const size_t n = n0 + r, k = k0 + c;
    s.w[c][r] = n < a.N && k < a.K ? qblocks::weight_element<F>(a.w + n * a.row_bytes, k) : 0.0f;
  }
}

// Thread `tid`'s outputs += the first `kn` (<= kTileK, the elements of K left) staged elements,
// in k order.
template <class S>
__host__ __device__ inline void multiply_tile(const TileSmem<S>& s, unsigned kn, unsigned tid,
                                              float (&acc)[S::TM][S::TN]) {
  const unsigned tx = tid % S::TX, ty = tid / S::TX;
  for (unsigned c = 0; c < kn; ++c) {
    float xv[S::TM], wv[S::TN];
    for (int i = 0; i < S::TM; ++i) xv[i] = s.x[c][ty + i * S::TY];
    for (int j = 0; j < S::TN; ++j) wv[j] = s.w[c][tx + j * S::TX];
    for (int i = 0; i < S::TM; ++i) {
      for (int j = 0; j < S::TN; ++j) acc[i][j] = fma_rn(xv[i], wv[j], acc[i][j]);
    }
  }
}

// Writes (or adds to y) thread `tid`'s outputs of the tile at (m0, n0) that lie inside M x N.
template <class S>
__host__ __device__ inline void store_tile(const MatmulArgs& a, size_t m0, size_t n0, unsigned tid,
                                           const float (&acc)[S::TM][S::TN]) {
  const unsigned tx = tid % S::TX, ty = tid / S::TX;
  for (int i = 0; i < S::TM; ++i) {
    const size_t m = m0 + ty + i * S::TY;
    if (m >= a.M) continue;
    for (int j = 0; j < S::TN; ++j) {
      const size_t n = n0 + tx + j * S::TX;
      if (n >= a.N) continue;
      float& out = a.y[m * a.ldy + n];
      out = a.accumulate ? add_rn(out, acc[i][j]) : acc[i][j];
    }
  }
}

// ---- Embeddings ---------------------------------------------------------------------------

// Element k of output row t of embed_rows / embed_shard_rows: row id - row_begin of the table
// when the table holds it (row_begin <= id < row_begin + n_rows), else 0. Interleaved: the
// table is n_rows x dim weights in WeightLayout::kInterleaved (F interleavable).
template <WeightFormat F, bool kInterleaved>
__host__ __device__ inline float embed_element(const uint8_t* table, size_t row_bytes, size_t dim,
                                               int32_t id, size_t row_begin, size_t n_rows,
                                               size_t k) {
  const long long local = static_cast<long long>(id) - static_cast<long long>(row_begin);
  if (local < 0 || local >= static_cast<long long>(n_rows)) return 0.0f;
  if constexpr (kInterleaved) {
    return qblocks::interleaved_element<F>(table, dim, static_cast<size_t>(local), k);
  } else {
    return qblocks::weight_element<F>(table + static_cast<size_t>(local) * row_bytes, k);
  }
}

}  // namespace adakv::kernels::cuda::qtiles
