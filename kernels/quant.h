// Matrix products against weights kept in their GGUF (ggml) block formats.
//
// W is N rows of K elements each, stored row after row in format f (row stride row_bytes(f, K)),
// exactly as a GGUF tensor of shape ne = [K, N] holds them. matmul_quant computes
//   y[m][n] = sum_k x[m][k] * W[n][k]      x: [M][K] float32, y: [M][N] float32
// M = 1 is decode (GEMV); 1 < M < 32 (batched decode) reads each weight row once per tile of
// activation rows, not once per row; M >= 32 (prefill) decodes panels of 64 weight rows to float32
// once and runs a float32 GEMM (OpenBLAS) of all M rows against each.
//
// For M < 32 the quantized formats (Q*) quantize the activation rows to 8 bits first (per 32
// elements: a float scale and 32 int8, as llama.cpp does), so they equal dequantize-then-float32
// only within the tolerance of kernels/quant_tolerance.h; for M >= 32 and for F32/F16/BF16 the
// products are float32 up to rounding. The explicit paths (MatmulPath) choose otherwise: the
// model decodes on int16 dots (or float dots when asked: decode_dots_path), never on 8-bit
// activations.
//
// The implementation is chosen at runtime (CPUID): AVX-512 (F+BW+VL), else AVX2+FMA+F16C, else
// portable scalar code. Every level computes each output element on one thread in an order that
// does not depend on the thread count, so results are identical for any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace adakv::kernels {

// Weight formats; the values are ggml's type ids (GgmlType in model/gguf/gguf.h).
enum class WeightFormat : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Every format matmul_quant supports, for tests and tools.
inline constexpr WeightFormat kAllWeightFormats[] = {
    WeightFormat::kF32,  WeightFormat::kF16,  WeightFormat::kBF16, WeightFormat::kQ8_0,
    WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0, WeightFormat::kQ5_1,
    WeightFormat::kQ4_K, WeightFormat::kQ5_K, WeightFormat::kQ6_K};

// False for a value outside the enum (e.g. a GGUF type id this module does not handle).
bool is_weight_format(uint32_t ggml_type_id);
const char* weight_format_name(WeightFormat f);
// Elements per block: 1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for the K-quants.
size_t block_elements(WeightFormat f);
// Bytes per block.
size_t block_bytes(WeightFormat f);
// Decodes n elements of format f (n a multiple of block_elements(f); src holds their blocks) to
// float32 as the `gguf` PyPI package does, bit for bit: float32 products and sums each rounded
// on its own. Scalar; the GGUF reader's dequantize and the scalar level's panels.
void decode_blocks(WeightFormat f, const void* src, float* dst, size_t n);
// Bytes of one row of K elements. K must be a multiple of block_elements(f); returns 0 when it
// is not (and for K = 0).
size_t row_bytes(WeightFormat f, size_t K);

// Instruction-set levels of the implementation.
enum class QuantLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* quant_level_name(QuantLevel level);
// Whether this CPU can run the level (kScalar: always).
bool cpu_supports(QuantLevel level);
// The best level this CPU supports; the default.
QuantLevel best_quant_level();
// Forces a level for all later calls (tests, benchmarks). Returns false, changing nothing, when
// the CPU lacks it.
bool set_quant_level(QuantLevel level);
QuantLevel quant_level();

// Which kernel computes the product.
enum class MatmulPath {
  kAuto,       // by M, as described at the top of this file
  kRowDots,    // the M < 32 path for any M: each row alone, activations rounded to 8 bits
  kFloatGemm,  // the M >= 32 path for any M: float32 products, no activation rounding
  // Each row alone at float32 accuracy: weights converted to float32 in registers (AVX-512,
  // AVX2) or in small panels in L1 (scalar) and multiplied with the unrounded activations. For
  // decode, where the 8-bit path's rounding can flip a near-tied token.
  kFloatDots,
  // Each row alone, activations rounded to 16 bits per 32 elements (steps of max|x| / 32767,
  // 258 times finer than kRowDots) and weights widened to int16, multiplied exactly in int32
  // and scaled in float32 per 32 elements. Float formats take their float rows unrounded.
  kInt16Dots,
};

// The row path a model's decode rows take (every layer and the LM head): kInt16Dots unless
// set_decode_dots(kFloatDots) chose the float dots (the CLI's --decode-dots float). The int16
// dots multiply 2 elements per integer lane (one vpmaddwd, or vpdpwssd with VNNI, does the work
// of two FMAs) where float dots first convert every weight to float32, so they do more products
// per instruction.
// Their rounding (a step of amax / 32767 per 32 elements) keeps decoded logits within 1e-3 of
// transformers' (tests/e2e/test_logits_oracle.cpp) and a row's result independent of its batch;
// but it turns the last-bit differences of another summation order (TP's all-reduce, another
// prompt chunking) into differences of 1e-4..1e-3 of the largest logit, where float dots keep
// them at float32 rounding.
// Process-wide, like the level; every rank sets the same from the same command line.
void set_decode_dots(MatmulPath path);
MatmulPath decode_dots_path();

