// The backend a model runs on: it owns memory (buffers, the forward's workspace, the KV pool's
// arena) as well as compute (every op of the forward pass, KV block writes and reads, the
// scoring of Ada-KV). The CPU backend (kernels/cpu/cpu_backend.cpp) implements it over the ops
// of kernels/ops.h and kernels/quant.h; the CUDA backend implements the same methods one to one.
// Pointers passed to the ops point into memory of the same backend. Every op throws
// std::invalid_argument naming itself on arguments its ops.h twin rejects.
//
// Knobs of one backend alone (the CPU's thread count: kernels/cpu_threads.h) stay out of this
// interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kv_layout.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace adakv::kernels {

enum class BackendKind { kCpu, kCuda };
const char* to_string(BackendKind kind);
// "cpu" or "cuda"; throws std::invalid_argument naming the value otherwise.
BackendKind backend_kind_from_string(const std::string& name);

class Backend;

// Memory of one backend, freed by it when the Buffer goes.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* data, size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void reset();

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;

  // ---- Memory ----
  // `bytes` of device memory, uninitialised (on the CPU, fresh pages cost nothing until
  // written: a KV arena sized for the worst case is paid for as it fills).
  virtual Buffer allocate(size_t bytes) = 0;
  // Called by Buffer only.
  virtual void free(void* data, size_t bytes) = 0;

  // ---- Compute (the semantics of the ops.h / quant.h function of the same name) ----
  virtual void rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim,
                       float eps) = 0;
  virtual void matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M,
                            size_t N, size_t K, const MatmulOptions& options) = 0;
  // out[t][:] = row ids[t] of a [n_rows][dim] table stored in format f and layout `layout`, as
  // float32.
  virtual void embed_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                          const int32_t* ids, size_t T, size_t n_rows, size_t dim) = 0;
  // The lookup of a vocab-parallel embedding: `table` holds rows [row_begin, row_begin + n_rows)
  // of a [vocab][dim] table; out[t][:] is row ids[t] where this shard holds it, else zeros, so
  // that the sum over the shards is the whole lookup. An id outside [0, vocab) is an error.
  virtual void embed_shard_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                                const int32_t* ids, size_t T, size_t row_begin, size_t n_rows,
                                size_t vocab, size_t dim) = 0;
  virtual void rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                             size_t head_dim, size_t rot_dim, size_t token_stride, float theta) = 0;
  virtual void swiglu(float* out, const float* gate_up, size_t T, size_t F) = 0;
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;
  // Vocab-parallel logits: gathered holds `shards` rank-major blocks of [rows][cols]; writes
  // logits[t][s * cols + c] = gathered[s][t][c], i.e. [rows][shards * cols].
  virtual void interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                                 size_t cols) = 0;
  virtual void attention_causal(float* out, const float* q, const float* k, const float* v,
                                size_t T, size_t n_kv, size_t Hq, size_t Hkv, size_t Dh,
                                size_t q_stride, size_t kv_stride, size_t out_stride,
                                float scale) = 0;
  virtual void attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                               const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale) = 0;
  virtual void kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0,
                              const float* k, const float* v, size_t n, size_t src_stride) = 0;
  virtual void kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0,
                             size_t n, float* k, float* v) = 0;
  virtual void window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                                     size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv,
                                     size_t Dh, float scale, float* peak) = 0;
};

// The backend of `kind`. Throws std::runtime_error saying why when this build or machine has
// none of that kind.
std::unique_ptr<Backend> make_backend(BackendKind kind);
// The process's CPU backend, for code that runs without a chosen backend (tools, tests).
Backend& cpu_backend();

// Scratch memory of a forward pass, kept across calls: each named slot grows to the largest
// size asked and is reused, so a steady decode loop allocates nothing.
class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(&backend) {}
  // `floats` floats in slot `slot` (contents undefined); valid until the slot is asked again
  // for more.
  float* floats(size_t slot, size_t floats);

 private:
  Backend* backend_;
  std::vector<Buffer> slots_;
};

}  // namespace adakv::kernels
