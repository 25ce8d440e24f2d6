// A Hugging Face config.json as the GGUF metadata llama.cpp's converter would write for the
// same model (general.architecture, <arch>.block_count, <arch>.rope.scaling.*, ...), plus
// adakv.rope.pairs = "halves": a checkpoint keeps q and k rows in the order that RoPE on halves
// rotates, whatever the architecture. model/config.cpp then reads both kinds of model alike.
//
// Architectures: LlamaForCausalLM and MistralForCausalLM ("llama"), Qwen2ForCausalLM ("qwen2").
// What adakv does not run is refused by the field that asks for it (another hidden_act, a
// head_dim other than hidden_size / num_attention_heads, llama's attention_bias or mlp_bias, a
// RoPE type other than default, linear, llama3 and yarn, YaRN's mscale), never run differently
// from transformers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/hf/tensor_names.h"

namespace adakv::hf {

using Metadata = std::vector<std::pair<std::string, gguf::Value>>;

struct HfConfig {
  std::string architecture;  // the GGUF architecture: "llama" or "qwen2"
  Metadata metadata;         // general.*, <arch>.*, adakv.rope.pairs
  // Layers, widths, qwen2's q/k/v biases, tie_word_embeddings (the LM head is the embedding).
  ModelShape shape;
};

// `text` is config.json's content, `label` names it in errors (its path), `name` becomes
// general.name. Throws std::runtime_error naming the label and the field or value.
HfConfig parse_config(std::string_view text, const std::string& label, const std::string& name);

// parse_config of the file at `path`.
HfConfig read_config(const std::string& path, const std::string& name);

}  // namespace adakv::hf
