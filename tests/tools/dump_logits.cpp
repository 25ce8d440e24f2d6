// adakv_dump_logits MODEL IDS OUT: runs adakv's forward on the int32 token ids in file IDS and
// writes every position's float32 logits [n][vocab] to OUT. Used by gen_logits_goldens.py
// --compare for the full-vocabulary comparison with HF transformers.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include "model/llama.h"
#include "runtime/contiguous_kv_cache.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: adakv_dump_logits MODEL IDS OUT\n";
    return 2;
  }
  try {
    std::ifstream in(argv[2], std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error(std::string("cannot read ") + argv[2]);
    std::vector<int32_t> ids(static_cast<size_t>(in.tellg()) / sizeof(int32_t));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(ids.data()), ids.size() * sizeof(int32_t));

    const auto model = adakv::model::LlamaModel::load(argv[1], adakv::kernels::cpu_backend());
    adakv::runtime::ContiguousKvCache cache(model.config(), ids.size(), model.backend());
    const std::vector<float> logits =
        model.logits_to_host(model.forward(ids.data(), ids.size(), cache, ids.size()));

    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
    if (!out) throw std::runtime_error(std::string("cannot write ") + argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "adakv_dump_logits: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
