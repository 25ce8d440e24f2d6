// Looking up a GGUF tensor the model needs, with its shape and type checked.
#pragma once

#include <cstddef>
#include <string>

#include "model/gguf/gguf.h"

namespace adakv::model {

// The tensor `name` of ne = [cols, rows] (a vector of `cols` when rows is 1) in a type adakv can
// decode. Throws std::runtime_error naming the file and the tensor when it is missing, has
// another shape, or a type adakv cannot decode.
const gguf::TensorInfo& find_checked(const gguf::GgufFile& f, const std::string& name, size_t cols,
                                     size_t rows);

}  // namespace adakv::model
