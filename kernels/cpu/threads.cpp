// Thread control and status checks shared by the CPU ops.
#include <omp.h>

#include <stdexcept>
#include <string>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"

namespace adakv::kernels {

void check(Status s, const char* op) {
  if (s != Status::kOk)
    throw std::invalid_argument(std::string("kernel ") + op + ": invalid argument");
}

void set_num_threads(int n) {
  // n <= 0 keeps OpenMP's own count: OMP_NUM_THREADS when set (the launcher's threads_per_rank;
  // overriding it put 2 threads in each of 3 ranks on 2 cores, and decode ran ~20x slower), else
  // every core this process may use.
  if (n > 0) omp_set_num_threads(n);  // matmul keeps OpenBLAS single-threaded and splits over these
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace adakv::kernels
