// The op set the model's forward pass is written against. kernels/cpu implements it; the
// CUDA backend implements the same signatures. Raw pointers, sizes and strides; row-major;
// the stream comes last (ignored on the CPU); every op returns a Status.
//
// Shapes use the names: T tokens, D model width, Hq query heads, Hkv KV heads, Dh head size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adakv::kernels {

enum class Status { kOk, kInvalidArgument };

// A CUDA stream on the GPU backend; the CPU backend ignores it.
struct Stream {
  void* handle = nullptr;
};

// Throws std::invalid_argument naming `op` unless s is kOk.
void check(Status s, const char* op);

// Threads the CPU ops use (OpenMP and BLAS); n <= 0 means all hardware threads.
void set_num_threads(int n);
int num_threads();

// out[t][:] = x[t][:] / rms(x[t][:]) * w[:]   x, out: [rows][dim] (may alias), w: [dim]
Status rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim, float eps,
               Stream stream = {});

// y[m][n] = sum_k x[m][k] * w[n][k]   x: [M][K], w: [N][K] (PyTorch's [out][in]), y: [M][N].
// When accumulate is set, adds to y instead of overwriting it.
Status matmul(float* y, const float* x, const float* w, size_t M, size_t N, size_t K,
              bool accumulate = false, Stream stream = {});

// RoPE on adjacent pairs, in place (the layout of llama GGUF files):
// (x[2i], x[2i+1]) rotated by pos * theta^(-2i/rot_dim), for 2i < rot_dim.
// x: [T][n_heads][head_dim] with row stride `token_stride` floats; positions: [T].
Status rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                     size_t head_dim, size_t rot_dim, size_t token_stride, float theta,
                     Stream stream = {});

// SwiGLU: out[t][i] = silu(gate_up[t][i]) * gate_up[t][F + i]   gate_up: [T][2F], out: [T][F].
Status swiglu(float* out, const float* gate_up, size_t T, size_t F, Stream stream = {});

// out[i] = a[i] + b[i] (out may alias a or b).
Status add(float* out, const float* a, const float* b, size_t n, Stream stream = {});

// out[t][:] = table[ids[t]][:]   table: [n_rows][dim]; ids outside [0, n_rows) -> kInvalidArgument.
Status embed(float* out, const float* table, const int32_t* ids, size_t T, size_t n_rows,
             size_t dim, Stream stream = {});

// Causal grouped-query attention of T new queries over a contiguous cache of n_kv tokens whose
// last T entries are the new tokens (query t sits at cache index n_kv - T + t and sees cache
// entries 0..n_kv-T+t).
//   q:   [T][Hq][Dh], row stride q_stride floats
//   k,v: [n_kv][Hkv][Dh], row stride kv_stride floats
//   out: [T][Hq][Dh], row stride out_stride floats
// Query head h reads KV head h / (Hq / Hkv). Scores are scaled by `scale`. Blocked with an
// online softmax, so no [T][n_kv] matrix is ever materialised.
Status attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale, Stream stream = {});

}  // namespace adakv::kernels
