// The CPU backend: host memory, and the ops of kernels/ops.h and kernels/quant.h (OpenMP
// threads, AVX2/AVX-512 chosen at runtime).
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/backend.h"

namespace adakv::kernels {
namespace {

// Cache-line aligned, so vector loads of a row start aligned when rows are.
constexpr size_t kAlignment = 64;

class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  WeightLayout weight_layout(WeightFormat f) const override { return preferred_weight_layout(f); }
  MatmulPath decode_path() const override { return decode_dots_path(); }

  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return Buffer(this, nullptr, 0);
    void* p = ::operator new (bytes, std::align_val_t{kAlignment});
    return Buffer(this, p, bytes);
  }
  // A view: a Buffer without an owner frees nothing.
  Buffer constant(const void* host, size_t bytes) override {
    return Buffer(nullptr, const_cast<void*>(host), bytes);
  }
  void free(void* data, size_t) override { ::operator delete (data, std::align_val_t{kAlignment}); }

  // Host memory: the transfers are copies, and everything has run when a call returns.
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void fill(void* dst, uint8_t byte, size_t bytes) override {
    if (bytes > 0) std::memset(dst, byte, bytes);
  }
  void synchronize() override {}
  void run_on_host(const std::function<void()>& task) override { task(); }
  void gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                   size_t row_bytes, const int32_t* rows, size_t n) override {
    check(kernels::gather_rows(dst, dst_stride, src, src_stride, row_bytes, rows, n),
          "gather_rows");
  }

  void rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim,
               float eps) override {
    check(kernels::rmsnorm(out, x, w, rows, dim, eps), "rmsnorm");
  }
  void matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M, size_t N,
                    size_t K, const MatmulOptions& options) override {
    check(kernels::matmul_quant(y, x, w, f, M, N, K, options), "matmul_quant");
  }
  void embed_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                  const int32_t* ids, size_t T, size_t n_rows, size_t dim) override {
    check(kernels::dequantize_rows(out, table, f, ids, T, n_rows, dim, layout), "embed_rows");
  }
  void embed_shard_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                        const int32_t* ids, size_t T, size_t row_begin, size_t n_rows, size_t vocab,
                        size_t dim) override {
    for (size_t t = 0; t < T; ++t) {
      if (ids[t] < 0 || size_t(ids[t]) >= vocab) {
        throw std::invalid_argument("embed_shard_rows: token id " + std::to_string(ids[t]) +
                                    " is outside the vocabulary of " + std::to_string(vocab));
      }
      float* row = out + t * dim;
      const size_t id = size_t(ids[t]);
      if (id < row_begin || id >= row_begin + n_rows) {
        std::fill(row, row + dim, 0.0f);
        continue;
      }
      const int32_t local = static_cast<int32_t>(id - row_begin);
      check(kernels::dequantize_rows(row, table, f, &local, 1, n_rows, dim, layout),
            "embed_shard_rows");
    }
  }
  void rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t token_stride, const RopeFrequencies& freqs) override {
    check(kernels::rope_adjacent(x, positions, T, n_heads, head_dim, token_stride, freqs),
          "rope_adjacent");
  }
  void swiglu(float* out, const float* gate_up, size_t T, size_t F) override {
    check(kernels::swiglu(out, gate_up, T, F), "swiglu");
  }
  void add(float* out, const float* a, const float* b, size_t n) override {
    check(kernels::add(out, a, b, n), "add");
  }
  void add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy) override {
    check(kernels::add_bias(y, bias, rows, n, ldy), "add_bias");
  }
  void interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                         size_t cols) override {
    if (shards > 0 && rows > 0 && cols > 0 && (!logits || !gathered)) {
      check(Status::kInvalidArgument, "interleave_shards");
    }
    for (size_t s = 0; s < shards; ++s) {
      for (size_t t = 0; t < rows; ++t) {
        const float* src = gathered + (s * rows + t) * cols;
        float* dst = logits + t * shards * cols + s * cols;
        for (size_t c = 0; c < cols; ++c) dst[c] = src[c];
      }
    }
  }
  void attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale) override {
    check(kernels::attention_causal(out, q, k, v, T, n_kv, Hq, Hkv, Dh, q_stride, kv_stride,
                                    out_stride, scale),
          "attention_causal");
  }
  void attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                       const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale) override {
    check(kernels::attention_paged(seqs, n_seqs, pool, layout, Hq, Hkv, scale), "attention_paged");
  }
  void kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                 size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots) override {
    check(kernels::kv_append(pool, layout, k, v, stride, n_tokens, n_heads, slots), "kv_append");
  }
  void kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                    const int32_t* dst, size_t n) override {
    check(kernels::kv_copy_rows(pool, layout, src, dst, n), "kv_copy_rows");
  }
  void kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                 const KvBlockLayout& layout, const int32_t* slots, size_t n) override {
    check(kernels::kv_gather(k, v, stride, pool, layout, slots, n), "kv_gather");
  }
  void kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0, const float* k,
                      const float* v, size_t n, size_t src_stride) override {
    check(kernels::kv_block_write(block, layout, row0, k, v, n, src_stride), "kv_block_write");
  }
  void kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0, size_t n,
                     float* k, float* v) override {
    check(kernels::kv_block_read(block, layout, row0, n, k, v), "kv_block_read");
  }
  void window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                             size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv, size_t Dh,
                             float scale, float* peak) override {
    check(kernels::window_attention_mass(out, q, q_stride, k, k_stride, n, W, Hq, Hkv, Dh, scale,
                                         peak),
          "window_attention_mass");
  }
  void blend_scores(float* mass, float* peak, const float* window_mass, const float* window_peak,
                    size_t Hq, size_t n_keys, size_t n_window, size_t prefix,
                    float weight) override {
    check(kernels::blend_scores(mass, peak, window_mass, window_peak, Hq, n_keys, n_window, prefix,
                                weight),
          "blend_scores");
  }
  void pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix, size_t Hq,
                   size_t Hkv, const ScorePooling& pooling) override {
    check(kernels::pool_scores(scores, mass, n_keys, prefix, Hq, Hkv, pooling), "pool_scores");
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace adakv::kernels
