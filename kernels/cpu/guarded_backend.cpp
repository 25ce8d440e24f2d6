// The guarded backend: the CPU backend's ops on memory host code cannot reach outside them
// (guarded_region.h), each pointer an op is given checked to be this backend's and translated
// to the view the ops run on.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/guarded_arena.h"
#include "kernels/cpu/guarded_region.h"

namespace adakv::kernels {
namespace {

// Address space only: pages cost memory once written.
constexpr size_t kReserveBytes = size_t{64} << 30;
constexpr size_t kMinReserveBytes = size_t{1} << 30;
// Freed blocks from this size up give their pages back at once; smaller ones keep them for the
// next allocation.
constexpr size_t kReleaseBytes = size_t{64} << 10;

// The pointer arguments of one op: each must be the backend's (null only where the op has
// nothing to do, or for the optional ones), and is replaced by its op-view address.
class Args {
 public:
  Args(const GuardedRegion& region, const char* op, bool empty = false)
      : region_(region), op_(op), empty_(empty) {}

  template <typename T>
  T* operator()(T* p, const char* name) const {
    return p || !empty_ ? view(p, name) : p;
  }
  template <typename T>
  T* optional(T* p, const char* name) const {
    return p ? view(p, name) : p;
  }

 private:
  template <typename T>
  T* view(T* p, const char* name) const {
    if (!region_.contains(p)) {
      throw std::invalid_argument(std::string(op_) + ": " + name +
                                  " is not memory of the guarded backend");
    }
    return region_.view(p);
  }

  const GuardedRegion& region_;
  const char* op_;
  bool empty_;
};

// The host view open for the life of the object.
class HostAccess {
 public:
  explicit HostAccess(GuardedRegion& region) : region_(region) { region_.open_host(); }
  ~HostAccess() { region_.close_host(); }
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;

 private:
  GuardedRegion& region_;
};

class GuardedBackend final : public Backend {
 public:
  explicit GuardedBackend(size_t capacity) : region_(capacity), arena_(capacity) {}

