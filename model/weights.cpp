#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"

namespace adakv::model {
namespace {

const gguf::TensorInfo& find_checked(const gguf::GgufFile& f, const std::string& name, size_t cols,
                                     size_t rows) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error(fmt::format("{}: tensor '{}' is missing", f.path(), name));
  const bool vector_ok = rows == 1 && t->ne.size() == 1 && t->ne[0] == cols;
  const bool matrix_ok = t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows;
  if (!vector_ok && !matrix_ok) {
    std::string shape;
    for (auto n : t->ne) shape += (shape.empty() ? "" : ", ") + std::to_string(n);
    throw std::runtime_error(fmt::format("{}: tensor '{}' has shape [{}], expected [{}, {}]",
                                         f.path(), name, shape, cols, rows));
  }
  if (!gguf::can_dequantize(t->type)) {
    throw std::runtime_error(fmt::format("{}: tensor '{}' has type {}, which adakv cannot decode",
                                         f.path(), name, gguf::type_name(t->type)));
  }
  return *t;
}

// Dequantizes rows [row_begin, row_begin + row_count) of tensor `name`, columns
// [col_begin, col_begin + col_count) of each, checking it has shape ne = [cols, rows] (rows = 1
// for vectors). Rows are whole blocks in GGUF, so a row is decoded whole and then sliced.
std::vector<float> load_slice(const gguf::GgufFile& f, const std::string& name, size_t cols,
                              size_t rows, size_t row_begin, size_t row_count, size_t col_begin,
                              size_t col_count) {
  const gguf::TensorInfo& t = find_checked(f, name, cols, rows);
  const size_t row_bytes = gguf::bytes_for(t.type, cols);
  const uint8_t* data = f.tensor_data(t);
  std::vector<float> out(row_count * col_count);
  if (col_begin == 0 && col_count == cols) {
    gguf::dequantize(t.type, data + row_begin * row_bytes, out.data(), row_count * cols);
    return out;
  }
  std::vector<float> row(cols);
  for (size_t r = 0; r < row_count; ++r) {
    gguf::dequantize(t.type, data + (row_begin + r) * row_bytes, row.data(), cols);
    std::copy(row.begin() + col_begin, row.begin() + col_begin + col_count,
              out.begin() + r * col_count);
  }
  return out;
}

std::vector<float> load_tensor(const gguf::GgufFile& f, const std::string& name, size_t cols,
                               size_t rows) {
  return load_slice(f, name, cols, rows, 0, rows, 0, cols);
}

// ColumnParallel: the rows [begin, begin + count) of an [rows][cols] matrix.
std::vector<float> load_rows(const gguf::GgufFile& f, const std::string& name, size_t cols,
                             size_t rows, size_t begin, size_t count) {
  return load_slice(f, name, cols, rows, begin, count, 0, cols);
}

// RowParallel: the columns [begin, begin + count) of every row.
std::vector<float> load_cols(const gguf::GgufFile& f, const std::string& name, size_t cols,
                             size_t rows, size_t begin, size_t count) {
  return load_slice(f, name, cols, rows, 0, rows, begin, count);
}

// Stacks row-major matrices with the same row length.
std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

size_t Weights::bytes() const {
  size_t n = token_embd.size() + output_norm.size() + output.size();
  for (const auto& l : layers) {
    n += l.attn_norm.size() + l.wqkv.size() + l.wo.size() + l.ffn_norm.size() + l.w_gate_up.size() +
         l.w_down.size();
  }
  return n * sizeof(float);
}

Weights Weights::load(const gguf::GgufFile& f, const ModelConfig& c, const ShardLayout& s) {
  const size_t Dh = c.head_dim, D = c.d_model;
  Weights w;
  w.token_embd = load_tensor(f, "token_embd.weight", D, c.vocab_size);
  w.output_norm = load_tensor(f, "output_norm.weight", D, 1);
  if (!c.tied_embeddings) {
    w.output = load_rows(f, "output.weight", D, c.vocab_size, s.vocab_begin, s.vocab_rows);
  }
  w.layers.resize(c.n_layers);
  for (size_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    auto& l = w.layers[i];
    l.attn_norm = load_tensor(f, p + "attn_norm.weight", D, 1);
    l.wqkv = concat(
        {load_rows(f, p + "attn_q.weight", D, c.q_width(), s.q_head_begin * Dh, s.n_q_heads * Dh),
         load_rows(f, p + "attn_k.weight", D, c.kv_width(), s.kv_head_begin * Dh,
                   s.n_kv_heads * Dh),
         load_rows(f, p + "attn_v.weight", D, c.kv_width(), s.kv_head_begin * Dh,
                   s.n_kv_heads * Dh)});
    l.wo = load_cols(f, p + "attn_output.weight", c.q_width(), D, s.q_head_begin * Dh,
                     s.n_q_heads * Dh);
    l.ffn_norm = load_tensor(f, p + "ffn_norm.weight", D, 1);
    l.w_gate_up = concat({load_rows(f, p + "ffn_gate.weight", D, c.ffn_dim, s.ffn_begin, s.ffn_dim),
                          load_rows(f, p + "ffn_up.weight", D, c.ffn_dim, s.ffn_begin, s.ffn_dim)});
    l.w_down = load_cols(f, p + "ffn_down.weight", c.ffn_dim, D, s.ffn_begin, s.ffn_dim);
  }
  return w;
}

}  // namespace adakv::model
