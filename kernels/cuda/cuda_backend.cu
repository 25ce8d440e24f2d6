// The CUDA backend (kernels/backend.h): memory of one device, and every op and transfer on one
// stream the backend owns, in the order issued.
//
// This file holds memory, transfers, gather_rows and the element-wise group (rmsnorm,
// rope_adjacent, swiglu, add, add_bias, interleave_shards: launch.h); the other ops forward to
// their group's file: quant_ops.h (matmul_quant, embed_rows, embed_shard_rows), attention_ops.h
// (attention_causal, attention_paged), kv_ops.h (the KV pool's ops), score_ops.h (Ada-KV's
// window scoring). An op without a kernel yet throws
// std::runtime_error("cuda backend: <op> is not implemented yet").
//
// Errors: every CUDA call is checked and a failure throws std::runtime_error naming the call
// and CUDA's message. A fault inside a kernel surfaces at the next call that waits for the
// stream (download, synchronize, ...). Arguments an ops.h twin rejects throw
// std::invalid_argument naming the op, as on the CPU; for gather_rows that means reading the
// row numbers' range back from the device first (one wait for the stream).
//
// One thread at a time per backend (any thread: each call makes the backend's device current).
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kv_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_ops.h"
#include "kernels/cuda/score_ops.h"

namespace adakv::kernels {
namespace {

using cuda::check_cuda;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    if (const std::string problem = cuda::device_problem(device); !problem.empty()) {
      throw std::runtime_error("cuda backend: " + problem);
    }
    try {
      check_cuda(cudaSetDevice(device_), "cudaSetDevice");
      // A blocking stream: it also waits for work on the legacy default stream (where other
      // libraries may run), and they for it.
      check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
      check_cuda(cudaMalloc(&range_, 2 * sizeof(int32_t)), "cudaMalloc");
      check_cuda(cudaMallocHost(&range_host_, 2 * sizeof(int32_t)), "cudaMallocHost");
    } catch (...) {
      release();
      throw;
    }
  }
  // Buffers of this backend must be gone before it is.
  ~CudaBackend() override { release(); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  BackendKind kind() const override { return BackendKind::kCuda; }
  WeightLayout weight_layout(WeightFormat) const override { return WeightLayout::kRows; }
  MatmulPath decode_path() const override { return MatmulPath::kFloatDots; }

  // ---- Memory ----
  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return Buffer(this, nullptr, 0);
    activate();
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes),
               ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
    return Buffer(this, p, bytes);
  }
  Buffer constant(const void* host, size_t bytes) override {
    Buffer b = allocate(bytes);
    upload(b.data(), host, bytes);
    return b;
  }
  // Called from Buffer's destructor, so it reports a failure on stderr instead of throwing (a
  // throw there would end the process, hiding the error that is being unwound). Waits for the
  // stream first: ops issued before may still use the memory.
  void free(void* data, size_t bytes) override {
    if (!data) return;
    cudaError_t s = cudaSetDevice(device_);
    if (s == cudaSuccess) s = cudaStreamSynchronize(stream_);
    if (s == cudaSuccess) s = cudaFree(data);
    if (s != cudaSuccess) {
      std::fprintf(stderr, "cuda backend: freeing %zu bytes: %s\n", bytes, cudaGetErrorString(s));
    }
  }

  // ---- Transfers ----
  // Both wait for the copy: an asynchronous copy from pageable memory may still read `src`
  // after it returns, and from pinned memory it does.
  void upload(void* dst, const void* src, size_t bytes) override {
    transfer_and_wait(dst, src, bytes, cudaMemcpyHostToDevice, "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    transfer_and_wait(dst, src, bytes, cudaMemcpyDeviceToHost, "download");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    activate();
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync (copy)");
  }
  void fill(void* dst, uint8_t byte, size_t bytes) override {
    if (bytes == 0) return;
    activate();
    check_cuda(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemsetAsync (fill)");
  }
  void synchronize() override {
    activate();
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  // The host cannot address this backend's memory (the contract's logic_error): the device
  // group stages its collectives through download() and upload(), or enqueues NCCL on
  // native_stream().
  void run_on_host(const std::function<void()>&) override {
    throw std::logic_error("cuda backend: run_on_host: the host cannot address device memory");
  }
  void* native_stream() override { return stream_; }
  void gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                   size_t row_bytes, const int32_t* rows, size_t n) override {
    if (n == 0 || row_bytes == 0) return;
    if (!dst || !src || !rows || (n > 1 && dst_stride < row_bytes)) {
      check(Status::kInvalidArgument, "gather_rows");
    }
    activate();
    cuda::launch_row_range(rows, n, range_, stream_);
    check_cuda(
        cudaMemcpyAsync(range_host_, range_, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync (gather_rows)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (gather_rows)");
    const int32_t first = range_host_[0], last = range_host_[1];
    if (first < 0) check(Status::kInvalidArgument, "gather_rows");
    // The spans written and read must not overlap (the CPU twin's rule).
    const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    const uintptr_t d_end = d + (n - 1) * dst_stride + row_bytes;
    const uintptr_t s_end = s + static_cast<size_t>(last) * src_stride + row_bytes;
    if (d < s_end && s < d_end) check(Status::kInvalidArgument, "gather_rows");
    cuda::launch_gather_rows(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream_);
  }

  // ---- Compute: the element-wise group ----
  void rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim,
               float eps) override {
    if (dim == 0) check(Status::kInvalidArgument, "rmsnorm");
    activate();
    cuda::launch_rmsnorm(out, x, w, rows, dim, eps, stream_);
  }
  void rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t token_stride, const RopeFrequencies& freqs) override {
    const size_t rot_dim = freqs.rot_dim();
    if (rot_dim > head_dim) check(Status::kInvalidArgument, "rope_adjacent");
    if (rot_dim / 2 > cuda::kMaxRopeFreqs) {
      throw std::runtime_error("cuda backend: rope_adjacent with rot_dim above " +
                               std::to_string(2 * cuda::kMaxRopeFreqs) + " is not implemented yet");
    }
    activate();
    cuda::launch_rope_adjacent(x, positions, T, n_heads, head_dim, token_stride, freqs, stream_);
  }
  void swiglu(float* out, const float* gate_up, size_t T, size_t F) override {
    activate();
    cuda::launch_swiglu(out, gate_up, T, F, stream_);
  }
  void add(float* out, const float* a, const float* b, size_t n) override {
    activate();
    cuda::launch_add(out, a, b, n, stream_);
  }
  void add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy) override {
    if (ldy < n) check(Status::kInvalidArgument, "add_bias");
    activate();
    cuda::launch_add_bias(y, bias, rows, n, ldy, stream_);
  }
  void interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                         size_t cols) override {
    if (shards > 0 && rows > 0 && cols > 0 && (!logits || !gathered)) {
      check(Status::kInvalidArgument, "interleave_shards");
    }
    activate();
    cuda::launch_interleave_shards(logits, gathered, shards, rows, cols, stream_);
  }

  // ---- Compute: the quantized-weight group (quant_ops.h) ----
  void matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M, size_t N,
                    size_t K, const MatmulOptions& options) override {
    activate();
    cuda::matmul_quant(stream_, y, x, w, f, M, N, K, options);
  }
  void embed_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                  const int32_t* ids, size_t T, size_t n_rows, size_t dim) override {
    activate();
    cuda::embed_rows(stream_, out, table, f, layout, ids, T, n_rows, dim);
  }
  void embed_shard_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                        const int32_t* ids, size_t T, size_t row_begin, size_t n_rows, size_t vocab,
                        size_t dim) override {
    activate();
    cuda::embed_shard_rows(stream_, out, table, f, layout, ids, T, row_begin, n_rows, vocab, dim);
  }

  // ---- Compute: attention (attention_ops.h) ----
  void attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale) override {
    activate();
    cuda::attention_causal(stream_, out, q, k, v, T, n_kv, Hq, Hkv, Dh, q_stride, kv_stride,
                           out_stride, scale);
  }
  void attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                       const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale) override {
    activate();
    cuda::attention_paged(stream_, seqs, n_seqs, pool, layout, Hq, Hkv, scale);
  }

  // ---- Compute: the KV pool (kv_ops.h) ----
  void kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                 size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots) override {
    activate();
    cuda::kv_append(stream_, pool, layout, k, v, stride, n_tokens, n_heads, slots);
  }
  void kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                    const int32_t* dst, size_t n) override {
    activate();
    cuda::kv_copy_rows(stream_, pool, layout, src, dst, n);
  }
  void kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                 const KvBlockLayout& layout, const int32_t* slots, size_t n) override {
    activate();
    cuda::kv_gather(stream_, k, v, stride, pool, layout, slots, n);
  }
  void kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0, const float* k,
                      const float* v, size_t n, size_t src_stride) override {
    activate();
    cuda::kv_block_write(stream_, block, layout, row0, k, v, n, src_stride);
  }
  void kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0, size_t n,
                     float* k, float* v) override {
    activate();
    cuda::kv_block_read(stream_, block, layout, row0, n, k, v);
  }

  // ---- Compute: Ada-KV's scoring (score_ops.h) ----
  void window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                             size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv, size_t Dh,
                             float scale, float* peak) override {
    activate();
    cuda::window_attention_mass(stream_, out, q, q_stride, k, k_stride, n, W, Hq, Hkv, Dh, scale,
                                peak);
  }
  void blend_scores(float* mass, float* peak, const float* window_mass, const float* window_peak,
                    size_t Hq, size_t n_keys, size_t n_window, size_t prefix,
                    float weight) override {
    activate();
    cuda::blend_scores(stream_, mass, peak, window_mass, window_peak, Hq, n_keys, n_window, prefix,
                       weight);
  }
  void pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix, size_t Hq,
                   size_t Hkv, const ScorePooling& pooling) override {
    activate();
    cuda::pool_scores(stream_, scores, mass, n_keys, prefix, Hq, Hkv, pooling);
  }

 private:
  // Makes this backend's device the calling thread's: the backend may be used from a thread
  // other than the one that made it.
  void activate() const { check_cuda(cudaSetDevice(device_), "cudaSetDevice"); }
  // One host<->device copy on the stream, returned once it is done.
  void transfer_and_wait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                         const char* what) {
    if (bytes == 0) return;
    activate();
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, stream_),
               (std::string("cudaMemcpyAsync (") + what + ")").c_str());
    check_cuda(cudaStreamSynchronize(stream_),
               (std::string("cudaStreamSynchronize (") + what + ")").c_str());
  }
  // What the constructor made, whatever part of it it made; errors have nowhere to go.
  void release() {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (range_host_) cudaFreeHost(range_host_);
    if (range_) cudaFree(range_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  // gather_rows' row-number range: written on the device, read back through pinned memory.
  int32_t* range_ = nullptr;
  int32_t* range_host_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace adakv::kernels
