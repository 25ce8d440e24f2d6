#include "runtime/compression/output_aware.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>

namespace adakv::compression {

std::vector<float> value_output_norms_host(const float* v, size_t n_keys, size_t Hq, size_t Hkv,
                                           size_t Dh, const std::vector<float>& grams) {
  if (Hkv == 0 || Hq % Hkv != 0) throw std::invalid_argument("value_output_norms: Hq % Hkv != 0");
  if (grams.size() != Hq * Dh * Dh) {
    throw std::invalid_argument("value_output_norms: grams must be [Hq][Dh][Dh]");
  }
  const size_t group = Hq / Hkv;
  std::vector<float> out(Hq * n_keys);
  std::vector<float> gv(Dh);
  for (size_t h = 0; h < Hq; ++h) {
    const float* G = grams.data() + h * Dh * Dh;
    for (size_t j = 0; j < n_keys; ++j) {
      const float* x = v + (j * Hkv + h / group) * Dh;
      // y = G v, column by column (G is symmetric, so row b is column b): the inner loop is an
      // axpy the compiler vectorizes. v^T G v >= 0 up to rounding (G is a Gram matrix).
      std::fill(gv.begin(), gv.end(), 0.0f);
      for (size_t b = 0; b < Dh; ++b) {
        const float* col = G + b * Dh;
        const float xb = x[b];
        for (size_t a = 0; a < Dh; ++a) gv[a] += col[a] * xb;
      }
      float s = 0;
      for (size_t a = 0; a < Dh; ++a) s += x[a] * gv[a];
      out[h * n_keys + j] = std::sqrt(std::max(s, 0.0f));
    }
  }
  return out;
}

std::vector<float> value_output_norms(kernels::Backend& backend, const float* v, size_t v_stride,
                                      size_t n_keys, size_t Hq, size_t Hkv, size_t Dh,
                                      const std::vector<float>& grams) {
  const size_t row = Hkv * Dh;
  std::vector<float> host(n_keys * row);
  if (v_stride == row) {
    backend.download(host.data(), v, host.size() * sizeof(float));
  } else {
    // The values sit inside wider rows (a fused qkv activation): packed on the backend first.
    std::vector<int32_t> rows(n_keys);
    std::iota(rows.begin(), rows.end(), 0);
    const kernels::Buffer index = backend.allocate(rows.size() * sizeof(int32_t));
    backend.upload(index.data(), rows.data(), rows.size() * sizeof(int32_t));
    const kernels::Buffer packed = backend.allocate(host.size() * sizeof(float));
    backend.gather_rows(packed.data(), row * sizeof(float), v, v_stride * sizeof(float),
                        row * sizeof(float), index.as<int32_t>(), n_keys);
    backend.download(host.data(), packed.data(), host.size() * sizeof(float));
  }
  return value_output_norms_host(host.data(), n_keys, Hq, Hkv, Dh, grams);
}

}  // namespace adakv::compression
