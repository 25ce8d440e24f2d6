// The one way a model is opened: a GGUF file, or a Hugging Face checkpoint directory (a
// directory with config.json, model/hf/hf_checkpoint.h) read as the same GGUF metadata and
// tensors. Everything downstream (config, weights, tokenizer) reads the GgufFile either way.
#pragma once

#include <memory>
#include <string>

#include "model/gguf/gguf.h"

namespace adakv::model {

enum class ModelParts {
  kAll,      // config, weights and tokenizer
  kWeights,  // config and weights: a checkpoint's tokenizer files are not read
};

// Throws naming the path and what is wrong with it.
std::shared_ptr<const gguf::GgufFile> open_model_file(const std::string& path,
                                                      ModelParts parts = ModelParts::kAll);

}  // namespace adakv::model
