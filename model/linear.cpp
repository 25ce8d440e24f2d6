#include "model/linear.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/tensor_lookup.h"

namespace adakv::model {
namespace k = adakv::kernels;

namespace {

const gguf::TensorInfo& find_matrix(const gguf::GgufFile& f, const std::string& name, size_t in,
                                    size_t out) {
  const gguf::TensorInfo& t = find_checked(f, name, in, out);
  if (!k::is_weight_format(static_cast<uint32_t>(t.type))) {
    throw std::runtime_error(
        fmt::format("{}: tensor '{}' has type {}, which adakv's matrix "
                    "kernels do not handle",
                    f.path(), name, gguf::type_name(t.type)));
  }
  return t;
}

}  // namespace

Linear Linear::replicated(const gguf::GgufFile& f, const std::string& name, size_t in, size_t out,
                          const k::Backend& backend) {
  Linear l = column_parallel(f, name, in, out, 0, out, backend);
  l.parallelism_ = Parallelism::kReplicated;
  return l;
}

Linear Linear::column_parallel(const gguf::GgufFile& f, const std::string& name, size_t in,
                               size_t out, size_t begin, size_t count, const k::Backend& backend,
                               std::span<const size_t> row_order) {
  const gguf::TensorInfo& t = find_matrix(f, name, in, out);
  if (begin + count > out) {
    throw std::runtime_error(fmt::format("{}: rows [{}, {}) of tensor '{}' are outside its {} rows",
                                         f.path(), begin, begin + count, name, out));
  }
  Linear l;
  l.format_ = static_cast<k::WeightFormat>(t.type);
  l.parallelism_ = Parallelism::kColumn;
  l.in_ = in;
  l.out_ = count;
  l.row_bytes_ = k::row_bytes(l.format_, in);
  const uint8_t* mapped = f.tensor_data(t) + begin * l.row_bytes_;
  l.data_ = mapped;
  std::vector<uint8_t> reordered;
  if (!row_order.empty()) {
    if (row_order.size() != count) {
      throw std::logic_error(fmt::format("Linear: a row order of {} rows for the {} rows of '{}'",
                                         row_order.size(), count, name));
    }
    reordered.resize(count * l.row_bytes_);
    for (size_t j = 0; j < count; ++j) {
      if (row_order[j] >= count) throw std::logic_error("Linear: a row order outside the shard");
      std::memcpy(reordered.data() + j * l.row_bytes_, mapped + row_order[j] * l.row_bytes_,
                  l.row_bytes_);
    }
  }
  if (backend.weight_layout(l.format_) == k::WeightLayout::kInterleaved) {
    l.own_interleaved(reordered.empty() ? mapped : reordered.data());
  } else if (!reordered.empty()) {
    l.owned_ = std::make_shared<const std::vector<uint8_t>>(std::move(reordered));
    l.data_ = l.owned_->data();
  } else {
    return l;  // read in place
  }
  f.release_pages(mapped, count * l.row_bytes_);
  return l;
}

Linear Linear::row_parallel(const gguf::GgufFile& f, const std::string& name, size_t in, size_t out,
                            size_t begin, size_t count, const k::Backend& backend) {
  const gguf::TensorInfo& t = find_matrix(f, name, in, out);
  if (begin == 0 && count == in) {
    Linear l = column_parallel(f, name, in, out, 0, out, backend);
    l.parallelism_ = Parallelism::kRow;
    return l;
  }
  const auto format = static_cast<k::WeightFormat>(t.type);
  const size_t block = k::block_elements(format);
  if (begin + count > in || count == 0) {
    throw std::runtime_error(fmt::format("{}: columns [{}, {}) of tensor '{}' are outside its {}",
                                         f.path(), begin, begin + count, name, in));
  }
  if (begin % block != 0 || count % block != 0) {
    throw std::runtime_error(fmt::format(
        "{}: tensor '{}' is {}, stored in blocks of {} elements along its {} columns; the "
        "tensor-parallel shard [{}, {}) does not start and end on a block boundary, so this "
        "model cannot be split this way (choose a tensor-parallel size whose share of {} columns "
        "is a multiple of {})",
        f.path(), name, k::weight_format_name(format), block, in, begin, begin + count, in, block));
  }
  Linear l;
  l.format_ = format;
  l.parallelism_ = Parallelism::kRow;
  l.in_ = count;
  l.out_ = out;
  l.row_bytes_ = k::row_bytes(format, count);
  const size_t full_row = k::row_bytes(format, in), skip = k::row_bytes(format, begin);
  const uint8_t* src = f.tensor_data(t);
  std::vector<uint8_t> rows(out * l.row_bytes_);
  for (size_t r = 0; r < out; ++r) {
    std::memcpy(rows.data() + r * l.row_bytes_, src + r * full_row + skip, l.row_bytes_);
  }
  f.release_pages(src, out * full_row);
  if (backend.weight_layout(format) == k::WeightLayout::kInterleaved) {
    l.own_interleaved(rows.data());
  } else {
    l.owned_ = std::make_shared<const std::vector<uint8_t>>(std::move(rows));
    l.data_ = l.owned_->data();
  }
  return l;
}

void Linear::own_interleaved(const uint8_t* rows) {
  layout_ = k::WeightLayout::kInterleaved;
  std::vector<uint8_t> copy(k::interleaved_bytes(format_, out_, in_));
  k::check(k::interleave_weights(copy.data(), rows, format_, out_, in_), "interleave_weights");
  owned_ = std::make_shared<const std::vector<uint8_t>>(std::move(copy));
  data_ = owned_->data();
}

Linear Linear::fuse(std::initializer_list<Linear*> parts) {
  if (parts.size() == 0) return {};
  const Linear& first = **parts.begin();
  size_t out = 0;
  for (const Linear* p : parts) {
    if (p->empty() || p->layout_ != k::WeightLayout::kInterleaved || p->format_ != first.format_ ||
        p->in_ != first.in_ || p->out_ % k::kInterleaveRows != 0) {
      return {};
    }
    out += p->out_;
  }
  std::vector<uint8_t> rows(k::interleaved_bytes(first.format_, out, first.in_));
  std::vector<size_t> offsets;
  size_t offset = 0;
  for (const Linear* p : parts) {
    const size_t bytes = k::interleaved_bytes(p->format_, p->out_, p->in_);
    std::memcpy(rows.data() + offset, p->data_, bytes);
    offsets.push_back(offset);
    offset += bytes;
  }
  Linear fused = first;
  fused.out_ = out;
  fused.owned_ = std::make_shared<const std::vector<uint8_t>>(std::move(rows));
  fused.data_ = fused.owned_->data();
  size_t i = 0;
  for (Linear* p : parts) {
    p->owned_ = fused.owned_;
    p->data_ = fused.data_ + offsets[i++];
  }
  return fused;
}

size_t Linear::storage_bytes() const {
  return layout_ == k::WeightLayout::kInterleaved ? k::interleaved_bytes(format_, out_, in_)
                                                  : bytes();
}

void Linear::upload(k::Backend& backend) {
  if (empty()) return;
  if (!data_) throw std::logic_error("Linear::upload: the host weights were released");
  buffer_ = std::make_shared<const k::Buffer>(backend.constant(data_, storage_bytes()));
  weights_ = buffer_->as<uint8_t>();
}

void Linear::view_uploaded(const Linear& owner) {
  if (empty()) return;
  if (!owner.uploaded() || data_ < owner.data_ ||
      data_ + storage_bytes() > owner.data_ + owner.storage_bytes()) {
    throw std::logic_error("Linear::view_uploaded: the weights do not lie in the owner's");
  }
  buffer_ = owner.buffer_;
  weights_ = owner.weights_ + (data_ - owner.data_);
}

void Linear::release_host() {
  owned_.reset();
  data_ = nullptr;
}

void Linear::forward(k::Backend& backend, float* y, const float* x, size_t M,
                     const k::MatmulOptions& options) const {
  if (!uploaded()) throw std::logic_error("Linear::forward: the weights are not uploaded");
  k::MatmulOptions o = options;
  o.layout = layout_;
  backend.matmul_quant(y, x, weights_, format_, M, out_, in_, o);
}

}  // namespace adakv::model
