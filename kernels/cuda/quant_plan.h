// The host-side decisions of the CUDA backend's quantized-weight group (quant_ops.cu), plain C++
// so that tests/gpu/device_math_quant.cu runs them without a device: the argument checks of the
// CPU twins (std::invalid_argument naming the op through kernels::check, or the CPU's own
// message), which paths have no kernel (std::runtime_error), the tile a product runs on, and what
// the embeddings do once the scan of their ids (made on the device) is back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/quant.h"

namespace adakv::kernels::cuda {

// ---- matmul_quant -------------------------------------------------------------------------

// Products of at most this many activation rows run on the narrow tile (quant_tiles.cuh).
inline constexpr size_t kNarrowMaxRows = 8;

enum class MatmulTile { kNone, kNarrow, kWide };

// matmul_quant's arguments checked as kernels/cpu/quant_matmul.cpp checks them, in its order;
// then what has no kernel here: interleaved weights, and the activation-rounding paths
// (kRowDots, kInt16Dots) of the quantized formats (the float formats take their float rows on
// every path, as on the CPU). Returns the tile to run, kNone when there is nothing to compute.
inline MatmulTile plan_matmul(const float* y, const float* x, const void* w, WeightFormat f,
                              size_t M, size_t N, size_t K, const MatmulOptions& options) {
  if (!is_weight_format(static_cast<uint32_t>(f)) || K == 0 || K % block_elements(f) != 0) {
    check(Status::kInvalidArgument, "matmul_quant");
  }
  const size_t ldy = options.ldy == 0 ? N : options.ldy;
  if (ldy < N) check(Status::kInvalidArgument, "matmul_quant");
  if (M == 0 || N == 0) return MatmulTile::kNone;
  if (!y || !x || !w) check(Status::kInvalidArgument, "matmul_quant");
  if (options.row_groups) {
    size_t rows = 0;
    for (size_t i = 0; i < options.n_row_groups; ++i) rows += options.row_groups[i];
    if (rows != M) check(Status::kInvalidArgument, "matmul_quant");
  }
  const auto not_implemented = [](const char* what) {
    throw std::runtime_error(std::string("cuda backend: matmul_quant ") + what +
                             " is not implemented yet");
  };
  if (options.layout == WeightLayout::kInterleaved) {
    if (!interleavable(f) || options.path == MatmulPath::kRowDots) {
      check(Status::kInvalidArgument, "matmul_quant");
    }
    not_implemented("on interleaved weights (WeightLayout::kInterleaved)");
  }
  const bool float_format =
      f == WeightFormat::kF32 || f == WeightFormat::kF16 || f == WeightFormat::kBF16;
  if (!float_format && options.path == MatmulPath::kRowDots) {
    not_implemented("on the kRowDots path (8-bit activations)");
  }
  if (!float_format && options.path == MatmulPath::kInt16Dots) {
    not_implemented("on the kInt16Dots path (16-bit activations)");
  }
  return M <= kNarrowMaxRows ? MatmulTile::kNarrow : MatmulTile::kWide;
}

// ---- Embeddings ---------------------------------------------------------------------------

// What the embeddings need to know of their ids before writing anything (computed on the device
// by quant_ops.cu's scan kernel; scan_ids_on_host is its definition).
struct IdScan {
  unsigned long long first_outside;  // the first t with ids[t] outside [0, limit); T if none
  unsigned long long first_inside;   // the first t with ids[t] in [begin, end) and [0, limit)
  int32_t id_outside;                // ids[first_outside] when there is one
};

inline IdScan scan_ids_on_host(const int32_t* ids, size_t T, size_t limit, size_t begin,
                               size_t end) {
  IdScan s{T, T, 0};
  for (size_t t = 0; t < T; ++t) {
    const long long id = ids[t];
    const bool in_table = id >= 0 && static_cast<unsigned long long>(id) < limit;
    if (!in_table && s.first_outside == T) {
      s.first_outside = t;
      s.id_outside = ids[t];
    }
    if (in_table && static_cast<unsigned long long>(id) >= begin &&
        static_cast<unsigned long long>(id) < end && s.first_inside == T) {
      s.first_inside = t;
    }
  }
  return s;
}

// Whether kernels::dequantize_rows accepts the table, whatever its ids.
inline bool decodable_table(const void* table, WeightFormat f, WeightLayout layout, size_t dim) {
  if (!is_weight_format(static_cast<uint32_t>(f)) || dim == 0 || dim % block_elements(f) != 0) {
    return false;
  }
  return table && (layout != WeightLayout::kInterleaved || interleavable(f));
}

// embed_rows' checks that need no ids (those of kernels/cpu/quant_matmul.cpp dequantize_rows).
// False: no tokens, nothing to do.
inline bool check_embed_rows(const float* out, const void* table, WeightFormat f,
                             WeightLayout layout, const int32_t* ids, size_t T, size_t dim) {
  if (!is_weight_format(static_cast<uint32_t>(f)) || dim == 0 || dim % block_elements(f) != 0) {
    check(Status::kInvalidArgument, "embed_rows");
  }
  if (T == 0) return false;
  if (!out || !table || !ids) check(Status::kInvalidArgument, "embed_rows");
  if (layout == WeightLayout::kInterleaved && !interleavable(f)) {
    check(Status::kInvalidArgument, "embed_rows");
  }
  return true;
}

// Then the ids (scanned against [0, n_rows)).
inline void check_embed_rows_ids(const IdScan& scan, size_t T) {
  if (scan.first_outside < T) check(Status::kInvalidArgument, "embed_rows");
}

enum class ShardRows { kZeros, kDecode };

// embed_shard_rows once its ids are scanned against [0, vocab) and the shard's
// [row_begin, row_begin + n_rows) (T >= 1). The CPU twin (kernels/cpu/cpu_backend.cpp) goes token
// by token: an id outside the vocabulary throws its message; an id the shard holds is decoded by
// dequantize_rows, whose checks of the table fail there; other rows become zeros. So the first
// token that fails decides the error, and a table that cannot be decoded is no error while no
// token is in the shard (every row is zeros).
inline ShardRows plan_embed_shard_rows(const IdScan& scan, size_t T, bool decodable, size_t vocab) {
  if (!decodable && scan.first_inside < scan.first_outside) {
    check(Status::kInvalidArgument, "embed_shard_rows");
  }
  if (scan.first_outside < T) {
    throw std::invalid_argument("embed_shard_rows: token id " + std::to_string(scan.id_outside) +
                                " is outside the vocabulary of " + std::to_string(vocab));
  }
  return decodable ? ShardRows::kDecode : ShardRows::kZeros;
}

}  // namespace adakv::kernels::cuda
