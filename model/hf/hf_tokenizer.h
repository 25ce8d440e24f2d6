// The tokenizer of a Hugging Face checkpoint directory (tokenizer.json, tokenizer_config.json)
// as the GGUF metadata llama.cpp's converter would write for it (tokenizer.ggml.*,
// tokenizer.chat_template), so that the GGUF vocabulary loader serves both kinds of model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/gguf/gguf.h"

namespace adakv::hf {

// Byte-level BPE becomes tokenizer.ggml.model "gpt2", BPE with byte_fallback "llama"; other
// model types are refused. Where llama.cpp's converter cannot be followed or would lose
// information, this reader differs from it:
//   - tokenizer.ggml.pre is read from the pre_tokenizer section's structure (llama.cpp hashes the
//     ids of a test text), so an unknown pre-tokenizer is an error, not a guess;
//   - "llama" scores are synthesized from the merge ranks (model/hf/hf_tokenizer_spm.h says why
//     that tokenizes as HF does; llama.cpp's tokenizer.json-only path writes -1000 for all), and
//     add_space_prefix is written from the normalizer / Metaspace;
//   - a bos/eos/unk/pad token named in tokenizer_config.json is looked up among the added tokens
//     and then the vocabulary, and is an error when neither has it (llama.cpp drops it);
//   - add_bos_token is false when the post_processor's template starts with no special token;
//   - of a list of chat templates, "default" becomes tokenizer.chat_template and the others
//     tokenizer.chat_template.<name>, without the tokenizer.chat_templates list of names.
// Throws std::runtime_error naming the file and the field it cannot read or does not support.
std::vector<std::pair<std::string, gguf::Value>> tokenizer_metadata(const std::string& dir);

}  // namespace adakv::hf
