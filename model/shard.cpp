#include "model/shard.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace adakv::model {
namespace {

void require_divides(size_t tp, size_t n, const char* what) {
  if (n % tp != 0) {
    throw std::invalid_argument("tensor parallel size " + std::to_string(tp) + " does not divide " +
                                what + " (" + std::to_string(n) + ")");
  }
}

}  // namespace

ShardLayout ShardLayout::make(const ModelConfig& c, size_t tp_rank, size_t tp_size,
                              LmHeadMode lm_head) {
  if (tp_size == 0 || tp_rank >= tp_size) {
    throw std::invalid_argument("bad tensor-parallel rank " + std::to_string(tp_rank) + " of " +
                                std::to_string(tp_size));
  }
  require_divides(tp_size, c.n_heads, "the model's attention heads");
  require_divides(tp_size, c.ffn_dim, "the model's ffn width");
  ShardLayout s;
  s.tp_rank = tp_rank;
  s.tp_size = tp_size;
  s.n_q_heads = c.n_heads / tp_size;
  s.q_head_begin = tp_rank * s.n_q_heads;
  if (tp_size <= c.n_kv_heads) {
    require_divides(tp_size, c.n_kv_heads, "the model's KV heads");
    s.n_kv_heads = c.n_kv_heads / tp_size;
    s.kv_head_begin = tp_rank * s.n_kv_heads;
  } else {
    if (tp_size % c.n_kv_heads != 0) {
      throw std::invalid_argument("tensor parallel size " + std::to_string(tp_size) +
                                  " exceeds the model's " + std::to_string(c.n_kv_heads) +
                                  " KV heads and is not a multiple of them (to replicate)");
    }
    s.kv_replicas = tp_size / c.n_kv_heads;
    s.n_kv_heads = 1;
    s.kv_head_begin = tp_rank / s.kv_replicas;
  }
  s.ffn_dim = c.ffn_dim / tp_size;
  s.ffn_begin = tp_rank * s.ffn_dim;
  s.lm_head = tp_size > 1 && c.vocab_size % tp_size == 0 ? lm_head : LmHeadMode::kReplicated;
  if (s.lm_head == LmHeadMode::kVocabParallel) {
    s.vocab_rows = c.vocab_size / tp_size;
    s.vocab_begin = tp_rank * s.vocab_rows;
  } else {
    s.vocab_rows = c.vocab_size;
  }
  return s;
}

ModelConfig ShardLayout::local(const ModelConfig& c) const {
  ModelConfig l = c;
  l.n_heads = n_q_heads;
  l.n_kv_heads = n_kv_heads;
  l.ffn_dim = ffn_dim;
  return l;
}

LmHeadMode lm_head_mode_from_env() {
  const char* v = std::getenv("ADAKV_LM_HEAD");
  if (!v || !*v || std::string(v) == "vocab-parallel") return LmHeadMode::kVocabParallel;
  if (std::string(v) == "replicated") return LmHeadMode::kReplicated;
  throw std::invalid_argument(std::string("ADAKV_LM_HEAD=") + v +
                              ": expected replicated or vocab-parallel");
}

const char* to_string(LmHeadMode m) {
  return m == LmHeadMode::kReplicated ? "replicated" : "vocab-parallel";
}

}  // namespace adakv::model
