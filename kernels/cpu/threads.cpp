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
  // n <= 0 keeps OpenMP's own count: OMP_NUM_THREADS when set (the launcher's threads_per_rank,
  // its share of the node's cores: a larger count would put more threads than cores on a node
  // whose ranks share it, and every parallel region would wait for a descheduled thread), else
  // every core this process may use.
  if (n > 0) omp_set_num_threads(n);  // matmul keeps OpenBLAS single-threaded and splits over these
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace adakv::kernels
