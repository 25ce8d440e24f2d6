#include "model/model_file.h"

#include <filesystem>
#include <stdexcept>

#include "model/hf/hf_checkpoint.h"

namespace adakv::model {

std::shared_ptr<const gguf::GgufFile> open_model_file(const std::string& path, ModelParts parts) {
  if (hf::is_checkpoint_dir(path)) return hf::open_checkpoint(path, parts == ModelParts::kAll);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error(path +
                             ": a directory without config.json, so neither a GGUF file nor a "
                             "Hugging Face checkpoint");
  }
  return std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
}

}  // namespace adakv::model
