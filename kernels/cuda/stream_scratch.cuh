// Host-side helpers of the attention and KV-pool groups (attention_ops.cu, kv_ops.cu): scratch
// memory ordered on the op's stream, and the read-back of a small device result that an
// argument check needs before anything is written.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/cuda_check.h"

namespace adakv::kernels::cuda {

// `bytes` of device memory on `stream` (cudaMallocAsync), freed on the stream when it goes out of
// scope: after every kernel issued before that, so kernels that read it may still be running.
class KvScratch {
 public:
  KvScratch(cudaStream_t stream, size_t bytes, const char* what) : stream_(stream) {
    if (bytes > 0) check_cuda(cudaMallocAsync(&data_, bytes, stream), what);
  }
  ~KvScratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  KvScratch(const KvScratch&) = delete;
  KvScratch& operator=(const KvScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// Copies `bytes` at device address `src` to host memory `dst` once the stream gets there and
// waits for it (a copy to pageable memory returns once it is done; the wait makes it explicit).
inline void read_back(cudaStream_t stream, void* dst, const void* src, size_t bytes,
                      const char* what) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), what);
  check_cuda(cudaStreamSynchronize(stream), what);
}

}  // namespace adakv::kernels::cuda
