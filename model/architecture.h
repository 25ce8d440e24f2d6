// The GGUF architectures adakv runs (general.architecture) and how each departs from the llama
// layout the forward pass is written for. Every one reads its hyper-parameters under its own
// key prefix ("<name>.block_count", ...).
#pragma once

#include <string>
#include <vector>

namespace adakv::model {

// Which dimensions of a head RoPE rotates together, as the file's q and k rows are ordered.
enum class RopePairs {
  kAdjacent,  // (x[2i], x[2i+1]): llama GGUFs, whose converter permuted q and k
  kHalves,    // (x[i], x[i + rot_dim/2]): GPT-NeoX / Hugging Face order, kept by qwen2 GGUFs
};

struct Architecture {
  const char* name;  // general.architecture
  RopePairs rope;    // the order of the file's q and k rows
  bool qkv_bias;     // blk.N.attn_{q,k,v}.bias are present (F32 [rows])
};

// Every architecture adakv runs.
const std::vector<Architecture>& architectures();

// The architecture `name`. Throws std::runtime_error naming `name` (and `file`, where it was
// read) and listing the known ones when adakv does not run it.
const Architecture& find_architecture(const std::string& name, const std::string& file);

const char* to_string(RopePairs pairs);

}  // namespace adakv::model
