// Hugging Face checkpoints: the safetensors reader (headers parsed; hostile headers refused by
// the field), config.json as GGUF metadata (every key, every refusal naming its field and
// value), tensor renaming, and a whole checkpoint directory opened as a GgufFile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf/gguf.h"
#include "model/hf/hf_checkpoint.h"
#include "model/hf/hf_config.h"
#include "model/hf/safetensors.h"
#include "model/hf/tensor_names.h"
#include "model/model_file.h"

namespace adakv::hf {
namespace {

using nlohmann::json;

// A safetensors image: the header as given (padded to 8 bytes), then `data`.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::string h = header;
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8);
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(bytes.data(), bytes.size(), "bad.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

std::string header_error(const std::string& header, size_t data_bytes = 64) {
  return parse_error(image(header, std::vector<uint8_t>(data_bytes)));
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(Safetensors, ParsesTensorsAndMetadata) {
  std::vector<uint8_t> data(4 * 6 + 2 * 3);
  const float f[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(data.data(), f, sizeof f);
  const json h = {
      {"__metadata__", {{"format", "pt"}}},
      {"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
      {"b", {{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {24, 30}}}},
  };
  const auto bytes = image(h.dump(), data);
  const auto file = SafetensorsFile::parse(bytes.data(), bytes.size());
  ASSERT_EQ(file->tensors().size(), 2u);
  const SafetensorsTensor* w = file->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, Dtype::kF32);
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(w->n_elements, 6u);
  EXPECT_EQ(w->n_bytes, 24u);
  float got[6];
  std::memcpy(got, w->data, sizeof got);
  EXPECT_EQ(got[5], 6.0f);
  EXPECT_EQ(file->find("b")->dtype, Dtype::kBF16);
  EXPECT_EQ(file->find("b")->data, w->data + 24);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->find("missing"), nullptr);
  EXPECT_FALSE(file->file_backed());
}

TEST(Safetensors, HostileHeadersAreRefusedByTheField) {
  EXPECT_HAS(parse_error({1, 2, 3}), "header length");
  std::vector<uint8_t> huge(16, 0);
  huge[0] = 0xff;
  huge[5] = 0x7f;
  EXPECT_HAS(parse_error(huge), "header length");
  EXPECT_HAS(parse_error(image("{not json")), "not JSON");
  EXPECT_HAS(parse_error(image("[1, 2]")), "not a JSON object");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})"),
             "tensor 't' dtype 'I64' is not supported");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 8]}})"),
             "'Q4' is not a safetensors dtype");
  EXPECT_HAS(header_error(R"({"t": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})"),
             "tensor 't' dtype");
  EXPECT_HAS(header_error(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})"),
             "tensor 't' has no dtype");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})"),
             "tensor 't' shape[0] is negative");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})"),
             "tensor 't' shape[0]");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296],
                             "data_offsets": [0, 4]}})"),
             "overflows");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]}})"),
             "tensor 't' data_offsets [0, 128] run past the data section (64 bytes)");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]}})"),
             "end before begin");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})"),
             "hold 12 bytes; shape [4] of F32 needs 16");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})"),
             "data_offsets is [0]");
  EXPECT_HAS(header_error(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})"),
             "not a multiple of the 4-byte element");
  EXPECT_HAS(header_error(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                              "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})"),
             "overlap");
  EXPECT_HAS(header_error(R"({"__metadata__": {"k": 1}})"), "__metadata__ 'k' is not a string");
  EXPECT_HAS(header_error(R"({"t": 5})"), "tensor 't' is not an object");
  // Every message names the file.
  EXPECT_HAS(header_error(R"({"t": 5})"), "bad.safetensors");
}

TEST(Safetensors, OpenMapsAFileAndNamesAMissingOne) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("adakv-st-" + std::to_string(::getpid()) + ".safetensors");
  const auto bytes =
      image(R"({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", {0, 0x3c, 0, 0xc0});
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const auto file = SafetensorsFile::open(path.string());
  EXPECT_TRUE(file->file_backed());
  EXPECT_EQ(file->find("t")->data[1], 0x3c);
  std::filesystem::remove(path);
  try {
    SafetensorsFile::open(path.string());
    FAIL() << "opened a missing file";
  } catch (const SafetensorsError& e) {
    EXPECT_HAS(e.what(), path.string());
  }
}

