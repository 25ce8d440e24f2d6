// The backend a model runs on: it owns memory (weights, the forward's workspace, the KV pool's
// arena and block tables, staged token ids and positions, logits) as well as compute (every op
// of the forward pass, KV appends, copies and reads, the scoring of Ada-KV). The CPU backend
// (kernels/cpu/cpu_backend.cpp) implements it over the ops of kernels/ops.h and kernels/quant.h;
// the guarded backend (kernels/cpu/guarded_backend.cpp) is the CPU backend with its memory
// unreachable to host code outside its own ops; the CUDA backend implements the same methods.
//
// Contract:
//  - Every pointer an op takes, and every pointer inside PagedSequence (block tables, lengths,
//    queries, outputs), points into memory of this backend. Sizes, strides and small parameter
//    structs (MatmulOptions with its row groups, ScorePooling, KvBlockLayout) are host values.
//  - Host code never dereferences backend memory: bytes enter through upload() and leave
//    through download(); host code that must run on backend memory (the MPI collectives of a
//    CPU backend's device group) runs inside run_on_host().
//  - Ops and transfers run in the order issued, on one stream per backend; download() and
//    synchronize() wait for everything issued before them.
//  - Every op throws std::invalid_argument naming itself on arguments its ops.h twin rejects.
//
// Knobs of one backend alone (the CPU's thread count: kernels/cpu_threads.h) stay out of this
// interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kv_layout.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace adakv::kernels {

// kGuarded: the CPU backend with its memory fenced off from host code (make_guarded_backend), a
// stand-in for a device's memory that runs everywhere.
enum class BackendKind { kCpu, kCuda, kGuarded };
const char* to_string(BackendKind kind);
// "cpu", "cuda" or "guarded"; throws std::invalid_argument naming the value otherwise.
BackendKind backend_kind_from_string(const std::string& name);

class Backend;

