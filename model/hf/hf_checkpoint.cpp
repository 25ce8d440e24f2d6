#include "model/hf/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/hf/hf_config.h"
#include "model/hf/hf_tokenizer.h"
#include "model/hf/safetensors.h"
#include "model/hf/tensor_names.h"

namespace adakv::hf {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";

// The shard files of the checkpoint, and for an index which shard it says holds each tensor.
struct Shards {
  std::vector<std::string> files;  // names inside the directory
  std::map<std::string, std::string> weight_map;
};

Shards find_shards(const fs::path& dir) {
  Shards s;
  const fs::path index = dir / kIndexFile;
  if (!fs::exists(index)) {
    if (!fs::exists(dir / kSingleFile)) {
      throw std::runtime_error(
          fmt::format("{}: a Hugging Face checkpoint needs {} or {}; neither "
                      "is there",
                      dir.string(), kSingleFile, kIndexFile));
    }
    s.files.push_back(kSingleFile);
    return s;
  }
  std::ifstream in(index, std::ios::binary);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", index.string(), e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw std::runtime_error(
        fmt::format("{}: weight_map is missing or not an object", index.string()));
  }
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      throw std::runtime_error(fmt::format("{}: weight_map '{}' is {}, not a file name",
                                           index.string(), tensor, file.dump()));
    }
    const std::string name = file.get<std::string>();
    // Shards are files of the directory itself.
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw std::runtime_error(
          fmt::format("{}: weight_map '{}' names '{}', not a file of the "
                      "checkpoint's directory",
                      index.string(), tensor, name));
    }
    s.weight_map[tensor] = name;
    if (std::find(s.files.begin(), s.files.end(), name) == s.files.end()) s.files.push_back(name);
  }
  std::sort(s.files.begin(), s.files.end());
  return s;
}

gguf::GgmlType ggml_type(Dtype d) {
  switch (d) {
    case Dtype::kF32:
      return gguf::GgmlType::F32;
    case Dtype::kF16:
      return gguf::GgmlType::F16;
    case Dtype::kBF16:
      return gguf::GgmlType::BF16;
  }
  return gguf::GgmlType::F32;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + (shape[i] ? std::to_string(shape[i]) : std::string("vocab"));
  }
  return s + "]";
}

// Every tensor the model needs is there, in the shape the config gives it.
void check_required(const fs::path& dir, const HfConfig& config, const Shards& shards,
                    const std::map<std::string, const SafetensorsTensor*>& found) {
  for (const RequiredTensor& r : required_tensors(config.shape)) {
    const auto it = found.find(r.hf_name);
    if (it == found.end()) {
      const auto mapped = shards.weight_map.find(r.hf_name);
      const std::string where =
          mapped != shards.weight_map.end()
              ? fmt::format("{} names {} for it, which does not hold it", kIndexFile,
                            mapped->second)
              : fmt::format("none of {} holds it", fmt::join(shards.files, ", "));
      throw std::runtime_error(fmt::format("{}: tensor {} (adakv's {}) is missing: {}",
                                           dir.string(), r.hf_name, r.gguf_name, where));
    }
    const auto& shape = it->second->shape;
    bool ok = shape.size() == r.shape.size();
    for (size_t d = 0; ok && d < shape.size(); ++d) ok = r.shape[d] == 0 || r.shape[d] == shape[d];
    if (!ok) {
      throw std::runtime_error(
          fmt::format("{}: tensor {} (adakv's {}) has shape {}; config.json says {}", dir.string(),
                      r.hf_name, r.gguf_name, shape_string(shape), shape_string(r.shape)));
    }
  }
}

}  // namespace

bool is_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

std::shared_ptr<const gguf::GgufFile> open_checkpoint(const std::string& dir_name,
                                                      bool read_tokenizer) {
  const fs::path dir(dir_name);
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  HfConfig config = read_config((dir / "config.json").string(), name);
  const Shards shards = find_shards(dir);

  std::vector<gguf::GgufFile::Region> regions;
  std::vector<gguf::TensorInfo> tensors;
  std::map<std::string, const SafetensorsTensor*> found;  // by checkpoint name
  std::map<std::string, std::string> file_of;             // checkpoint name -> shard
  for (const std::string& file : shards.files) {
    const fs::path path = dir / file;
    if (!fs::exists(path)) {
      throw std::runtime_error(fmt::format("{}: {} names the shard {}, which is not there",
                                           dir.string(), kIndexFile, file));
    }
    auto shard = SafetensorsFile::open(path.string());
    for (const SafetensorsTensor& t : shard->tensors()) {
      if (const auto [it, fresh] = file_of.emplace(t.name, file); !fresh) {
        throw std::runtime_error(fmt::format("{}: tensor {} is in both {} and {}", dir.string(),
                                             t.name, it->second, file));
      }
      found[t.name] = &t;
      const std::string gguf_name = gguf_tensor_name(t.name);
      if (gguf_name.empty()) continue;  // not part of the model adakv runs
      if (config.shape.tied_embeddings && gguf_name == "output.weight") continue;
      gguf::TensorInfo info;
      info.name = gguf_name;
      info.type = ggml_type(t.dtype);
      // [out, in] row-major is GGUF's ne = [in, out]: innermost first.
      info.ne.assign(t.shape.rbegin(), t.shape.rend());
      if (info.ne.empty()) info.ne.push_back(1);
      info.data = t.data;
      tensors.push_back(std::move(info));
    }
    regions.push_back({shard, shard->image(), shard->image_size(), shard->file_backed()});
  }
  check_required(dir, config, shards, found);
  // In the order a GGUF file lists them (embedding, layer by layer, output), for inspect.
  ModelShape all = config.shape;
  all.qkv_bias = true;
  all.tied_embeddings = false;
  std::map<std::string, size_t> rank;
  for (const RequiredTensor& r : required_tensors(all)) rank.emplace(r.gguf_name, rank.size());
  const auto order = [&](const gguf::TensorInfo& t) {
    const auto it = rank.find(t.name);
    return it == rank.end() ? rank.size() : it->second;
  };
  std::stable_sort(tensors.begin(), tensors.end(),
                   [&](const auto& a, const auto& b) { return order(a) < order(b); });

  Metadata metadata = std::move(config.metadata);
  if (read_tokenizer) {
    for (auto& kv : tokenizer_metadata(dir.string())) metadata.push_back(std::move(kv));
  }
  return std::make_shared<const gguf::GgufFile>(gguf::GgufFile::assemble(
      dir.string(), std::move(metadata), std::move(tensors), std::move(regions)));
}

}  // namespace adakv::hf