// ---- config.json ----

json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false}};
}

std::map<std::string, gguf::Value> metadata_of(const json& config) {
  std::map<std::string, gguf::Value> m;
  for (auto& [k, v] : parse_config(config.dump(), "config.json", "tiny").metadata) m[k] = v;
  return m;
}

std::string config_error(const json& config) {
  try {
    parse_config(config.dump(), "dir/config.json", "tiny");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

json with(json config, const std::string& key, json value) {
  config[key] = std::move(value);
  return config;
}

TEST(HfConfig, MapsEveryKey) {
  auto m = metadata_of(llama_config());
  EXPECT_EQ(m.at("general.architecture").s, "llama");
  EXPECT_EQ(m.at("general.name").s, "tiny");
  EXPECT_EQ(m.at("llama.block_count").u, 2u);
  EXPECT_EQ(m.at("llama.block_count").type, gguf::ValueType::U32);
  EXPECT_EQ(m.at("llama.embedding_length").u, 64u);
  EXPECT_EQ(m.at("llama.feed_forward_length").u, 128u);
  EXPECT_EQ(m.at("llama.context_length").u, 256u);
  EXPECT_EQ(m.at("llama.attention.head_count").u, 4u);
  EXPECT_EQ(m.at("llama.attention.head_count_kv").u, 2u);
  EXPECT_EQ(m.at("llama.rope.dimension_count").u, 16u);
  EXPECT_FLOAT_EQ(static_cast<float>(m.at("llama.attention.layer_norm_rms_epsilon").f), 1e-5f);
  EXPECT_EQ(m.at("llama.attention.layer_norm_rms_epsilon").type, gguf::ValueType::F32);
  EXPECT_EQ(m.at("llama.rope.freq_base").f, 500000.0);
  EXPECT_EQ(m.at("adakv.rope.pairs").s, "halves");
  EXPECT_EQ(m.count("llama.rope.scaling.type"), 0u);
  EXPECT_EQ(m.count("llama.attention.sliding_window"), 0u);

  const HfConfig c = parse_config(llama_config().dump(), "config.json", "tiny");
  EXPECT_EQ(c.shape.n_layers, 2u);
  EXPECT_EQ(c.shape.n_kv_heads, 2u);
  EXPECT_EQ(c.shape.ffn_dim, 128u);
  EXPECT_FALSE(c.shape.tied_embeddings);
  EXPECT_FALSE(c.shape.qkv_bias);

  // transformers' defaults: KV heads = heads, eps 1e-6, theta 10000.
  json sparse = llama_config();
  for (const char* k : {"num_key_value_heads", "rms_norm_eps", "rope_theta"}) sparse.erase(k);
  m = metadata_of(sparse);
  EXPECT_EQ(m.at("llama.attention.head_count_kv").u, 4u);
  EXPECT_FLOAT_EQ(static_cast<float>(m.at("llama.attention.layer_norm_rms_epsilon").f), 1e-6f);
  EXPECT_EQ(m.at("llama.rope.freq_base").f, 10000.0);

  const HfConfig q = parse_config(
      with(with(llama_config(), "architectures", {"Qwen2ForCausalLM"}), "tie_word_embeddings", true)
          .dump(),
      "config.json", "q");
  EXPECT_EQ(q.architecture, "qwen2");
  EXPECT_TRUE(q.shape.qkv_bias);
  EXPECT_TRUE(q.shape.tied_embeddings);
  EXPECT_EQ(metadata_of(with(llama_config(), "architectures", {"MistralForCausalLM"}))
                .at("general.architecture")
                .s,
            "llama");
}

TEST(HfConfig, RopeScaling) {
  auto m = metadata_of(with(llama_config(), "rope_scaling",
                            {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 32}}));
  EXPECT_EQ(m.at("llama.rope.scaling.type").s, "llama3");
  EXPECT_EQ(m.at("llama.rope.scaling.factor").f, 8.0);
  EXPECT_EQ(m.at("llama.rope.scaling.factor").type, gguf::ValueType::F32);
  EXPECT_EQ(m.at("llama.rope.scaling.original_context_length").u, 32u);
  EXPECT_EQ(m.at("llama.rope.scaling.low_freq_factor").f, 1.0);
  EXPECT_EQ(m.at("llama.rope.scaling.high_freq_factor").f, 4.0);

  // The older "type" field.
  m = metadata_of(with(llama_config(), "rope_scaling", {{"type", "linear"}, {"factor", 4.0}}));
  EXPECT_EQ(m.at("llama.rope.scaling.type").s, "linear");
  EXPECT_EQ(m.at("llama.rope.scaling.factor").f, 4.0);
  EXPECT_EQ(m.count("llama.rope.scaling.original_context_length"), 0u);

  // transformers 5's rope_parameters, theta inside; yarn's original defaults to
  // max_position_embeddings and its factor to max / original.
  json cfg = llama_config();
  cfg.erase("rope_theta");
  cfg["rope_parameters"] = {
      {"rope_type", "yarn"}, {"rope_theta", 1e6}, {"original_max_position_embeddings", 64},
      {"beta_fast", 16.0},   {"beta_slow", 2.0},  {"attention_factor", 1.25}};
  m = metadata_of(cfg);
  EXPECT_EQ(m.at("llama.rope.freq_base").f, 1e6);
  // The section's theta wins over a top-level one, as in transformers.
  EXPECT_EQ(metadata_of(with(cfg, "rope_theta", 5.0)).at("llama.rope.freq_base").f, 1e6);
  EXPECT_EQ(m.at("llama.rope.scaling.type").s, "yarn");
  EXPECT_EQ(m.at("llama.rope.scaling.factor").f, 4.0);
  EXPECT_EQ(m.at("llama.rope.scaling.original_context_length").u, 64u);
  EXPECT_EQ(m.at("llama.rope.scaling.yarn_beta_fast").f, 16.0);
  EXPECT_EQ(m.at("llama.rope.scaling.yarn_beta_slow").f, 2.0);
  EXPECT_EQ(m.at("llama.rope.scaling.attn_factor").f, 1.25);
  cfg["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  cfg["rope_theta"] = 20000.0;
  m = metadata_of(cfg);
  EXPECT_EQ(m.at("llama.rope.freq_base").f, 20000.0);
  EXPECT_EQ(m.at("llama.rope.scaling.original_context_length").u, 256u);
  EXPECT_EQ(m.count("llama.rope.scaling.yarn_beta_fast"), 0u);
  EXPECT_EQ(m.count("llama.rope.scaling.attn_factor"), 0u);

  m = metadata_of(with(llama_config(), "rope_scaling", {{"rope_type", "default"}}));
  EXPECT_EQ(m.count("llama.rope.scaling.type"), 0u);
}

TEST(HfConfig, SlidingWindowOnlyWhereTransformersAppliesIt) {
  const json mistral = with(with(llama_config(), "architectures", {"MistralForCausalLM"}),
                            "max_position_embeddings", 32768);
  // Absent: MistralConfig's default 4096.
  EXPECT_EQ(metadata_of(mistral).at("llama.attention.sliding_window").u, 4096u);
  EXPECT_EQ(
      metadata_of(with(mistral, "sliding_window", nullptr)).count("llama.attention.sliding_window"),
      0u);
  EXPECT_EQ(
      metadata_of(with(mistral, "sliding_window", 1024)).at("llama.attention.sliding_window").u,
      1024u);
  // Not smaller than the context: no window.
  EXPECT_EQ(
      metadata_of(with(mistral, "sliding_window", 32768)).count("llama.attention.sliding_window"),
      0u);
  // Llama has none.
  EXPECT_EQ(metadata_of(with(llama_config(), "sliding_window", 16))
                .count("llama.attention.sliding_window"),
            0u);

  json qwen =
      with(with(llama_config(), "architectures", {"Qwen2ForCausalLM"}), "sliding_window", 64);
  EXPECT_EQ(metadata_of(qwen).count("qwen2.attention.sliding_window"), 0u);
  qwen["use_sliding_window"] = true;
  // The default max_window_layers (28) is past the 2 layers.
  EXPECT_EQ(metadata_of(qwen).count("qwen2.attention.sliding_window"), 0u);
  EXPECT_EQ(metadata_of(with(qwen, "max_window_layers", 1)).at("qwen2.attention.sliding_window").u,
            64u);
  EXPECT_EQ(metadata_of(with(qwen, "layer_types", {"full_attention", "sliding_attention"}))
                .at("qwen2.attention.sliding_window")
                .u,
            64u);
}

TEST(HfConfig, RefusalsNameTheFieldAndValue) {
  const json c = llama_config();
  std::string e = config_error(with(c, "architectures", {"GPT2LMHeadModel"}));
  EXPECT_HAS(e, "architectures is 'GPT2LMHeadModel'");
  EXPECT_HAS(e, "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
  EXPECT_HAS(e, "dir/config.json");
  json no_arch = c;
  no_arch.erase("architectures");
  EXPECT_HAS(config_error(no_arch), "architectures is missing");
  EXPECT_HAS(config_error(with(c, "hidden_act", "gelu")), "hidden_act is 'gelu'");
  EXPECT_HAS(config_error(with(c, "head_dim", 32)),
             "head_dim is 32, not hidden_size / "
             "num_attention_heads = 16");
  EXPECT_EQ(config_error(with(c, "head_dim", 16)), "no error");
  EXPECT_HAS(config_error(with(c, "attention_bias", true)), "attention_bias is true");
  EXPECT_HAS(config_error(with(c, "mlp_bias", true)), "mlp_bias is true");
  EXPECT_HAS(config_error(with(c, "partial_rotary_factor", 0.5)), "partial_rotary_factor is 0.5");
  json missing = c;
  missing.erase("num_hidden_layers");
  EXPECT_HAS(config_error(missing), "num_hidden_layers is missing");
  EXPECT_HAS(config_error(with(c, "hidden_size", "64")), "hidden_size is \"64\", not a positive");
  EXPECT_HAS(config_error(with(c, "num_attention_heads", 5)),
             "hidden_size 64 is not a multiple of num_attention_heads 5");
  for (const char* type : {"dynamic", "longrope"}) {
    EXPECT_HAS(config_error(with(c, "rope_scaling", {{"rope_type", type}, {"factor", 2.0}})),
               std::string("rope_scaling.rope_type is '") + type + "'");
  }
  EXPECT_HAS(config_error(with(c, "rope_scaling", {{"rope_type", "linear"}})),
             "rope_scaling.factor is missing");
  EXPECT_HAS(
      config_error(with(c, "rope_scaling",
                        {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}})),
      "rope_scaling.high_freq_factor is missing");
  EXPECT_HAS(config_error(with(c, "rope_scaling",
                               {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 0.707}})),
             "rope_scaling.mscale is 0.707");
  EXPECT_HAS(config_error(with(c, "rope_scaling",
                               {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale_all_dim", 1.0}})),
             "rope_scaling.mscale_all_dim");
  EXPECT_HAS(config_error(with(c, "rope_scaling",
                               {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", false}})),
             "rope_scaling.truncate is false");
  EXPECT_HAS(
      config_error(with(c, "rope_parameters", {{"full_attention", {{"rope_type", "default"}}}})),
      "rope_parameters gives 'full_attention' its own RoPE");
  EXPECT_HAS(config_error(json::array()), "not a JSON object");
  try {
    parse_config("{oops", "dir/config.json", "x");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(e.what(), "dir/config.json: not JSON");
  }
}

TEST(HfTensorNames, RenamesAsLlamaCppsConverter) {
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.self_attn.q_proj.weight"), "blk.0.attn_q.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.12.self_attn.k_proj.bias"), "blk.12.attn_k.bias");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.o_proj.weight"), "blk.3.attn_output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.input_layernorm.weight"), "blk.1.attn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.post_attention_layernorm.weight"),
            "blk.1.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.mlp.gate_proj.weight"), "blk.1.ffn_gate.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.mlp.up_proj.weight"), "blk.1.ffn_up.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.1.mlp.down_proj.weight"), "blk.1.ffn_down.weight");
  for (const char* unused :
       {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers.x.mlp",
        "model.layers.01.mlp.up_proj.weight", "model.layers..mlp", "lm_head.bias", ""}) {
    EXPECT_EQ(gguf_tensor_name(unused), "") << unused;
  }
  ModelShape s{.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 128};
  EXPECT_EQ(required_tensors(s).size(), 3u + 2 * 9);
  s.qkv_bias = true;
  s.tied_embeddings = true;
  const auto req = required_tensors(s);
  EXPECT_EQ(req.size(), 2u + 2 * 12);
  for (const auto& r : req) {
    EXPECT_EQ(gguf_tensor_name(r.hf_name), r.gguf_name);
    if (r.hf_name == "model.layers.1.self_attn.k_proj.weight") {
      EXPECT_EQ(r.shape, (std::vector<uint64_t>{32, 64}));
    }
  }
}

