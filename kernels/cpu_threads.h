// The CPU backend's one knob, outside the Backend interface: the threads its ops use.
#pragma once

namespace adakv::kernels {

// Threads the CPU ops use (OpenMP and BLAS); n <= 0 keeps OMP_NUM_THREADS, else all cores.
void set_num_threads(int n);
int num_threads();

}  // namespace adakv::kernels
