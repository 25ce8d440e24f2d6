#include "model/hf/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace adakv::hf {

namespace {

using nlohmann::json;

struct KnownArchitecture {
  const char* hf;    // config.json's architectures[0]
  const char* gguf;  // general.architecture
  bool qkv_bias;
};

constexpr KnownArchitecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false},
    {"MistralForCausalLM", "llama", false},
    {"Qwen2ForCausalLM", "qwen2", true},
};

// transformers' defaults where config.json leaves a field out (the same for the three).
constexpr double kDefaultRopeTheta = 10000;
constexpr double kDefaultRmsEps = 1e-6;
constexpr uint64_t kDefaultSlidingWindow = 4096;
constexpr uint64_t kDefaultMaxWindowLayers = 28;

gguf::Value string_value(std::string s) {
  gguf::Value v;
  v.type = gguf::ValueType::STRING;
  v.s = std::move(s);
  return v;
}

gguf::Value u32_value(uint64_t n) {
  gguf::Value v;
  v.type = gguf::ValueType::U32;
  v.u = n;
  return v;
}

gguf::Value f32_value(double x) {
  gguf::Value v;
  v.type = gguf::ValueType::F32;
  v.f = static_cast<double>(static_cast<float>(x));
  return v;
}

// Reads the fields of one JSON object, each error naming the file and the field.
class Fields {
 public:
  Fields(const json& obj, std::string label, std::string prefix = "")
      : obj_(obj), label_(std::move(label)), prefix_(std::move(prefix)) {}

  // Present and not null.
  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  bool present(const char* key) const { return obj_.contains(key); }
  const json& at(const char* key) const { return obj_[key]; }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw std::runtime_error(fmt::format("{}: {}{} {}", label_, prefix_, key, what));
  }

  // A positive integer (U32 in GGUF).
  uint64_t size(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    const json& v = obj_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 31)) {
      fail(key, fmt::format("is {}, not a positive integer", v.dump()));
    }
    return v.get<uint64_t>();
  }
  uint64_t size(const char* key, uint64_t fallback) const {
    return has(key) ? size(key) : fallback;
  }
  // A non-negative integer.
  uint64_t count(const char* key, uint64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      fail(key, fmt::format("is {}, not a non-negative integer", v.dump()));
    }
    return v.get<uint64_t>();
  }
  double number(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    const json& v = obj_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      fail(key, fmt::format("is {}, not a number", v.dump()));
    }
    return v.get<double>();
  }
  double number(const char* key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_boolean()) fail(key, fmt::format("is {}, not true or false", at(key).dump()));
    return obj_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_string()) fail(key, fmt::format("is {}, not a string", at(key).dump()));
    return obj_[key].get<std::string>();
  }

 private:
  const json& obj_;
  std::string label_, prefix_;
};

const KnownArchitecture& find_architecture(const Fields& cfg) {
  std::string known;
  for (const auto& a : kArchitectures)
    known += fmt::format("{}{}", known.empty() ? "" : ", ", a.hf);
  if (!cfg.has("architectures") || !cfg.at("architectures").is_array() ||
      cfg.at("architectures").empty() || !cfg.at("architectures")[0].is_string()) {
    cfg.fail("architectures",
             fmt::format("is missing or not a list of names (adakv runs {})", known));
  }
  const std::string name = cfg.at("architectures")[0].get<std::string>();
  for (const auto& a : kArchitectures) {
    if (name == a.hf) return a;
  }
  cfg.fail("architectures",
           fmt::format("is '{}', which adakv does not run (it runs {})", name, known));
}