// How pool_scores smooths and aggregates a layer's window mass (compression::CompressionConfig's
// pooling knobs): the first `sink` positions keep their own mass and count as zeros to the
// pooling of the others; the rest take a 1-D pooling of width `kernel` (stride 1, padding
// kernel / 2, average counting the padding as zeros, like torch's) whose span for position i is
// [i - kernel/2 - shift, i + kernel/2 - shift]; then the GQA group's rows are averaged or
// maxed.
struct ScorePooling {
  size_t sink = 0;
  size_t kernel = 1;
  bool max_pool = true;
  size_t shift = 0;
  bool gqa_max = false;
};

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

  // ---- Policy: how this backend wants the model kept and computed (the same on every rank) ----
  // The layout weights of format f are kept in (decided at load).
  virtual WeightLayout weight_layout(WeightFormat f) const = 0;
  // The path of decode rows (kInt16Dots or kFloatDots; prompt rows take kFloatGemm).
  virtual MatmulPath decode_path() const = 0;
  // Bytes the activation buffers of one row slice of a layer (norm output, gate/up, SwiGLU
  // output) may take: the forward cuts longer prompts into slices of that size.
  virtual size_t slice_bytes() const { return size_t(16) << 20; }

  // ---- Memory ----
  // `bytes` of device memory, uninitialised (on the CPU, fresh pages cost nothing until
  // written: a KV arena sized for the worst case is paid for as it fills).
  virtual Buffer allocate(size_t bytes) = 0;
  // Read-only memory holding the `bytes` at `host` (weights and norms, at load). The CPU
  // backend returns a view of `host` itself, no copy, so `host` must outlive the buffer (a
  // mapped file, or memory the caller keeps); the guarded and device backends copy.
  virtual Buffer constant(const void* host, size_t bytes) = 0;
  // Called by Buffer only.
  virtual void free(void* data, size_t bytes) = 0;

  // ---- Transfers (stream-ordered) ----
  // host -> backend; returns once `src` may be reused.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // backend -> host; returns once `dst` holds the bytes (after every op issued before).
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // backend -> backend; the ranges must not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(void* dst, uint8_t byte, size_t bytes) = 0;
  // Waits for every op and transfer issued so far.
  virtual void synchronize() = 0;
  // Runs `task`, host code that reads and writes this backend's memory, after everything issued
  // before it: how a CPU backend's device group runs MPI collectives on activations. A backend
  // whose memory the host cannot address throws std::logic_error.
  virtual void run_on_host(const std::function<void()>& task) = 0;
  // The stream this backend's ops run on, for libraries that enqueue work in the same order
  // (the NCCL device group): a cudaStream_t on the CUDA backend, null on the CPU backends.
  virtual void* native_stream() { return nullptr; }
  // Row gather: dst row i (dst_stride bytes apart) <- src row rows[i] (src_stride bytes apart),
  // row_bytes each, for i < n; `rows` holds n row numbers in backend memory. dst and src must not
  // overlap.
  virtual void gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                           size_t row_bytes, const int32_t* rows, size_t n) = 0;

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
  // RoPE on adjacent pairs of the first freqs.rot_dim() dims of each head (kernels/ops.h).
  virtual void rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                             size_t head_dim, size_t token_stride,
                             const RopeFrequencies& freqs) = 0;
  virtual void swiglu(float* out, const float* gate_up, size_t T, size_t F) = 0;
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;
  virtual void add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy) = 0;
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
  // ---- The KV pool (slot = block id * block_tokens + row in the block) ----
  // The K and V rows of n_tokens new tokens, n_heads heads each (token t, head h at
  // k + t * stride + h * head_dim, and v likewise), stored in the pool's dtype at slot
  // slots[t * n_heads + h]; a slot of -1 stores nothing. One call per layer serves every
  // sequence of a step.
  virtual void kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                         size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots) = 0;
  // Slot dst[i] <- the bytes slot src[i] held before the call (K, V and E4M3 scales, never
  // re-quantized), for i < n: compaction in place and copies of a sequence.
  virtual void kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                            const int32_t* dst, size_t n) = 0;
  // Row i of k (and of v unless null), stride floats apart, <- slot slots[i] as float32.
  virtual void kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                         const KvBlockLayout& layout, const int32_t* slots, size_t n) = 0;
  virtual void kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0,
                              const float* k, const float* v, size_t n, size_t src_stride) = 0;
  virtual void kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0,
                             size_t n, float* k, float* v) = 0;
  virtual void window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                                     size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv,
                                     size_t Dh, float scale, float* peak) = 0;
  // Look-ahead weighting of window masses (kernels::blend_scores in ops.h); peak and
  // window_peak are both null or both given.
  virtual void blend_scores(float* mass, float* peak, const float* window_mass,
                            const float* window_peak, size_t Hq, size_t n_keys, size_t n_window,
                            size_t prefix, float weight) = 0;
  // Window mass [Hq][n_keys] -> scores [Hkv][prefix]: sinks kept, the rest pooled along the
  // sequence, then each GQA group aggregated (ScorePooling; kernels::pool_scores in ops.h).
  virtual void pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix,
                           size_t Hq, size_t Hkv, const ScorePooling& pooling) = 0;
};

// The backend of `kind` for the rank `local_rank` of its node: a CUDA backend runs on device
// local_rank % (devices this process sees), so ranks beyond a node's GPUs share them. Throws
// std::runtime_error saying why when this build or machine has none of that kind.
std::unique_ptr<Backend> make_backend(BackendKind kind, int local_rank = 0);
// The devices of `kind` this process can run a backend on: 1 for the CPU kinds; for kCuda the
// visible CUDA devices (0 without a driver, or in a build without CUDA).
int device_count(BackendKind kind);
// The CPU backend whose memory host code cannot reach: the addresses it hands out lie in a view
// kept PROT_NONE except inside run_on_host(), so a stray host read or write of backend memory
// faults at once (SIGSEGV at the offending instruction); its ops check that every pointer they
// are given lies in that view (std::invalid_argument naming the op and the argument when not)
// and run on a second, always-writable view of the same memory.
std::unique_ptr<Backend> make_guarded_backend();
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
  // `n` int32 in slot `slot` (the same storage as floats()).
  int32_t* ints(size_t slot, size_t n) {
    static_assert(sizeof(int32_t) == sizeof(float));
    return reinterpret_cast<int32_t*>(floats(slot, n));
  }

 private:
  Backend* backend_;
  std::vector<Buffer> slots_;
};

}  // namespace adakv::kernels
