// Output-aware token weights (CriticalKV, arXiv 2502.03805): a key the window attends to matters
// as much as its value moves the head's output, so each query head's attention to token j is
// weighed by ||W_o^h v_j||, the norm of j's value through that head's block of the output
// projection. Computed per rank on its own heads, before pooling and GQA aggregation, so the
// scores (and the gain exchange built on them) do not depend on the TP size.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/backend.h"

namespace adakv::compression {

// v: [n_keys][Hkv][Dh] (row stride v_stride floats), backend memory; grams: [Hq][Dh][Dh] host
// (model::OutputProjection::grams). Returns host [Hq][n_keys]: sqrt(v_j^T G_h v_j) of query head
// h over the value of its KV head h / (Hq / Hkv). Requires Hq a multiple of Hkv.
std::vector<float> value_output_norms(kernels::Backend& backend, const float* v, size_t v_stride,
                                      size_t n_keys, size_t Hq, size_t Hkv, size_t Dh,
                                      const std::vector<float>& grams);

// The same from values in host memory ([n_keys][Hkv][Dh], contiguous): the reference the backend
// path is tested against, and the host half of it.
std::vector<float> value_output_norms_host(const float* v, size_t n_keys, size_t Hq, size_t Hkv,
                                           size_t Dh, const std::vector<float>& grams);

}  // namespace adakv::compression
