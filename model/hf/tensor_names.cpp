#include "model/hf/tensor_names.h"

#include <fmt/format.h>

#include <cctype>

namespace adakv::hf {

namespace {

struct Rename {
  const char* hf;
  const char* gguf;
};

constexpr Rename kGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Under model.layers.N. and blk.N.
constexpr Rename kLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

constexpr std::string_view kLayerPrefix = "model.layers.";

}  // namespace

std::string gguf_tensor_name(std::string_view hf_name) {
  for (const Rename& r : kGlobal) {
    if (hf_name == r.hf) return r.gguf;
  }
  if (!hf_name.starts_with(kLayerPrefix)) return "";
  std::string_view rest = hf_name.substr(kLayerPrefix.size());
  size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits == 0 || digits > 9 || digits >= rest.size() || rest[digits] != '.') return "";
  const std::string_view layer = rest.substr(0, digits), suffix = rest.substr(digits + 1);
  if (layer.size() > 1 && layer[0] == '0') return "";
  for (const Rename& r : kLayer) {
    if (suffix == r.hf) return fmt::format("blk.{}.{}", layer, r.gguf);
  }
  return "";
}

std::vector<RequiredTensor> required_tensors(const ModelShape& m) {
  const uint64_t D = m.d_model, q = m.d_model, kv = m.d_model / m.n_heads * m.n_kv_heads,
                 F = m.ffn_dim;
  std::vector<RequiredTensor> out;
  out.push_back({"model.embed_tokens.weight", "token_embd.weight", {0, D}});
  for (size_t l = 0; l < m.n_layers; ++l) {
    const auto add = [&](const char* hf, const char* gguf, std::vector<uint64_t> shape) {
      out.push_back({fmt::format("model.layers.{}.{}", l, hf), fmt::format("blk.{}.{}", l, gguf),
                     std::move(shape)});
    };
    add("input_layernorm.weight", "attn_norm.weight", {D});
    add("self_attn.q_proj.weight", "attn_q.weight", {q, D});
    add("self_attn.k_proj.weight", "attn_k.weight", {kv, D});
    add("self_attn.v_proj.weight", "attn_v.weight", {kv, D});
    if (m.qkv_bias) {
      add("self_attn.q_proj.bias", "attn_q.bias", {q});
      add("self_attn.k_proj.bias", "attn_k.bias", {kv});
      add("self_attn.v_proj.bias", "attn_v.bias", {kv});
    }
    add("self_attn.o_proj.weight", "attn_output.weight", {D, q});
    add("post_attention_layernorm.weight", "ffn_norm.weight", {D});
    add("mlp.gate_proj.weight", "ffn_gate.weight", {F, D});
    add("mlp.up_proj.weight", "ffn_up.weight", {F, D});
    add("mlp.down_proj.weight", "ffn_down.weight", {D, F});
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {D}});
  if (!m.tied_embeddings) out.push_back({"lm_head.weight", "output.weight", {0, D}});
  return out;
}

}  // namespace adakv::hf
