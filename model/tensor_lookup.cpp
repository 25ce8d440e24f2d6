#include "model/tensor_lookup.h"

#include <fmt/format.h>

#include <stdexcept>

#include "model/gguf/dequant.h"

namespace adakv::model {

const gguf::TensorInfo& find_checked(const gguf::GgufFile& f, const std::string& name, size_t cols,
                                     size_t rows) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error(fmt::format("{}: tensor '{}' is missing", f.path(), name));
  const bool vector_ok = rows == 1 && t->ne.size() == 1 && t->ne[0] == cols;
  const bool matrix_ok = t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows;
  if (!vector_ok && !matrix_ok) {
    std::string shape;
    for (auto n : t->ne) shape += (shape.empty() ? "" : ", ") + std::to_string(n);
    throw std::runtime_error(fmt::format("{}: tensor '{}' has shape [{}], expected [{}, {}]",
                                         f.path(), name, shape, cols, rows));
  }
  if (!gguf::can_dequantize(t->type)) {
    throw std::runtime_error(fmt::format("{}: tensor '{}' has type {}, which adakv cannot decode",
                                         f.path(), name, gguf::type_name(t->type)));
  }
  return *t;
}

}  // namespace adakv::model
