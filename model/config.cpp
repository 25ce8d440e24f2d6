#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/quant.h"
#include "model/gguf/gguf.h"

namespace adakv::model {

namespace {

using kernels::RopeScaling;

// <arch>.rope.scaling.* (llama.cpp's keys; "llama3" with low/high_freq_factor is how a Hugging
// Face checkpoint's rope_scaling is read, model/hf/hf_config.h) and a rope_freqs.weight tensor.
// A type or key adakv does not implement is refused by name, never run as plain RoPE.
RopeScaling read_rope_scaling(const gguf::GgufFile& f, const std::string& p, size_t rope_dim) {
  RopeScaling s;
  const std::string type = f.get_string(p + "rope.scaling.type", "none");
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::kYarn;
  } else if (type != "none") {
    throw std::runtime_error(fmt::format(
        "{}: {}rope.scaling.type is '{}', a RoPE scaling adakv does not implement (it runs "
        "none, linear, llama3 and yarn)",
        f.path(), p, type));
  }
  const std::string factor_key = p + "rope.scaling.factor";
  // Older files say linear scaling with rope.scale_linear alone.
  const std::string legacy_key = p + "rope.scale_linear";
  if (s.type == RopeScaling::Type::kNone && f.find(legacy_key) && f.get_float(legacy_key) != 1.0) {
    s.type = RopeScaling::Type::kLinear;
    s.factor = f.get_float(legacy_key);
  } else if (s.type != RopeScaling::Type::kNone) {
    s.factor = f.get_float(factor_key);
  } else if (f.find(factor_key) && f.get_float(factor_key) != 0.0 &&
             f.get_float(factor_key) != 1.0) {
    throw std::runtime_error(fmt::format("{}: {} is {} without a rope.scaling.type", f.path(),
                                         factor_key, f.get_float(factor_key)));
  }
  if (s.type != RopeScaling::Type::kNone && !(s.factor >= 1.0)) {
    throw std::runtime_error(fmt::format("{}: {} is {}; a RoPE scaling factor must be at least 1",
                                         f.path(), factor_key, s.factor));
  }
  if (s.type == RopeScaling::Type::kLlama3 || s.type == RopeScaling::Type::kYarn) {
    const std::string key = p + "rope.scaling.original_context_length";
    const int64_t original = f.get_int(key);
    if (original <= 0) {
      throw std::runtime_error(fmt::format("{}: {} = {} is not a length", f.path(), key, original));
    }
    s.original_context = static_cast<size_t>(original);
  }
  if (s.type == RopeScaling::Type::kLlama3) {
    s.low_freq_factor = f.get_float(p + "rope.scaling.low_freq_factor");
    s.high_freq_factor = f.get_float(p + "rope.scaling.high_freq_factor");
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) {
      throw std::runtime_error(fmt::format(
          "{}: {}rope.scaling.low_freq_factor {} and high_freq_factor {} must be 0 < low < high",
          f.path(), p, s.low_freq_factor, s.high_freq_factor));
    }
  }
  if (s.type == RopeScaling::Type::kYarn) {
    s.beta_fast = f.get_float(p + "rope.scaling.yarn_beta_fast", s.beta_fast);
    s.beta_slow = f.get_float(p + "rope.scaling.yarn_beta_slow", s.beta_slow);
    s.attention_factor = f.get_float(p + "rope.scaling.attn_factor", 0.0);
    if (f.find(p + "rope.scaling.yarn_log_multiplier")) {
      throw std::runtime_error(
          fmt::format("{}: {}rope.scaling.yarn_log_multiplier (YaRN's mscale) is not implemented",
                      f.path(), p));
    }
    if (!(s.beta_fast > 0) || !(s.beta_slow > 0) || s.attention_factor < 0) {
      throw std::runtime_error(fmt::format(
          "{}: {}rope.scaling.yarn_beta_fast {}, yarn_beta_slow {} and attn_factor {} must be "
          "positive",
          f.path(), p, s.beta_fast, s.beta_slow, s.attention_factor));
    }
  }
  if (const auto* freqs = f.find_tensor("rope_freqs.weight")) {
    if (freqs->type != gguf::GgmlType::F32 || freqs->ne.size() != 1 ||
        freqs->ne[0] != rope_dim / 2) {
      throw std::runtime_error(
          fmt::format("{}: rope_freqs.weight must be F32 [{}] (one divisor per rotated pair)",
                      f.path(), rope_dim / 2));
    }
    const auto* data = reinterpret_cast<const float*>(f.tensor_data(*freqs));
    s.freq_divisors.assign(data, data + rope_dim / 2);
    for (float d : s.freq_divisors) {
      if (!(d > 0) || !std::isfinite(d)) {
        throw std::runtime_error(
            fmt::format("{}: rope_freqs.weight holds {}, not a positive divisor", f.path(), d));
      }
    }
  }
  return s;
}

// adakv.rope.pairs overrides the architecture's pair order: a Hugging Face checkpoint keeps its
// q and k rows in halves order whatever the architecture.
RopePairs read_rope_pairs(const gguf::GgufFile& f, RopePairs fallback) {
  const std::string pairs = f.get_string("adakv.rope.pairs", "");
  if (pairs.empty()) return fallback;
  if (pairs == "adjacent") return RopePairs::kAdjacent;
  if (pairs == "halves") return RopePairs::kHalves;
  throw std::runtime_error(fmt::format(
      "{}: adakv.rope.pairs is '{}', neither 'adjacent' nor 'halves'", f.path(), pairs));
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  const Architecture& arch = find_architecture(c.architecture, f.path());
  c.rope_pairs = read_rope_pairs(f, arch.rope);
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

  c.rope_scaling = read_rope_scaling(f, p, c.rope_dim);
  if (const auto* window = f.find(p + "attention.sliding_window")) {
    const int64_t w = window->as_int();
    if (w < 0) {
      throw std::runtime_error(
          fmt::format("{}: {}attention.sliding_window = {} is not a length", f.path(), p, w));
    }
    if (w > 0 && static_cast<size_t>(w) < c.context_length) {
      c.sliding_window = static_cast<size_t>(w);
      c.context_length = c.sliding_window;
    }
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
