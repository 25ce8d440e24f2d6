// A linear layer y = x W^T whose weight W stays in the GGUF block format it was stored in
// (kernels/quant.h lists the formats), the way vLLM's LinearMethod keeps a layer's own weight
// format. W has out_features rows of in_features elements; a tensor-parallel rank holds only
// its shard of a GGUF tensor of ne = [in, out]:
//   ColumnParallel: a range of whole rows (output features), read in place from the mapped file;
//   RowParallel: a range of columns (input features) of every row, cut at block boundaries and
//   copied into memory the layer owns (the mapped pages it read are released again).
// A cut inside a quantization block cannot be represented: it is an error at load that names
// the tensor, its format and the offending offset. Where the backend multiplies a format
// faster interleaved (kernels::Backend::weight_layout), the shard is copied into that layout
// at load and the mapped pages are released; copies of a Linear share that memory. Linears that
// read the same input (q, k and v; gate and up) can be fused into one whose rows are theirs in
// order, so that one product reads the input once. The backend's copy is made by upload() once
// the layout is final; products read only that copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/quant.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::model {

enum class Parallelism { kReplicated, kColumn, kRow };

class Linear {
 public:
  Linear() = default;

  // Each is kept in the layout `backend` asks for its format (Backend::weight_layout), where
  // it will be uploaded.
  // The whole tensor `name` of ne = [in, out]. Throws std::runtime_error naming the tensor when
  // it is missing, has another shape, or a format kernels::matmul_quant does not handle.
  static Linear replicated(const gguf::GgufFile& f, const std::string& name, size_t in, size_t out,
                           const kernels::Backend& backend);
  // Output rows [begin, begin + count) of that tensor. With a row_order (count entries, a
  // permutation of 0..count-1), local row j is the shard's row row_order[j] (model/rope_order.h),
  // copied into memory the layer owns.
  static Linear column_parallel(const gguf::GgufFile& f, const std::string& name, size_t in,
                                size_t out, size_t begin, size_t count,
                                const kernels::Backend& backend,
                                std::span<const size_t> row_order = {});
  // Input columns [begin, begin + count) of every row; begin and count must be multiples of the
  // format's block (else std::runtime_error naming tensor, format, block and offset).
  static Linear row_parallel(const gguf::GgufFile& f, const std::string& name, size_t in,
                             size_t out, size_t begin, size_t count,
                             const kernels::Backend& backend);

  // One Linear whose rows are those of `parts`, in order, where the parts share format,
  // in_features and the interleaved layout and each holds whole row groups (the product of each
  // row is then the same whichever Linear it is computed in); the parts are re-pointed into the
  // fused memory, so nothing is held twice. Else an empty Linear and the parts unchanged.
  static Linear fuse(std::initializer_list<Linear*> parts);

  bool empty() const { return out_ == 0; }
  size_t in_features() const { return in_; }
  size_t out_features() const { return out_; }
  kernels::WeightFormat format() const { return format_; }
  kernels::WeightLayout layout() const { return layout_; }
  Parallelism parallelism() const { return parallelism_; }
  // Bytes of the shard (what one product reads).
  size_t bytes() const { return out_ * row_bytes_; }
  // The shard's weights in host memory, in format() and layout() (null once release_host()).
  const uint8_t* data() const { return data_; }
  // Bytes of data(): bytes(), or the interleaved layout's padded groups.
  size_t storage_bytes() const;

  // Makes the backend's copy of the weights (Backend::constant: the CPU backend views the host
  // memory), which forward() and weights() then use.
  void upload(kernels::Backend& backend);
  // Shares `owner`'s backend copy instead, where this Linear's host memory lies inside the
  // owner's (a fused part, the tied LM head). Throws std::logic_error when it does not.
  void view_uploaded(const Linear& owner);
  // Drops the host memory the layer owns (after an upload that copied it).
  void release_host();
  bool uploaded() const { return weights_ != nullptr; }
  // The weights in backend memory (null before upload()).
  const uint8_t* weights() const { return weights_; }

  // y[m][n] (+)= sum_k x[m][k] W[n][k] for M rows on `backend` (the one uploaded to): x
  // [M][in_features] contiguous, y row stride options.ldy (0: out_features), both backend
  // memory. Throws std::logic_error before upload(), std::invalid_argument on bad arguments.
  void forward(kernels::Backend& backend, float* y, const float* x, size_t M,
               const kernels::MatmulOptions& options = {}) const;

 private:
  // Copies the shard's out_ rows (kRows, row_bytes_ apart) interleaved into memory the layer
  // owns, and points data_ at it.
  void own_interleaved(const uint8_t* rows);

  const uint8_t* data_ = nullptr;  // into the mapped file, or owned_
  std::shared_ptr<const std::vector<uint8_t>> owned_;
  std::shared_ptr<const kernels::Buffer> buffer_;  // the backend's copy (shared by views)
  const uint8_t* weights_ = nullptr;               // this layer's rows in buffer_
  kernels::WeightFormat format_ = kernels::WeightFormat::kF32;
  kernels::WeightLayout layout_ = kernels::WeightLayout::kRows;
  Parallelism parallelism_ = Parallelism::kReplicated;
  size_t in_ = 0, out_ = 0, row_bytes_ = 0;
};

}  // namespace adakv::model
