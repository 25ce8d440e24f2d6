// The quantized-weight group of the CUDA backend (quant_ops.h): matmul_quant, embed_rows and
// embed_shard_rows, the kernels' per-thread steps in quant_tiles.cuh and the dequantization in
// quant_blocks.cuh (both run on the host by tests/gpu/device_math_quant.cu).
//
// matmul_quant takes the float paths only (the backend's decode_path() is kFloatDots): float32
// activations, weights dequantized to float32 exactly as the CPU's scalar code does, one fp32 FMA
// chain per output in k order (quant_tiles.cuh). kAuto, kFloatGemm and kFloatDots are the same
// kernel; the float formats (F32, F16, BF16) take every path, since their CPU rows never round
// activations either. kRowDots and kInt16Dots on the quantized formats (activations rounded to 8
// or 16 bits) and WeightLayout::kInterleaved are not implemented (std::runtime_error).
// options.row_groups is checked as the CPU checks it and otherwise ignored: it exists because
// OpenBLAS's result for a row depends on the call's M; here no row's result depends on M or on
// the other rows at all, so every grouping gives the bits of one call.
//
// The argument checks and the other host-side decisions are quant_plan.h's. The embeddings read
// their ids on the device: a one-block scan finds the first id outside the table (and, for a
// shard, the first one it holds), read back with one wait for the stream before anything is
// written, so a bad id throws std::invalid_argument as on the CPU.
#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_ops.h"
#include "kernels/cuda/quant_plan.h"
#include "kernels/cuda/quant_tiles.cuh"

namespace adakv::kernels::cuda {
namespace {

using qtiles::kTileK;
using qtiles::kTileThreads;
using qtiles::MatmulArgs;

// Calls fn(std::integral_constant<WeightFormat, F>{}) for the format f (a WeightFormat value).
template <class Fn>
void with_format(WeightFormat f, Fn&& fn) {
  switch (f) {
    case WeightFormat::kF32:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kF32>{});
    case WeightFormat::kF16:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kF16>{});
    case WeightFormat::kBF16:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kBF16>{});
    case WeightFormat::kQ8_0:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ8_0>{});
    case WeightFormat::kQ4_0:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_0>{});
    case WeightFormat::kQ4_1:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_1>{});
    case WeightFormat::kQ5_0:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_0>{});
    case WeightFormat::kQ5_1:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_1>{});
    case WeightFormat::kQ4_K:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_K>{});
    case WeightFormat::kQ5_K:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_K>{});
    case WeightFormat::kQ6_K:
      return fn(std::integral_constant<WeightFormat, WeightFormat::kQ6_K>{});
  }
  throw std::logic_error("quant_ops: a format the caller did not check");
}

// ---- matmul_quant -------------------------------------------------------------------------

// Grid: x over tiles of S::BN weight rows, y (grid-stride) over tiles of S::BM activation rows.
// The phases and their barriers are those the host emulation of the tests runs.
template <WeightFormat F, class S>
__global__ void __launch_bounds__(kTileThreads) matmul_kernel(MatmulArgs a) {
  __shared__ qtiles::TileSmem<S> smem;
  const size_t n0 = static_cast<size_t>(blockIdx.x) * S::BN;
  const size_t m_tiles = (a.M + S::BM - 1) / S::BM;
  for (size_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
    const size_t m0 = mt * S::BM;
    float acc[S::TM][S::TN] = {};
    for (size_t k0 = 0; k0 < a.K; k0 += kTileK) {
      qtiles::stage_tile<F, S>(a, m0, n0, k0, threadIdx.x, smem);
      __syncthreads();
      const unsigned kn = static_cast<unsigned>(a.K - k0 < kTileK ? a.K - k0 : kTileK);
      qtiles::multiply_tile<S>(smem, kn, threadIdx.x, acc);
      __syncthreads();
    }
    qtiles::store_tile<S>(a, m0, n0, threadIdx.x, acc);
  }
}