// ---- a checkpoint directory ----

// Writes a tiny checkpoint (2 layers, hidden 8, 2 heads, 1 KV head, ffn 16, vocab 10) in F32,
// BF16 norms, leaving out the tensors `skip` names and cutting it into `shards` files.
class Checkpoint {
 public:
  Checkpoint()
      : dir_(std::filesystem::temp_directory_path() /
             ("adakv-hf-ckpt-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~Checkpoint() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

  void write(json config, const std::vector<std::string>& skip = {}, int shards = 1) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << config.dump();
    ModelShape s{.n_layers = 2, .d_model = 8, .n_heads = 2, .n_kv_heads = 1, .ffn_dim = 16};
    s.tied_embeddings = config.value("tie_word_embeddings", false);
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
    for (const auto& r : required_tensors(s)) {
      if (std::find(skip.begin(), skip.end(), r.hf_name) != skip.end()) continue;
      auto shape = r.shape;
      for (auto& d : shape) d = d ? d : 10;
      tensors.emplace_back(r.hf_name, shape);
    }
    tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", std::vector<uint64_t>{2});
    json index = {{"weight_map", json::object()}};
    for (int k = 0; k < shards; ++k) {
      const std::string file =
          shards == 1 ? "model.safetensors" : "model-0000" + std::to_string(k + 1) + ".safetensors";
      json header = json::object();
      uint64_t offset = 0;
      for (size_t i = k; i < tensors.size(); i += shards) {
        const auto& [name, shape] = tensors[i];
        uint64_t n = 1;
        for (auto d : shape) n *= d;
        const bool norm = name.find("norm") != std::string::npos;
        const uint64_t bytes = n * (norm ? 2 : 4);
        header[name] = {{"dtype", norm ? "BF16" : "F32"},
                        {"shape", shape},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += (bytes + 7) / 8 * 8;
        index["weight_map"][name] = file;
      }
      const auto bytes = image(header.dump(), std::vector<uint8_t>(offset, 0x3f));
      std::ofstream(dir_ / file, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    if (shards > 1) std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  }

  std::string open_error() const {
    try {
      open_checkpoint(dir(), false);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  }

 private:
  std::filesystem::path dir_;
};

json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 8},
          {"intermediate_size", 16},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"max_position_embeddings", 64}};
}

TEST(HfCheckpoint, OpensAsGgufMetadataAndTensors) {
  for (int shards : {1, 2}) {
    Checkpoint ck;
    ck.write(tiny_config(), {}, shards);
    EXPECT_TRUE(is_checkpoint_dir(ck.dir()));
    const auto f = model::open_model_file(ck.dir(), model::ModelParts::kWeights);
    EXPECT_TRUE(f->assembled());
    const model::ModelConfig c = model::ModelConfig::from_gguf(*f);
    EXPECT_EQ(c.architecture, "llama");
    EXPECT_EQ(c.n_layers, 2u);
    EXPECT_EQ(c.d_model, 8u);
    EXPECT_EQ(c.n_kv_heads, 1u);
    EXPECT_EQ(c.vocab_size, 10u);
    EXPECT_EQ(c.rope_pairs, model::RopePairs::kHalves);
    EXPECT_FALSE(c.tied_embeddings);
    const gguf::TensorInfo& k = f->tensor("blk.1.attn_k.weight");
    EXPECT_EQ(k.type, gguf::GgmlType::F32);
    EXPECT_EQ(k.ne, (std::vector<uint64_t>{8, 4}));  // HF [out, in] = GGUF ne [in, out]
    EXPECT_EQ(f->tensor("blk.0.ffn_norm.weight").type, gguf::GgmlType::BF16);
    EXPECT_EQ(f->tensor_data(k)[0], 0x3f);
    EXPECT_EQ(f->tensors().size(), 3u + 2 * 9);  // inv_freq left out
    f->release_pages(f->tensor_data(k), k.n_bytes);
  }
}

TEST(HfCheckpoint, TiedEmbeddingsLeaveOutTheLmHead) {
  Checkpoint ck;
  ck.write(with(tiny_config(), "tie_word_embeddings", true));
  const auto f = open_checkpoint(ck.dir(), false);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_TRUE(model::ModelConfig::from_gguf(*f).tied_embeddings);
}

TEST(HfCheckpoint, MissingPiecesAreNamed) {
  Checkpoint ck;
  ck.write(tiny_config(), {"model.layers.1.mlp.up_proj.weight"});
  std::string e = ck.open_error();
  EXPECT_HAS(e, "model.layers.1.mlp.up_proj.weight (adakv's blk.1.ffn_up.weight) is missing");
  EXPECT_HAS(e, ck.dir());

  ck.write(tiny_config(), {"model.layers.0.self_attn.q_proj.weight"}, 2);
  EXPECT_HAS(ck.open_error(),
             "model.layers.0.self_attn.q_proj.weight (adakv's "
             "blk.0.attn_q.weight) is missing");

  ck.write(with(tiny_config(), "intermediate_size", 32));
  EXPECT_HAS(ck.open_error(),
             "model.layers.0.mlp.gate_proj.weight (adakv's "
             "blk.0.ffn_gate.weight) has shape [16, 8]; config.json says [32, 8]");

  std::filesystem::remove(std::filesystem::path(ck.dir()) / "model.safetensors");
  EXPECT_HAS(ck.open_error(), "needs model.safetensors or model.safetensors.index.json");

  ck.write(tiny_config(), {}, 2);
  std::filesystem::remove(std::filesystem::path(ck.dir()) / "model-00002.safetensors");
  EXPECT_HAS(ck.open_error(), "names the shard model-00002.safetensors, which is not there");

  std::ofstream(std::filesystem::path(ck.dir()) / "model.safetensors.index.json")
      << R"({"weight_map": {"x": "../elsewhere.safetensors"}})";
  EXPECT_HAS(ck.open_error(), "not a file of the checkpoint's directory");

  std::filesystem::remove(std::filesystem::path(ck.dir()) / "config.json");
  EXPECT_FALSE(is_checkpoint_dir(ck.dir()));
  try {
    model::open_model_file(ck.dir());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(e.what(), "a directory without config.json");
  }
}

TEST(GgufAssemble, TensorsMustLieInTheirRegions) {
  std::vector<uint8_t> bytes(64, 1);
  auto owner = std::make_shared<std::vector<uint8_t>>(bytes);
  gguf::GgufFile::Region r{owner, owner->data(), owner->size(), false};
  gguf::TensorInfo t;
  t.name = "w";
  t.type = gguf::GgmlType::F32;
  t.ne = {4, 4};
  t.data = owner->data();
  const auto f = gguf::GgufFile::assemble("label", {}, {t}, {r});
  EXPECT_EQ(f.tensor("w").n_bytes, 64u);
  EXPECT_EQ(f.tensor_data(f.tensor("w")), owner->data());
  f.release_pages(owner->data(), 64);  // not a file mapping: left alone
  EXPECT_EQ((*owner)[0], 1);
  t.data = owner->data() + 4;
  try {
    gguf::GgufFile::assemble("label", {}, {t}, {r});
    FAIL();
  } catch (const gguf::GgufError& e) {
    EXPECT_HAS(e.what(), "label: tensor 'w' data lies outside");
  }
}

}  // namespace
}  // namespace adakv::hf
