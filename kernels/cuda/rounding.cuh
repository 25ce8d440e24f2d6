// Float steps rounded to nearest exactly as the host computes them, for the kernels' math that
// must equal the CPU bit for bit: nvcc neither contracts these into FMAs nor approximates the
// division, and the host build (the device-math tests) does plain IEEE float arithmetic.
#pragma once

namespace adakv::kernels::cuda {

__host__ __device__ inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

__host__ __device__ inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

__host__ __device__ inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace adakv::kernels::cuda