// How a weight matrix's blocks lie in memory.
//  - kRows: as the GGUF stores them, row after row.
//  - kInterleaved: groups of kInterleaveRows rows (the last group padded with zero rows), each
//    group block by block; within a block the rows' scales come first (16 fp16 d, then 16 fp16
//    m for Q4_1), then the quants element by element, the 16 rows of an element side by side
//    (Q8_0: one byte per row; Q4_0 / Q4_1: one byte per row holding elements 2i, low nibble,
//    and 2i + 1). A group is as many bytes as its 16 rows in kRows. One vector then holds one
//    element of 16 rows, each output is one FMA chain along K (no horizontal sums), and the
//    conversion of a weight to float32 is shared by up to 16 activation rows. Q8_0, Q4_0 and
//    Q4_1 only, on the float paths (kFloatDots, kFloatGemm, kAuto: float dots below 32 rows)
//    and the int16 dots (AVX-512 VNNI multiplies a pair of elements of 16 rows at once).
enum class WeightLayout { kRows, kInterleaved };
inline constexpr size_t kInterleaveRows = 16;

// Whether format f can be interleaved.
bool interleavable(WeightFormat f);
// Bytes of N x K weights of format f interleaved (N rounded up to kInterleaveRows); 0 when f is
// not interleavable or K is not a multiple of its block.
size_t interleaved_bytes(WeightFormat f, size_t N, size_t K);
// Writes the N x K weights w (kRows) into out (interleaved_bytes(f, N, K) bytes) interleaved.
Status interleave_weights(void* out, const void* w, WeightFormat f, size_t N, size_t K);
// The layout this process's CPU kernels multiply format f fastest in: kInterleaved on AVX-512
// for the interleavable formats, unless the decode rows take int16 dots on a CPU without VNNI
// (set_decode_dots comes before loading), else kRows.
// ADAKV_WEIGHT_LAYOUT=rows in the environment keeps every weight in kRows (comparisons).
WeightLayout preferred_weight_layout(WeightFormat f);

struct MatmulOptions {
  size_t ldy = 0;           // row stride of y in floats; 0 means N
  bool accumulate = false;  // y += x W^T instead of y = x W^T
  MatmulPath path = MatmulPath::kAuto;
  // The layout of w. kInterleaved takes the float paths and kInt16Dots (kRowDots is
  // kInvalidArgument there); on the float paths each output is sum_k W[n][k] x[m][k] as one FMA
  // chain in k order, and on every path the scalar, AVX2 and AVX-512 levels give the same bits.
  WeightLayout layout = WeightLayout::kRows;
  // The float GEMM path only: the M rows as consecutive groups of these sizes (summing to M),
  // one GEMM per group against each decoded weight panel. OpenBLAS's result for a row depends
  // on the call's M, so a row's numbers depend only on its group (a prompt chunk computes the
  // same alone as beside other chunks). Null: one group of M rows.
  const uint32_t* row_groups = nullptr;
  size_t n_row_groups = 0;
};

// y[m][n] = sum_k x[m][k] * W[n][k]; see the top of this file. kInvalidArgument when K is not a
// multiple of block_elements(f) or is 0, when f is not a WeightFormat, when ldy is below N, or a
// pointer is null while M and N are not 0, or when row_groups do not sum to M. Multithreaded over N
// with OpenMP (kernels::set_num_threads). On the kRowDots path a row's result never depends on M,
// the other rows or the thread count (the float GEMM's may, by float rounding, with M).
Status matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M, size_t N,
                    size_t K, const MatmulOptions& options, Stream stream = {});
// out[t][:] = row ids[t] of the [n_rows][dim] table w in format f, decoded to float32 (the
// token embedding lookup). kInvalidArgument for an id outside [0, n_rows) or a dim that is not
// a multiple of block_elements(f).
Status dequantize_rows(float* out, const void* w, WeightFormat f, const int32_t* ids, size_t T,
                       size_t n_rows, size_t dim, WeightLayout layout = WeightLayout::kRows,
                       Stream stream = {});

inline Status matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M,
                           size_t N, size_t K, Stream stream = {}) {
  return matmul_quant(y, x, w, f, M, N, K, MatmulOptions{}, stream);
}

}  // namespace adakv::kernels
