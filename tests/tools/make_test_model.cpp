// adakv_make_test_model: writes a small synthetic llama GGUF with the project's own writer, for
// tensor-parallel tests at sizes the default model cannot take (it has 3 KV heads; TP 2, 4
// and 8 need 8). Random float32 weights from a seed; a byte-level vocabulary (256 byte tokens,
// no merges) plus ChatML specials, so any text tokenizes.
//   adakv_make_test_model OUT.gguf [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
//                                  [--ffn N] [--context N] [--seed N] [--tied]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/writer.h"
#include "model/tokenizer/byte_unicode.h"

namespace {

struct Shape {
  size_t layers = 3, heads = 16, kv_heads = 8, head_dim = 16, ffn = 512, context = 4096;
  unsigned seed = 1;
  bool tied = false;
};

// Gaussian weights with standard deviation gain / sqrt(fan_in).
std::vector<float> random_matrix(std::mt19937& rng, size_t rows, size_t cols, float gain) {
  std::normal_distribution<float> d(0.0f, gain / std::sqrt(float(cols)));
  std::vector<float> w(rows * cols);
  for (auto& x : w) x = d(rng);
  return w;
}

std::vector<float> norm_weights(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d(0.8f, 1.2f);
  std::vector<float> w(n);
  for (auto& x : w) x = d(rng);
  return w;
}

void write_model(const std::string& path, const Shape& s) {
  using adakv::gguf::GgufWriter;
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                             "<pad0>",        "<pad1>",       "<pad2>",
                                             "<pad3>",        "<pad4>"};
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(adakv::tokenizer::byte_to_unicode(uint8_t(b)));
    types.push_back(1);
  }
  for (const auto& t : specials) {
    tokens.push_back(t);
    types.push_back(3);
  }
  const size_t V = tokens.size(), D = s.heads * s.head_dim, KW = s.kv_heads * s.head_dim;

  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "adakv synthetic test model");
  w.add_u32("llama.block_count", uint32_t(s.layers));
  w.add_u32("llama.embedding_length", uint32_t(D));
  w.add_u32("llama.attention.head_count", uint32_t(s.heads));
  w.add_u32("llama.attention.head_count_kv", uint32_t(s.kv_heads));
  w.add_u32("llama.feed_forward_length", uint32_t(s.ffn));
  w.add_u32("llama.context_length", uint32_t(s.context));
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_f32("llama.rope.freq_base", 10000.0f);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", {});
  w.add_u32("tokenizer.ggml.bos_token_id", 256);
  w.add_u32("tokenizer.ggml.eos_token_id", 256);
  w.add_u32("tokenizer.ggml.padding_token_id", 256);

  std::mt19937 rng(s.seed);
  w.add_tensor_f32("token_embd.weight", {D, V}, random_matrix(rng, V, D, 1.0f));
  w.add_tensor_f32("output_norm.weight", {D}, norm_weights(rng, D));
  if (!s.tied) w.add_tensor_f32("output.weight", {D, V}, random_matrix(rng, V, D, 4.0f));
  for (size_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor_f32(p + "attn_norm.weight", {D}, norm_weights(rng, D));
    // Larger q/k gains make attention peaked, as in trained models, so heads differ in need.
    w.add_tensor_f32(p + "attn_q.weight", {D, D}, random_matrix(rng, D, D, 3.0f));
    w.add_tensor_f32(p + "attn_k.weight", {D, KW}, random_matrix(rng, KW, D, 3.0f));
    w.add_tensor_f32(p + "attn_v.weight", {D, KW}, random_matrix(rng, KW, D, 1.0f));
    w.add_tensor_f32(p + "attn_output.weight", {D, D}, random_matrix(rng, D, D, 0.5f));
    w.add_tensor_f32(p + "ffn_norm.weight", {D}, norm_weights(rng, D));
    w.add_tensor_f32(p + "ffn_gate.weight", {D, s.ffn}, random_matrix(rng, s.ffn, D, 1.0f));
    w.add_tensor_f32(p + "ffn_up.weight", {D, s.ffn}, random_matrix(rng, s.ffn, D, 1.0f));
    w.add_tensor_f32(p + "ffn_down.weight", {s.ffn, D}, random_matrix(rng, D, s.ffn, 0.5f));
  }
  w.write(path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s OUT.gguf [--layers N] [--heads N] [--kv-heads N] [--head-dim N] "
                 "[--ffn N] [--context N] [--seed N] [--tied]\n",
                 argv[0]);
    return 2;
  }
  Shape s;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tied") {
      s.tied = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
      return 2;
    }
    const size_t v = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--layers")
      s.layers = v;
    else if (a == "--heads")
      s.heads = v;
    else if (a == "--kv-heads")
      s.kv_heads = v;
    else if (a == "--head-dim")
      s.head_dim = v;
    else if (a == "--ffn")
      s.ffn = v;
    else if (a == "--context")
      s.context = v;
    else if (a == "--seed")
      s.seed = unsigned(v);
    else {
      std::fprintf(stderr, "%s: unknown option %s\n", argv[0], a.c_str());
      return 2;
    }
  }
  try {
    write_model(argv[1], s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  return 0;
}
