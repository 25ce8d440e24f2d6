// A small synthetic model for the fuzz targets, built in memory with the project's GGUF writer
// (no model file on disk): a byte-level BPE vocabulary with a few merges, or a SentencePiece one
// with byte fallback, plus ChatML and Llama control tokens and a user-defined token, so that
// merges, scores, specials and byte fallback are all reached from short inputs. With weights it
// is a one-layer llama that a Worker can load.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/byte_unicode.h"

namespace adakv::fuzz {

struct TinyModel {
  bool spm = false;             // tokenizer.ggml.model "llama" instead of "gpt2"
  std::string pre = "default";  // gpt2's pre-tokenizer
  std::string chat_template;    // tokenizer.chat_template ("" : none)
  bool weights = false;         // add the tensors of a one-layer llama
};

inline void add_vocab(gguf::GgufWriter& w, const TinyModel& m) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  auto add = [&](const std::string& t, int32_t type, float score = 0) {
    tokens.push_back(t);
    types.push_back(type);
    scores.push_back(score);
  };
  const std::vector<std::string> controls = {"<|endoftext|>",
                                             "<|im_start|>",
                                             "<|im_end|>",
                                             "<s>",
                                             "</s>",
                                             "<|begin_of_text|>",
                                             "<|start_header_id|>",
                                             "<|end_header_id|>",
                                             "<|eot_id|>",
                                             "[INST]",
                                             "[/INST]"};
  if (m.spm) {
    add("<unk>", 2);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, 6);
    }
    // Pieces with descending scores: the higher merges first.
    const std::vector<std::string> pieces = {"\xE2\x96\x81",
                                             "e",
                                             "t",
                                             "h",
                                             "a",
                                             "\xE2\x96\x81"
                                             "t",
                                             "he",
                                             "\xE2\x96\x81the",
                                             "in",
                                             "\xE2\x96\x81"
                                             "a",
                                             "\xC3\xA9",
                                             "\xE4\xBD\xA0"};
    float s = 0;
    for (const auto& p : pieces) add(p, 1, s -= 1);
  } else {
    for (int b = 0; b < 256; ++b) add(std::string(tokenizer::byte_to_unicode(uint8_t(b))), 1);
  }
  std::vector<std::string> merges;
  if (!m.spm) {
    // "A B" makes the token "AB"; both halves are tokens already.
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"\xC4\xA0", "t"}, {"h", "e"},        {"\xC4\xA0t", "he"}, {"i", "n"},      {"in", "g"},
        {"1", "2"},        {"\xC4\xA0", "a"}, {"e", "r"},          {"\xC3", "\xA9"}};
    for (const auto& [a, b] : pairs) {
      merges.push_back(a + " " + b);
      add(a + b, 1);
    }
  }
  for (const auto& c : controls) add(c, 3);
  add("<tool_call>", 4);
  const auto id = [&](const std::string& t) {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return uint32_t(i);
    return uint32_t(0);
  };
  w.add_string("tokenizer.ggml.model", m.spm ? "llama" : "gpt2");
  w.add_string("tokenizer.ggml.pre", m.pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  if (m.spm) {
    w.add_f32_array("tokenizer.ggml.scores", scores);
    w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    w.add_u32("tokenizer.ggml.bos_token_id", id("<s>"));
    w.add_u32("tokenizer.ggml.eos_token_id", id("</s>"));
    w.add_bool("tokenizer.ggml.add_bos_token", false);
  } else {
    w.add_string_array("tokenizer.ggml.merges", merges);
    w.add_u32("tokenizer.ggml.bos_token_id", id("<|endoftext|>"));
    w.add_u32("tokenizer.ggml.eos_token_id", id("<|endoftext|>"));
  }
  if (!m.chat_template.empty()) w.add_string("tokenizer.chat_template", m.chat_template);
  if (m.weights) {
    const uint64_t V = tokens.size(), D = 16, F = 32;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_u32("llama.embedding_length", uint32_t(D));
    w.add_u32("llama.attention.head_count", 2);
    w.add_u32("llama.attention.head_count_kv", 1);
    w.add_u32("llama.feed_forward_length", uint32_t(F));
    w.add_u32("llama.context_length", 256);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_f32("llama.rope.freq_base", 10000.0f);
    const auto t = [&](const std::string& name, std::vector<uint64_t> ne) {
      uint64_t n = 1;
      for (uint64_t x : ne) n *= x;
      w.add_tensor_f32(name, ne, std::vector<float>(n, 0.01f));
    };
    t("token_embd.weight", {D, V});
    t("output_norm.weight", {D});
    t("blk.0.attn_norm.weight", {D});
    t("blk.0.attn_q.weight", {D, D});
    t("blk.0.attn_k.weight", {D, D / 2});
    t("blk.0.attn_v.weight", {D, D / 2});
    t("blk.0.attn_output.weight", {D, D});
    t("blk.0.ffn_norm.weight", {D});
    t("blk.0.ffn_gate.weight", {D, F});
    t("blk.0.ffn_up.weight", {D, F});
    t("blk.0.ffn_down.weight", {F, D});
  }
}

inline std::shared_ptr<const gguf::GgufFile> tiny_model(const TinyModel& m) {
  gguf::GgufWriter w;
  add_vocab(w, m);
  const std::vector<uint8_t> bytes = w.bytes();
  return std::make_shared<const gguf::GgufFile>(
      gguf::GgufFile::parse(bytes.data(), bytes.size(), "tiny-fuzz-model"));
}

// True when s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace adakv::fuzz
