#include "model/weights.h"

#include <fmt/format.h>

#include <span>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/rope_order.h"
#include "model/tensor_lookup.h"

namespace adakv::model {
namespace {

std::vector<float> read_vector(const gguf::GgufFile& f, const std::string& name, size_t n) {
  const gguf::TensorInfo& t = find_checked(f, name, n, 1);
  std::vector<float> out(n);
  gguf::dequantize(t.type, f.tensor_data(t), out.data(), n);
  return out;
}

VectorWeight load_vector(const gguf::GgufFile& f, const std::string& name, size_t n) {
  return VectorWeight(read_vector(f, name, n));
}

// Appends entries [begin, begin + count) of the vector `name` of n entries to out, entry j of
// the range taken from order[j] when an order is given.
void append_range(const gguf::GgufFile& f, const std::string& name, size_t n, size_t begin,
                  size_t count, std::span<const size_t> order, std::vector<float>& out) {
  const std::vector<float> all = read_vector(f, name, n);
  for (size_t j = 0; j < count; ++j) out.push_back(all[begin + (order.empty() ? j : order[j])]);
}

}  // namespace

void VectorWeight::upload(kernels::Backend& backend) {
  if (!values_) return;
  buffer_ = std::make_shared<const kernels::Buffer>(
      backend.constant(values_->data(), values_->size() * sizeof(float)));
}

void Weights::upload(kernels::Backend& backend) {
  const auto upload_group = [&](Linear& fused, std::initializer_list<Linear*> parts) {
    if (fused.empty()) {
      for (Linear* p : parts) p->upload(backend);
      return;
    }
    fused.upload(backend);
    for (Linear* p : parts) p->view_uploaded(fused);
  };
  token_embd.upload(backend);
  if (lm_head.data() == token_embd.data()) {
    lm_head.view_uploaded(token_embd);
  } else {
    lm_head.upload(backend);
  }
  output_norm.upload(backend);
  for (auto& l : layers) {
    l.attn_norm.upload(backend);
    l.qkv_bias.upload(backend);
    l.ffn_norm.upload(backend);
    upload_group(l.wqkv, {&l.wq, &l.wk, &l.wv});
    upload_group(l.w_gate_up, {&l.w_gate, &l.w_up});
    l.wo.upload(backend);
    l.w_down.upload(backend);
  }
  const Linear& probe = token_embd.empty() ? lm_head : token_embd;
  if (probe.weights() == probe.data()) return;  // viewed in place
  for (Linear* m : {&token_embd, &lm_head}) m->release_host();
  for (auto& l : layers) {
    for (Linear* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.wqkv, &l.w_gate_up}) {
      m->release_host();
    }
  }
}

size_t Weights::bytes() const {
  size_t n = lm_head.bytes() + output_norm.size() * sizeof(float);
  for (const auto& l : layers) {
    n += (l.attn_norm.size() + l.ffn_norm.size() + l.qkv_bias.size()) * sizeof(float);
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      n += m->bytes();
    }
  }
  return n;
}

Weights Weights::load(std::shared_ptr<const gguf::GgufFile> file, const ModelConfig& c,
                      const ShardLayout& s, const kernels::Backend& backend,
                      const PipelineStage& stage) {
  const gguf::GgufFile& f = *file;
  const size_t Dh = c.head_dim, D = c.d_model;
  Weights w;
  w.file = std::move(file);
  // The last stage of a tied model reads the embedding table as its LM head.
  Linear embedding;
  if (stage.first() || (stage.last() && c.tied_embeddings)) {
    embedding = Linear::column_parallel(f, "token_embd.weight", D, c.vocab_size, s.vocab_begin,
                                        s.vocab_rows, backend);
  }
  if (stage.first()) w.token_embd = embedding;
  if (stage.last()) {
    w.output_norm = load_vector(f, "output_norm.weight", D);
    // Tied: the same rows, and the same memory where the shard was copied.
    w.lm_head = c.tied_embeddings ? embedding
                                  : Linear::column_parallel(f, "output.weight", D, c.vocab_size,
                                                            s.vocab_begin, s.vocab_rows, backend);
  }
  // The rows of the local q and k heads in the order the forward's RoPE wants (none: as stored).
  std::vector<size_t> q_order, k_order;
  if (c.rope_pairs == RopePairs::kHalves) {
    q_order = halves_to_adjacent(s.n_q_heads, Dh, c.rope_dim);
    k_order = halves_to_adjacent(s.n_kv_heads, Dh, c.rope_dim);
  }
  const size_t q_begin = s.q_head_begin * Dh, q_rows = s.n_q_heads * Dh;
  const size_t kv_begin = s.kv_head_begin * Dh, kv_rows = s.n_kv_heads * Dh;
  w.layers.resize(c.n_layers);
  for (size_t i = stage.layer_begin; i < stage.end(c.n_layers); ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    auto& l = w.layers[i];
    l.attn_norm = load_vector(f, p + "attn_norm.weight", D);
    l.wq = Linear::column_parallel(f, p + "attn_q.weight", D, c.q_width(), q_begin, q_rows, backend,
                                   q_order);
    l.wk = Linear::column_parallel(f, p + "attn_k.weight", D, c.kv_width(), kv_begin, kv_rows,
                                   backend, k_order);
    l.wv = Linear::column_parallel(f, p + "attn_v.weight", D, c.kv_width(), kv_begin, kv_rows,
                                   backend);
    if (c.qkv_bias) {
      std::vector<float> bias;
      bias.reserve(q_rows + 2 * kv_rows);
      append_range(f, p + "attn_q.bias", c.q_width(), q_begin, q_rows, q_order, bias);
      append_range(f, p + "attn_k.bias", c.kv_width(), kv_begin, kv_rows, k_order, bias);
      append_range(f, p + "attn_v.bias", c.kv_width(), kv_begin, kv_rows, {}, bias);
      l.qkv_bias = VectorWeight(std::move(bias));
    }
    l.wo = Linear::row_parallel(f, p + "attn_output.weight", c.q_width(), D, s.q_head_begin * Dh,
                                s.n_q_heads * Dh, backend);
    l.ffn_norm = load_vector(f, p + "ffn_norm.weight", D);
    l.w_gate = Linear::column_parallel(f, p + "ffn_gate.weight", D, c.ffn_dim, s.ffn_begin,
                                       s.ffn_dim, backend);
    l.w_up = Linear::column_parallel(f, p + "ffn_up.weight", D, c.ffn_dim, s.ffn_begin, s.ffn_dim,
                                     backend);
    l.w_down = Linear::row_parallel(f, p + "ffn_down.weight", c.ffn_dim, D, s.ffn_begin, s.ffn_dim,
                                    backend);
    l.wqkv = Linear::fuse({&l.wq, &l.wk, &l.wv});
    l.w_gate_up = Linear::fuse({&l.w_gate, &l.w_up});
  }
  return w;
}

}  // namespace adakv::model