template <WeightFormat F, class S>
void launch_matmul(const MatmulArgs& a, cudaStream_t stream) {
  const size_t n_tiles = (a.N + S::BN - 1) / S::BN;
  const size_t m_tiles = (a.M + S::BM - 1) / S::BM;
  if (n_tiles > static_cast<size_t>(INT_MAX)) {
    throw std::runtime_error("cuda backend: matmul_quant with N = " + std::to_string(a.N) +
                             " is not implemented yet");
  }
  const dim3 grid(static_cast<unsigned>(n_tiles),
                  static_cast<unsigned>(std::min<size_t>(m_tiles, 65535)));
  matmul_kernel<F, S><<<grid, kTileThreads, 0, stream>>>(a);
  check_launch("matmul_quant kernel");
}

// ---- Ids on the device --------------------------------------------------------------------

// quant_plan.h scan_ids_on_host on the device, limit, begin and end clamped to 2^32 (beyond any
// int32 id). One block of kThreads threads: each thread's first hit in its strided share, then
// the smallest over the block.
__global__ void scan_ids_kernel(const int32_t* ids, size_t T, long long limit, long long begin,
                                long long end, IdScan* out) {
  __shared__ unsigned long long outside[kThreads], inside[kThreads];
  unsigned long long o = T, in = T;
  for (size_t t = threadIdx.x; t < T && (o == T || in == T); t += blockDim.x) {
    const long long id = ids[t];
    const bool in_table = id >= 0 && id < limit;
    if (!in_table && o == T) o = t;
    if (in_table && id >= begin && id < end && in == T) in = t;
  }
  outside[threadIdx.x] = o;
  inside[threadIdx.x] = in;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      outside[threadIdx.x] = min(outside[threadIdx.x], outside[threadIdx.x + half]);
      inside[threadIdx.x] = min(inside[threadIdx.x], inside[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out->first_outside = outside[0];
    out->first_inside = inside[0];
    out->id_outside = outside[0] < T ? ids[outside[0]] : 0;
  }
}

// Device memory for one IdScan, allocated and freed on the stream.
class ScanScratch {
 public:
  explicit ScanScratch(cudaStream_t stream) : stream_(stream) {
    check_cuda(cudaMallocAsync(&data_, sizeof(IdScan), stream), "cudaMallocAsync (id scan)");
  }
  ~ScanScratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  ScanScratch(const ScanScratch&) = delete;
  ScanScratch& operator=(const ScanScratch&) = delete;
  IdScan* get() const { return data_; }

 private:
  cudaStream_t stream_;
  IdScan* data_ = nullptr;
};

// Scans ids[0..T) (T >= 1, device memory) against the table [0, limit) and the span
// [begin, end), and returns the result once the stream has got there.
IdScan scan_ids(cudaStream_t stream, const int32_t* ids, size_t T, size_t limit, size_t begin,
                size_t end, const char* op) {
  // Ids are int32: bounds beyond 2^32 compare the same as 2^32.
  const auto clamp = [](size_t v) {
    return static_cast<long long>(std::min<size_t>(v, 1ull << 32));
  };
  ScanScratch scratch(stream);
  scan_ids_kernel<<<1, kThreads, 0, stream>>>(ids, T, clamp(limit), clamp(begin), clamp(end),
                                              scratch.get());
  check_launch("scan_ids_kernel");
  IdScan host{};
  const std::string what = std::string("reading back the ids of ") + op;
  check_cuda(cudaMemcpyAsync(&host, scratch.get(), sizeof host, cudaMemcpyDeviceToHost, stream),
             what.c_str());
  check_cuda(cudaStreamSynchronize(stream), what.c_str());
  return host;
}

// ---- Embeddings ---------------------------------------------------------------------------

// Blocks over output rows (grid-stride), threads over a row's elements.
template <WeightFormat F, bool kInterleaved>
__global__ void embed_kernel(float* out, const uint8_t* table, size_t row_bytes, size_t dim,
                             const int32_t* ids, size_t T, size_t row_begin, size_t n_rows) {
  for (size_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int32_t id = ids[t];
    float* row = out + t * dim;
    for (size_t k = threadIdx.x; k < dim; k += blockDim.x) {
      row[k] =
          qtiles::embed_element<F, kInterleaved>(table, row_bytes, dim, id, row_begin, n_rows, k);
    }
  }
}

// Every argument already checked: f and dim valid, layout's format interleavable, ids in range.
void launch_embed(cudaStream_t stream, float* out, const void* table, WeightFormat f,
                  WeightLayout layout, const int32_t* ids, size_t T, size_t row_begin,
                  size_t n_rows, size_t dim) {
  const unsigned blocks = static_cast<unsigned>(std::min(T, kMaxBlocks));
  const auto* w = static_cast<const uint8_t*>(table);
  const size_t rb = row_bytes(f, dim);
  with_format(f, [&](auto fc) {
    constexpr WeightFormat F = decltype(fc)::value;
    if (layout == WeightLayout::kInterleaved) {
      if constexpr (qblocks::interleavable_format(F)) {
        embed_kernel<F, true>
            <<<blocks, kThreads, 0, stream>>>(out, w, rb, dim, ids, T, row_begin, n_rows);
      } else {
        throw std::logic_error("quant_ops: an interleaved format the caller did not check");
      }
    } else {
      embed_kernel<F, false>
          <<<blocks, kThreads, 0, stream>>>(out, w, rb, dim, ids, T, row_begin, n_rows);
    }
  });
  check_launch("embed_kernel");
}

}  // namespace

