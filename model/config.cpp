#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/quant.h"
#include "model/gguf/gguf.h"

namespace adakv::model {

namespace {

// RoPE scaling (llama3's for Llama 3.1, YaRN for Qwen2.5 past 32k, linear) changes the rotation
// of every position; adakv implements none yet, so a file that asks for one is refused by the
// key that asks, never run with plain RoPE.
void refuse_rope_scaling(const gguf::GgufFile& f, const std::string& p) {
  const std::string type_key = p + "rope.scaling.type";
  if (f.find(type_key)) {
    const std::string type = f.get_string(type_key);
    if (type != "none") {
      throw std::runtime_error(fmt::format(
          "{}: {} is '{}', a RoPE scaling adakv does not implement", f.path(), type_key, type));
    }
  }
  const std::string factor_key = p + "rope.scaling.factor";
  if (f.find(factor_key)) {
    const double factor = f.get_float(factor_key);
    if (factor != 0.0 && factor != 1.0) {
      throw std::runtime_error(fmt::format("{}: {} is {}, a RoPE scaling adakv does not implement",
                                           f.path(), factor_key, factor));
    }
  }
  if (f.find_tensor("rope_freqs.weight")) {
    throw std::runtime_error(fmt::format(
        "{}: tensor rope_freqs.weight (llama3-type RoPE scaling) is a RoPE scaling adakv does not "
        "implement",
        f.path()));
  }
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  const Architecture& arch = find_architecture(c.architecture, f.path());
  c.rope_pairs = arch.rope;
  c.qkv_bias = arch.qkv_bias;
  c.name = f.get_string("general.name", "");
  const std::string p = c.architecture + ".";
  auto positive = [&](const std::string& key) -> size_t {
    const int64_t v = f.get_int(p + key);
    if (v <= 0 || v > (int64_t{1} << 31)) {
      throw std::runtime_error(
          fmt::format("{}: {}{} = {} is not a valid size", f.path(), p, key, v));
    }
    return static_cast<size_t>(v);
  };
  c.n_layers = positive("block_count");
  c.d_model = positive("embedding_length");
  c.n_heads = positive("attention.head_count");
  c.n_kv_heads =
      f.find(p + "attention.head_count_kv") ? positive("attention.head_count_kv") : c.n_heads;
  c.ffn_dim = positive("feed_forward_length");
  c.context_length = positive("context_length");
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(f.get_float(p + "rope.freq_base", 10000.0));
  refuse_rope_scaling(f, p);

  if (c.d_model % c.n_heads != 0) {
    throw std::runtime_error(
        fmt::format("{}: embedding_length {} is not a multiple of head_count {}", f.path(),
                    c.d_model, c.n_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    throw std::runtime_error(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}",
                                         f.path(), c.n_heads, c.n_kv_heads));
  }
  c.head_dim = c.d_model / c.n_heads;
  c.rope_dim = f.find(p + "rope.dimension_count") ? positive("rope.dimension_count") : c.head_dim;
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    throw std::runtime_error(fmt::format("{}: rope.dimension_count {} does not fit head size {}",
                                         f.path(), c.rope_dim, c.head_dim));
  }

  const auto& embd = f.tensor("token_embd.weight");
  if (embd.ne.size() != 2 || embd.ne[0] != c.d_model) {
    throw std::runtime_error(
        fmt::format("{}: token_embd.weight must be [{}, vocab]", f.path(), c.d_model));
  }
  c.vocab_size = embd.ne[1];
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  // The largest block among the layers' ffn_down formats (a mixed-quant file varies them); a
  // format the kernels do not handle is left to the weights' loader to name.
  for (size_t l = 0; l < c.n_layers; ++l) {
    const auto* down = f.find_tensor(fmt::format("blk.{}.ffn_down.weight", l));
    if (down && kernels::is_weight_format(static_cast<uint32_t>(down->type))) {
      c.ffn_shard_align =
          std::max(c.ffn_shard_align,
                   kernels::block_elements(static_cast<kernels::WeightFormat>(down->type)));
    }
  }
  return c;
}

}  // namespace adakv::model