  BackendKind kind() const override { return BackendKind::kGuarded; }
  WeightLayout weight_layout(WeightFormat f) const override { return preferred_weight_layout(f); }
  MatmulPath decode_path() const override { return decode_dots_path(); }

  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return Buffer();
    std::lock_guard<std::mutex> lock(mutex_);
    return Buffer(this, region_.host(arena_.take(bytes)), bytes);
  }
  Buffer constant(const void* host, size_t bytes) override {
    Buffer b = allocate(bytes);
    if (bytes > 0) std::memcpy(region_.view(b.data()), host, bytes);
    return b;
  }
  void free(void* data, size_t) override {
    const size_t offset =
        reinterpret_cast<uintptr_t>(data) - reinterpret_cast<uintptr_t>(region_.host(0));
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t size = region_.contains(data) ? arena_.give(offset) : 0;
    if (size == 0) {
      std::fprintf(stderr, "adakv guarded backend: free of %p, which it did not allocate\n", data);
      std::abort();
    }
    if (size >= kReleaseBytes) region_.release(offset, size);
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    void* d = Args(region_, "upload", bytes == 0)(dst, "dst");
    if (bytes > 0) std::memcpy(d, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    const void* s = Args(region_, "download", bytes == 0)(src, "src");
    if (bytes > 0) std::memcpy(dst, s, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const Args a(region_, "copy", bytes == 0);
    cpu_.copy(a(dst, "dst"), a(src, "src"), bytes);
  }
  void fill(void* dst, uint8_t byte, size_t bytes) override {
    cpu_.fill(Args(region_, "fill", bytes == 0)(dst, "dst"), byte, bytes);
  }
  void synchronize() override {}
  void run_on_host(const std::function<void()>& task) override {
    HostAccess open(region_);
    task();
  }
  void gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                   size_t row_bytes, const int32_t* rows, size_t n) override {
    const Args a(region_, "gather_rows", n == 0 || row_bytes == 0);
    cpu_.gather_rows(a(dst, "dst"), dst_stride, a(src, "src"), src_stride, row_bytes,
                     a(rows, "rows"), n);
  }

  void rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim,
               float eps) override {
    const Args a(region_, "rmsnorm", rows == 0);
    cpu_.rmsnorm(a(out, "out"), a(x, "x"), a(w, "w"), rows, dim, eps);
  }
  void matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M, size_t N,
                    size_t K, const MatmulOptions& options) override {
    const Args a(region_, "matmul_quant", M == 0 || N == 0);
    // row_groups plans the CPU's GEMM calls: host memory as the model keeps it, or this
    // backend's.
    MatmulOptions o = options;
    if (region_.contains(o.row_groups)) o.row_groups = region_.view(o.row_groups);
    cpu_.matmul_quant(a(y, "y"), a(x, "x"), a(w, "w"), f, M, N, K, o);
  }
  void embed_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                  const int32_t* ids, size_t T, size_t n_rows, size_t dim) override {
    const Args a(region_, "embed_rows", T == 0);
    cpu_.embed_rows(a(out, "out"), a(table, "table"), f, layout, a(ids, "ids"), T, n_rows, dim);
  }
  void embed_shard_rows(float* out, const void* table, WeightFormat f, WeightLayout layout,
                        const int32_t* ids, size_t T, size_t row_begin, size_t n_rows, size_t vocab,
                        size_t dim) override {
    const Args a(region_, "embed_shard_rows", T == 0);
    cpu_.embed_shard_rows(a(out, "out"), a(table, "table"), f, layout, a(ids, "ids"), T, row_begin,
                          n_rows, vocab, dim);
  }
  void rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t token_stride, const RopeFrequencies& freqs) override {
    const Args a(region_, "rope_adjacent", T == 0 || n_heads == 0);
    cpu_.rope_adjacent(a(x, "x"), a(positions, "positions"), T, n_heads, head_dim, token_stride,
                       freqs);
  }
  void swiglu(float* out, const float* gate_up, size_t T, size_t F) override {
    const Args a(region_, "swiglu", T == 0 || F == 0);
    cpu_.swiglu(a(out, "out"), a(gate_up, "gate_up"), T, F);
  }
  void add(float* out, const float* x, const float* y, size_t n) override {
    const Args a(region_, "add", n == 0);
    cpu_.add(a(out, "out"), a(x, "a"), a(y, "b"), n);
  }
  void add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy) override {
    const Args a(region_, "add_bias", rows == 0 || n == 0);
    cpu_.add_bias(a(y, "y"), a(bias, "bias"), rows, n, ldy);
  }
  void interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                         size_t cols) override {
    const Args a(region_, "interleave_shards", shards == 0 || rows == 0 || cols == 0);
    cpu_.interleave_shards(a(logits, "logits"), a(gathered, "gathered"), shards, rows, cols);
  }
  void attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale) override {
    const Args a(region_, "attention_causal", T == 0);
    cpu_.attention_causal(a(out, "out"), a(q, "q"), a(k, "k"), a(v, "v"), T, n_kv, Hq, Hkv, Dh,
                          q_stride, kv_stride, out_stride, scale);
  }
  void attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                       const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale) override {
    const Args a(region_, "attention_paged", n_seqs == 0);
    const PagedSequence* in = a(seqs, "seqs");
    // The sequences and their block tables, re-pointed at the op view (host copies: the ops
    // read them on the host).
    std::vector<PagedSequence> local(n_seqs);
    std::vector<const int32_t*> tables(n_seqs * Hkv);
    for (size_t s = 0; s < n_seqs; ++s) {
      PagedSequence q = in[s];
      const int32_t* const* ids = a(q.block_ids, "seqs[].block_ids");
      for (size_t g = 0; g < Hkv; ++g) tables[s * Hkv + g] = a(ids[g], "seqs[].block_ids[h]");
      q.block_ids = tables.data() + s * Hkv;
      q.lengths = a(q.lengths, "seqs[].lengths");
      q.q = a(q.q, "seqs[].q");
      q.out = a(q.out, "seqs[].out");
      local[s] = q;
    }
    cpu_.attention_paged(local.data(), n_seqs, a(pool, "pool"), layout, Hq, Hkv, scale);
  }
  void kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                 size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots) override {
    const Args a(region_, "kv_append", n_tokens == 0 || n_heads == 0);
    cpu_.kv_append(a(pool, "pool"), layout, a(k, "k"), a(v, "v"), stride, n_tokens, n_heads,
                   a(slots, "slots"));
  }
  void kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                    const int32_t* dst, size_t n) override {
    const Args a(region_, "kv_copy_rows", n == 0);
    cpu_.kv_copy_rows(a(pool, "pool"), layout, a(src, "src"), a(dst, "dst"), n);
  }
  void kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                 const KvBlockLayout& layout, const int32_t* slots, size_t n) override {
    const Args a(region_, "kv_gather", n == 0);
    cpu_.kv_gather(a(k, "k"), a.optional(v, "v"), stride, a(pool, "pool"), layout,
                   a(slots, "slots"), n);
  }
  void kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0, const float* k,
                      const float* v, size_t n, size_t src_stride) override {
    const Args a(region_, "kv_block_write", n == 0);
    cpu_.kv_block_write(a(block, "block"), layout, row0, a(k, "k"), a(v, "v"), n, src_stride);
  }
  void kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0, size_t n,
                     float* k, float* v) override {
    const Args a(region_, "kv_block_read", n == 0);
    cpu_.kv_block_read(a(block, "block"), layout, row0, n, a(k, "k"), a(v, "v"));
  }
  void window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                             size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv, size_t Dh,
                             float scale, float* peak) override {
    const Args a(region_, "window_attention_mass", W == 0 || Hq == 0);
    cpu_.window_attention_mass(a(out, "out"), a(q, "q"), q_stride, a(k, "k"), k_stride, n, W, Hq,
                               Hkv, Dh, scale, a.optional(peak, "peak"));
  }
  void blend_scores(float* mass, float* peak, const float* window_mass, const float* window_peak,
                    size_t Hq, size_t n_keys, size_t n_window, size_t prefix,
                    float weight) override {
    const Args a(region_, "blend_scores", Hq == 0 || prefix == 0);
    check(kernels::blend_scores(
              a(mass, "mass"), a.optional(peak, "peak"), a(window_mass, "window_mass"),
              a.optional(window_peak, "window_peak"), Hq, n_keys, n_window, prefix, weight),
          "blend_scores");
  }
  void pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix, size_t Hq,
                   size_t Hkv, const ScorePooling& pooling) override {
    const Args a(region_, "pool_scores", Hq == 0 || prefix == 0);
    check(kernels::pool_scores(a(scores, "scores"), a(mass, "mass"), n_keys, prefix, Hq, Hkv,
                               pooling),
          "pool_scores");
  }

 private:
  GuardedRegion region_;
  OffsetArena arena_;
  std::mutex mutex_;  // arena_
  Backend& cpu_ = cpu_backend();
};

}  // namespace

std::unique_ptr<Backend> make_guarded_backend() {
  // The largest reservation this process may make (an address-space limit can refuse 64 GiB).
  for (size_t bytes = kReserveBytes;; bytes /= 2) {
    try {
      return std::make_unique<GuardedBackend>(bytes);
    } catch (const std::runtime_error&) {
      if (bytes / 2 < kMinReserveBytes) throw;
    }
  }
}

}  // namespace adakv::kernels
