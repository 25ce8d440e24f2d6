// exp over a float array, vectorised (the libm call is one call per element): range reduction
// x = k ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, and 2^k built in the exponent
// bits. Relative error below 3e-7 on [-87, 88]; inputs below -87 are clamped to it (e^-87 ~
// 1.6e-38: softmax weights that small vanish against the row maximum).
#pragma once

#include <cstddef>

namespace adakv::kernels {

void exp_inplace(float* x, size_t n);

}  // namespace adakv::kernels
