#include "runtime/step_plan.h"

#include <stdexcept>
#include <string>

#include "runtime/wire.h"

namespace adakv::runtime {

void ServingConfig::validate() const {
  auto positive = [](size_t v, const char* name) {
    if (v == 0) throw std::invalid_argument(std::string(name) + " must be >= 1");
  };
  positive(kv_pool_blocks, "the KV pool (blocks)");
  positive(block_tokens, "block_tokens");
  positive(max_num_seqs, "max_num_seqs");
  positive(max_num_batched_tokens, "max_num_batched_tokens");
  positive(prefill_chunk, "prefill_chunk");
  if (context_repeat_piece != 0 && context_repeat_piece < compression::kMinRepeatPiece) {
    throw std::invalid_argument("the repeat piece must be 0 (as many tokens as fit) or at least " +
                                std::to_string(compression::kMinRepeatPiece) + " tokens (got " +
                                std::to_string(context_repeat_piece) + ")");
  }
}

size_t StepPlan::tokens() const {
  size_t n = 0;
  for (const auto& e : entries) n += e.tokens.size();
  return n;
}

std::string encode_plan(const StepPlan& p) {
  wire::Writer w;
  w.put_vector(p.report);
  w.put_vector(p.release);
  w.put_vector(p.prefix_evict);
  w.put_vector(p.start);
  w.put_vector(p.prefix_attach);
  w.put_vector(p.rewind_lookahead);
  w.put_vector(p.end_lookahead);
  w.put_vector(p.fork);
  w.put_vector(p.gather_scores);
  w.put<uint64_t>(p.entries.size());
  for (const auto& e : p.entries) {
    w.put(e.id);
    w.put_vector(e.tokens);
    w.put(e.logits);
    w.put(e.scored_text);
    w.put(e.layer_begin);
    w.put(e.layer_end);
  }
  w.put_vector(p.prefix_insert);
  return w.take();
}

StepPlan decode_plan(const std::string& bytes) {
  wire::Reader in(bytes, "step plan");
  StepPlan p;
  p.report = in.get_vector<uint64_t>();
  p.release = in.get_vector<uint64_t>();
  p.prefix_evict = in.get_vector<uint64_t>();
  p.start = in.get_vector<SequenceStart>();
  for (const auto& s : p.start) in.check_bool(s.record_scores);
  p.prefix_attach = in.get_vector<PrefixLink>();
  p.rewind_lookahead = in.get_vector<uint64_t>();
  p.end_lookahead = in.get_vector<uint64_t>();
  p.fork = in.get_vector<SequenceFork>();
  for (const auto& f : p.fork) in.check_bool(f.share);
  p.gather_scores = in.get_vector<uint64_t>();
  const auto n = in.get<uint64_t>();
  if (n > bytes.size()) in.fail("truncated");
  p.entries.resize(n);
  for (auto& e : p.entries) {
    e.id = in.get<uint64_t>();
    e.tokens = in.get_vector<int32_t>();
    e.logits = in.get<bool>();
    e.scored_text = in.get<bool>();
    e.layer_begin = in.get<uint32_t>();
    e.layer_end = in.get<uint32_t>();
  }
  p.prefix_insert = in.get_vector<PrefixLink>();
  if (!in.done()) in.fail("trailing bytes");
  return p;
}

}  // namespace adakv::runtime
