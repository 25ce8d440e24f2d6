// A Hugging Face checkpoint directory (config.json, tokenizer.json, tokenizer_config.json, and
// model.safetensors or the shards model.safetensors.index.json names) read as the GGUF file
// llama.cpp's converter would make of it, without converting anything: metadata from
// config.json (hf_config.h) and the tokenizer files (hf_tokenizer.h), tensors renamed
// (tensor_names.h) and left in place in their memory-mapped safetensors files, in their own
// dtype (BF16, F16 or F32). Loading, tensor-parallel sharding included, then works as for a
// GGUF file.
#pragma once

#include <memory>
#include <string>

#include "model/gguf/gguf.h"

namespace adakv::hf {

// True when `path` is a directory holding a config.json.
bool is_checkpoint_dir(const std::string& path);

// Throws std::runtime_error naming the directory and the file, field or tensor that is missing
// or wrong: a tensor the model needs is named by its checkpoint name and adakv's. With
// read_tokenizer false the tokenizer files are not read (the forward does not need them).
std::shared_ptr<const gguf::GgufFile> open_checkpoint(const std::string& dir,
                                                      bool read_tokenizer = true);

}  // namespace adakv::hf