// <arch>.rope.* from rope_theta and rope_parameters (transformers 5) or rope_scaling (older).
void add_rope(const Fields& cfg, const std::string& label, const std::string& p,
              uint64_t max_positions, Metadata& out) {
  const char* section = cfg.has("rope_parameters") ? "rope_parameters"
                        : cfg.has("rope_scaling")  ? "rope_scaling"
                                                   : nullptr;
  static const json kEmpty = json::object();
  const json& obj = section ? cfg.at(section) : kEmpty;
  if (!obj.is_object()) cfg.fail(section, fmt::format("is {}, not an object", obj.dump()));
  for (const auto& [k, v] : obj.items()) {
    if (v.is_object()) {
      cfg.fail(section, fmt::format("gives '{}' its own RoPE; per-layer RoPE is not supported", k));
    }
  }
  const Fields rope(obj, label, section ? std::string(section) + "." : "");
  // transformers: the section's rope_theta wins over a top-level one.
  const double theta = rope.has("rope_theta") ? rope.number("rope_theta")
                                              : cfg.number("rope_theta", kDefaultRopeTheta);
  out.emplace_back(p + "rope.freq_base", f32_value(theta));
  for (const Fields* f : {&cfg, &rope}) {
    if (f->has("partial_rotary_factor") && f->number("partial_rotary_factor") != 1.0) {
      f->fail("partial_rotary_factor", fmt::format("is {}; adakv rotates whole heads",
                                                   f->at("partial_rotary_factor").dump()));
    }
  }

  const char* type_key = rope.has("rope_type") ? "rope_type" : "type";
  const std::string type = rope.string(type_key, "default");
  if (type == "default") return;
  if (type != "linear" && type != "llama3" && type != "yarn") {
    rope.fail(type_key, fmt::format("is '{}', a RoPE scaling adakv does not run (it runs default, "
                                    "linear, llama3 and yarn)",
                                    type));
  }
  out.emplace_back(p + "rope.scaling.type", string_value(type));
  if (type == "linear") {
    out.emplace_back(p + "rope.scaling.factor", f32_value(rope.number("factor")));
    return;
  }
  // transformers: a top-level original_max_position_embeddings wins, then the section's, then
  // max_position_embeddings.
  const uint64_t original = cfg.has("original_max_position_embeddings")
                                ? cfg.size("original_max_position_embeddings")
                                : rope.size("original_max_position_embeddings", max_positions);
  out.emplace_back(p + "rope.scaling.original_context_length", u32_value(original));
  if (type == "llama3") {
    out.emplace_back(p + "rope.scaling.factor", f32_value(rope.number("factor")));
    out.emplace_back(p + "rope.scaling.low_freq_factor", f32_value(rope.number("low_freq_factor")));
    out.emplace_back(p + "rope.scaling.high_freq_factor",
                     f32_value(rope.number("high_freq_factor")));
    return;
  }
  // yarn
  const double factor =
      rope.has("factor") ? rope.number("factor") : static_cast<double>(max_positions) / original;
  out.emplace_back(p + "rope.scaling.factor", f32_value(factor));
  for (const char* key : {"mscale", "mscale_all_dim"}) {
    if (rope.has(key)) {
      rope.fail(key, fmt::format("is {}; YaRN's mscale is not implemented", rope.at(key).dump()));
    }
  }
  if (!rope.boolean("truncate", true)) {
    rope.fail("truncate",
              "is false; YaRN without truncating the correction range is not "
              "implemented");
  }
  // transformers takes 0 for the default as well.
  if (rope.has("beta_fast") && rope.number("beta_fast") != 0) {
    out.emplace_back(p + "rope.scaling.yarn_beta_fast", f32_value(rope.number("beta_fast")));
  }
  if (rope.has("beta_slow") && rope.number("beta_slow") != 0) {
    out.emplace_back(p + "rope.scaling.yarn_beta_slow", f32_value(rope.number("beta_slow")));
  }
  if (rope.has("attention_factor")) {
    out.emplace_back(p + "rope.scaling.attn_factor", f32_value(rope.number("attention_factor")));
  }
}

// The window of sliding-window attention when transformers applies one: Mistral's
// sliding_window (4096 when absent, none when null); Qwen2's only with use_sliding_window, and
// then only on the layers layer_types (or max_window_layers) says.
uint64_t sliding_window(const Fields& cfg, const KnownArchitecture& arch, uint64_t n_layers) {
  const std::string hf = arch.hf;
  if (hf == "MistralForCausalLM") {
    if (!cfg.present("sliding_window")) return kDefaultSlidingWindow;
    return cfg.has("sliding_window") ? cfg.size("sliding_window") : 0;
  }
  if (hf == "Qwen2ForCausalLM" && cfg.boolean("use_sliding_window", false)) {
    if (!cfg.has("sliding_window")) return 0;
    const uint64_t window = cfg.size("sliding_window");
    if (cfg.has("layer_types")) {
      const json& types = cfg.at("layer_types");
      if (!types.is_array()) cfg.fail("layer_types", "is not a list");
      for (const json& t : types) {
        if (t == "sliding_attention") return window;
      }
      return 0;
    }
    return cfg.count("max_window_layers", kDefaultMaxWindowLayers) < n_layers ? window : 0;
  }
  return 0;
}

}  // namespace

