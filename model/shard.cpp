#include "model/shard.h"

#include <algorithm>
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

// The rank's ffn columns [begin, begin + count): an even split where its cuts fall on multiples of
// c.ffn_shard_align; else whole blocks of that many columns, the first (blocks % tp) ranks taking
// one block more than the others (Qwen2.5-0.5B: 4864 = 19 blocks of 256 at TP 2 -> 2560 + 2304).
void split_ffn(const ModelConfig& c, size_t tp_rank, size_t tp_size, size_t& begin, size_t& count) {
  const size_t align = std::max<size_t>(c.ffn_shard_align, 1);
  if (c.ffn_dim % tp_size == 0 && (c.ffn_dim / tp_size) % align == 0) {
    count = c.ffn_dim / tp_size;
    begin = tp_rank * count;
    return;
  }
  if (align == 1 || c.ffn_dim % align != 0) {
    require_divides(tp_size, c.ffn_dim, "the model's ffn width");
  }
  const size_t blocks = c.ffn_dim / align;
  if (blocks < tp_size) {
    throw std::invalid_argument("tensor parallel size " + std::to_string(tp_size) +
                                " exceeds the model's ffn width in quantization blocks (" +
                                std::to_string(blocks) + " of " + std::to_string(align) + ")");
  }
  const size_t base = blocks / tp_size, extra = blocks % tp_size;
  begin = (tp_rank * base + std::min(tp_rank, extra)) * align;
  count = (base + (tp_rank < extra ? 1 : 0)) * align;
}

}  // namespace

ShardLayout ShardLayout::make(const ModelConfig& c, size_t tp_rank, size_t tp_size,
                              LmHeadMode lm_head) {
  if (tp_size == 0 || tp_rank >= tp_size) {
    throw std::invalid_argument("bad tensor-parallel rank " + std::to_string(tp_rank) + " of " +
                                std::to_string(tp_size));
  }
  require_divides(tp_size, c.n_heads, "the model's attention heads");
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
  split_ffn(c, tp_rank, tp_size, s.ffn_begin, s.ffn_dim);
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
