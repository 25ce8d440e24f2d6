// Row-wise and element-wise CPU ops: RMSNorm, SwiGLU, residual add, bias add, embedding lookup.
#include <cmath>
#include <cstring>

#include "kernels/cpu/vec_exp.h"
#include "kernels/ops.h"

namespace adakv::kernels {

Status rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim, float eps,
               Stream) {
  if (dim == 0) return Status::kInvalidArgument;
#pragma omp parallel for schedule(static) if (rows > 8)
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    // Accumulate in double: the reference (PyTorch fp32) reduces pairwise, a long float sum
    // would drift further from it than the rounding of either. Eight partial sums (added in a
    // fixed order) let the loop vectorise instead of waiting on one add chain.
    constexpr size_t kLanes = 8;
    double part[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= dim; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) part[j] += static_cast<double>(xr[i + j]) * xr[i + j];
    }
    for (; i < dim; ++i) part[0] += static_cast<double>(xr[i]) * xr[i];
    double ss = 0;
    for (size_t j = 0; j < kLanes; ++j) ss += part[j];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
  return Status::kOk;
}

Status swiglu(float* out, const float* gate_up, size_t T, size_t F, Stream) {
#pragma omp parallel for schedule(static) if (T > 8)
  for (size_t t = 0; t < T; ++t) {
    const float* g = gate_up + t * 2 * F;
    const float* u = g + F;
    float* o = out + t * F;
    // silu(g) = g / (1 + e^-g), with the vectorised exp (libm's expf is one call per element).
    for (size_t i = 0; i < F; ++i) o[i] = -g[i];
    exp_inplace(o, F);
    for (size_t i = 0; i < F; ++i) o[i] = g[i] / (1.0f + o[i]) * u[i];
  }
  return Status::kOk;
}

Status add(float* out, const float* a, const float* b, size_t n, Stream) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  return Status::kOk;
}

Status add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy, Stream) {
  if (ldy < n) return Status::kInvalidArgument;
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (size_t r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    for (size_t i = 0; i < n; ++i) yr[i] += bias[i];
  }
  return Status::kOk;
}

Status embed(float* out, const float* table, const int32_t* ids, size_t T, size_t n_rows,
             size_t dim, Stream) {
  for (size_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || static_cast<size_t>(ids[t]) >= n_rows) return Status::kInvalidArgument;
  }
  for (size_t t = 0; t < T; ++t) {
    std::memcpy(out + t * dim, table + static_cast<size_t>(ids[t]) * dim, dim * sizeof(float));
  }
  return Status::kOk;
}

}  // namespace adakv::kernels
