// Thread control and status checks shared by the CPU ops.
#include <omp.h>

#include <stdexcept>
#include <string>
#include <thread>

#include "kernels/ops.h"

namespace adakv::kernels {

void check(Status s, const char* op) {
  if (s != Status::kOk)
    throw std::invalid_argument(std::string("kernel ") + op + ": invalid argument");
}

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  omp_set_num_threads(n);  // matmul keeps OpenBLAS single-threaded and splits over these
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace adakv::kernels
