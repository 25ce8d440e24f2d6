// OpenBLAS must run single-threaded inside this project's OpenMP regions: two thread pools on
// the same cores spin-wait against each other, each holding a core the other needs
// (matmul.cpp).
#pragma once

extern "C" void openblas_set_num_threads(int);

namespace adakv::kernels {

// Call before the first BLAS call of a kernel; cheap after the first time.
inline void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

}  // namespace adakv::kernels