HfConfig parse_config(std::string_view text, const std::string& label, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", label, e.what()));
  }
  if (!j.is_object()) throw std::runtime_error(fmt::format("{}: not a JSON object", label));
  const Fields cfg(j, label);
  const KnownArchitecture& arch = find_architecture(cfg);

  HfConfig c;
  c.architecture = arch.gguf;
  c.shape.qkv_bias = arch.qkv_bias;
  const std::string p = c.architecture + ".";
  Metadata& m = c.metadata;
  m.emplace_back("general.architecture", string_value(c.architecture));
  m.emplace_back("general.name", string_value(name));

  const std::string act = cfg.string("hidden_act", cfg.string("hidden_activation", "silu"));
  if (act != "silu") {
    cfg.fail("hidden_act", fmt::format("is '{}'; adakv's feed-forward is SwiGLU (silu)", act));
  }
  if (std::string(arch.gguf) == "llama" && cfg.boolean("attention_bias", false)) {
    cfg.fail("attention_bias", "is true; llama-architecture attention biases are not supported");
  }
  if (cfg.boolean("mlp_bias", false)) {
    cfg.fail("mlp_bias", "is true; feed-forward biases are not supported");
  }

  const uint64_t n_layers = cfg.size("num_hidden_layers");
  const uint64_t d_model = cfg.size("hidden_size");
  const uint64_t n_heads = cfg.size("num_attention_heads");
  const uint64_t n_kv_heads = cfg.size("num_key_value_heads", n_heads);
  const uint64_t ffn_dim = cfg.size("intermediate_size");
  const uint64_t max_positions = cfg.size("max_position_embeddings");
  if (d_model % n_heads != 0) {
    cfg.fail("hidden_size",
             fmt::format("{} is not a multiple of num_attention_heads {}", d_model, n_heads));
  }
  // adakv's heads are hidden_size / num_attention_heads wide.
  if (cfg.has("head_dim") && cfg.size("head_dim") != d_model / n_heads) {
    cfg.fail("head_dim", fmt::format("is {}, not hidden_size / num_attention_heads = {}; adakv "
                                     "runs heads of that width only",
                                     cfg.size("head_dim"), d_model / n_heads));
  }
  m.emplace_back(p + "block_count", u32_value(n_layers));
  m.emplace_back(p + "context_length", u32_value(max_positions));
  m.emplace_back(p + "embedding_length", u32_value(d_model));
  m.emplace_back(p + "feed_forward_length", u32_value(ffn_dim));
  m.emplace_back(p + "attention.head_count", u32_value(n_heads));
  m.emplace_back(p + "attention.head_count_kv", u32_value(n_kv_heads));
  m.emplace_back(p + "attention.layer_norm_rms_epsilon",
                 f32_value(cfg.number("rms_norm_eps", kDefaultRmsEps)));
  m.emplace_back(p + "rope.dimension_count", u32_value(d_model / n_heads));
  add_rope(cfg, label, p, max_positions, m);
  const uint64_t window = sliding_window(cfg, arch, n_layers);
  if (window > 0 && window < max_positions) {
    m.emplace_back(p + "attention.sliding_window", u32_value(window));
  }
  m.emplace_back("adakv.rope.pairs", string_value("halves"));
  c.shape.n_layers = n_layers;
  c.shape.d_model = d_model;
  c.shape.n_heads = n_heads;
  c.shape.n_kv_heads = n_kv_heads;
  c.shape.ffn_dim = ffn_dim;
  c.shape.tied_embeddings = cfg.boolean("tie_word_embeddings", false);
  return c;
}

HfConfig read_config(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read the file", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_config(text, path, name);
}

}  // namespace adakv::hf
