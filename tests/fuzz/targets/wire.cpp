// The control plane's messages (runtime/wire.h): a step plan or an engine command decodes or
// throws std::runtime_error (never reads outside the message or loads a byte that is no bool),
// and what decodes encodes to a message that decodes again to the same plan. Structs that travel
// whole (SequenceStart, SequenceFork, ServingConfig) have padding, which a copy need not keep:
// only plans without them must give back the very same bytes.
//
// Input: byte 0 bit 0 picks the decoder (step plan, engine command), the rest is the message.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/engine_command.h"
#include "runtime/step_plan.h"

namespace {

using namespace adakv::runtime;

bool same_entries(const StepPlan& a, const StepPlan& b) {
  if (a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const StepEntry &x = a.entries[i], &y = b.entries[i];
    if (x.id != y.id || x.tokens != y.tokens || x.logits != y.logits ||
        x.scored_text != y.scored_text || x.layer_begin != y.layer_begin ||
        x.layer_end != y.layer_end)
      return false;
  }
  return a.report == b.report && a.release == b.release && a.end_lookahead == b.end_lookahead &&
         a.rewind_lookahead == b.rewind_lookahead && a.gather_scores == b.gather_scores &&
         a.start.size() == b.start.size() && a.fork.size() == b.fork.size();
}

void check_plan(const StepPlan& p, const std::string& bytes) {
  // Read every bool, so that UBSan sees a byte that is no bool.
  size_t flags = p.tokens();
  for (const SequenceStart& s : p.start) flags += s.record_scores;
  for (const SequenceFork& f : p.fork) flags += f.share;
  volatile size_t sink = flags;
  (void)sink;
  const std::string again = encode_plan(p);
  if (!same_entries(decode_plan(again), p)) __builtin_trap();
  if (p.start.empty() && p.fork.empty() && again != bytes) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] & 1) {
      const EngineCommand c = decode_command(bytes);
      if (c.op == EngineOp::kStep) check_plan(c.plan, bytes.substr(5));
      const EngineCommand again = decode_command(encode_command(c));
      if (again.op != c.op) __builtin_trap();
    } else {
      check_plan(decode_plan(bytes), bytes);
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
