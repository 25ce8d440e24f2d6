#include "model/weights.h"

#include <fmt/format.h>

#include <stdexcept>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"

namespace adakv::model {
namespace {

// Dequantizes tensor `name`, checking it has shape ne = [cols, rows] (rows = 1 for vectors).
std::vector<float> load_tensor(const gguf::GgufFile& f, const std::string& name, size_t cols,
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
  std::vector<float> out(cols * rows);
  gguf::dequantize(t->type, f.tensor_data(*t), out.data(), out.size());
  return out;
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

Weights Weights::load(const gguf::GgufFile& f, const ModelConfig& c) {
  Weights w;
  w.token_embd = load_tensor(f, "token_embd.weight", c.d_model, c.vocab_size);
  w.output_norm = load_tensor(f, "output_norm.weight", c.d_model, 1);
  if (!c.tied_embeddings) w.output = load_tensor(f, "output.weight", c.d_model, c.vocab_size);
  w.layers.resize(c.n_layers);
  for (size_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    auto& l = w.layers[i];
    l.attn_norm = load_tensor(f, p + "attn_norm.weight", c.d_model, 1);
    l.wqkv = concat({load_tensor(f, p + "attn_q.weight", c.d_model, c.q_width()),
                     load_tensor(f, p + "attn_k.weight", c.d_model, c.kv_width()),
                     load_tensor(f, p + "attn_v.weight", c.d_model, c.kv_width())});
    l.wo = load_tensor(f, p + "attn_output.weight", c.q_width(), c.d_model);
    l.ffn_norm = load_tensor(f, p + "ffn_norm.weight", c.d_model, 1);
    l.w_gate_up = concat({load_tensor(f, p + "ffn_gate.weight", c.d_model, c.ffn_dim),
                          load_tensor(f, p + "ffn_up.weight", c.d_model, c.ffn_dim)});
    l.w_down = load_tensor(f, p + "ffn_down.weight", c.ffn_dim, c.d_model);
  }
  return w;
}

}  // namespace adakv::model
