// OpenBLAS must run single-threaded inside this project's OpenMP regions: two thread pools
// spin-waiting against each other on a small machine made decode ~10x slower (matmul.cpp).
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