void matmul_quant(cudaStream_t stream, float* y, const float* x, const void* w, WeightFormat f,
                  size_t M, size_t N, size_t K, const MatmulOptions& options) {
  const MatmulTile tile = plan_matmul(y, x, w, f, M, N, K, options);
  if (tile == MatmulTile::kNone) return;
  const size_t ldy = options.ldy == 0 ? N : options.ldy;
  const MatmulArgs a{
      y, x, static_cast<const uint8_t*>(w), M, N, K, ldy, row_bytes(f, K), options.accumulate};
  with_format(f, [&](auto fc) {
    constexpr WeightFormat F = decltype(fc)::value;
    if (tile == MatmulTile::kNarrow) {
      launch_matmul<F, qtiles::NarrowTile>(a, stream);
    } else {
      launch_matmul<F, qtiles::WideTile>(a, stream);
    }
  });
}

void embed_rows(cudaStream_t stream, float* out, const void* table, WeightFormat f,
                WeightLayout layout, const int32_t* ids, size_t T, size_t n_rows, size_t dim) {
  // The checks that need the ids come last: they wait for the stream.
  if (!check_embed_rows(out, table, f, layout, ids, T, dim)) return;
  check_embed_rows_ids(scan_ids(stream, ids, T, n_rows, 0, 0, "embed_rows"), T);
  launch_embed(stream, out, table, f, layout, ids, T, 0, n_rows, dim);
}

void embed_shard_rows(cudaStream_t stream, float* out, const void* table, WeightFormat f,
                      WeightLayout layout, const int32_t* ids, size_t T, size_t row_begin,
                      size_t n_rows, size_t vocab, size_t dim) {
  if (T == 0) return;
  // The CPU twin would write through `out` and read `ids` whatever they are.
  if (!out || !ids) check(Status::kInvalidArgument, "embed_shard_rows");
  const IdScan scan =
      scan_ids(stream, ids, T, vocab, row_begin, row_begin + n_rows, "embed_shard_rows");
  const bool decodable = decodable_table(table, f, layout, dim);
  if (plan_embed_shard_rows(scan, T, decodable, vocab) == ShardRows::kZeros) {
    if (dim > 0) {
      check_cuda(cudaMemsetAsync(out, 0, T * dim * sizeof(float), stream),
                 "cudaMemsetAsync (embed_shard_rows)");
    }
    return;
  }
  launch_embed(stream, out, table, f, layout, ids, T, row_begin, n_rows, dim);
}

}  // namespace adakv::kernels::cuda
