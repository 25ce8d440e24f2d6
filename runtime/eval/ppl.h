// Perplexity under compression (adakv eval ppl): prose contexts of each length, each prefilled
// ONCE; every (policy, budget) compresses a copy of that cache, then the text's next
// `continuation` tokens go through it in one forward (teacher forcing). Per run: perplexity,
// the KL divergence of its next-token distributions from the full cache's, and how often its
// top token is the full cache's. A continuous measure of what compression changes, where the
// retrieval tasks only count right answers.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/eval/eval_runner.h"
#include "runtime/worker.h"

namespace adakv::eval {

struct PplSpec {
  std::vector<size_t> lengths;  // context tokens (raw text, no chat template)
  size_t trials = 2;            // contexts per length, each from its own offset in the text
  // Tokens after each context; all but the first are scored (runtime::ContinuationScore).
  size_t continuation = 128;
  uint64_t seed = 0;
  std::vector<PolicyRun> runs;  // runs[0] is the full-cache reference
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  std::vector<std::string> text_files;  // prose; empty: default_haystack_files()
};

struct PplRecord {
  size_t length_index = 0, trial = 0;
  size_t offset = 0;  // first context token in the tokenized text
  double prefill_s = 0, total_s = 0;
  struct Run {
    double nll_sum = 0;  // natural log, over `tokens`
    double kl_sum = 0;
    size_t agree = 0;  // positions whose top token is the full cache's
    size_t tokens = 0;
    double kv_kept = 1;  // KV held after prefill / uncompressed
  };
  std::vector<Run> runs;  // parallel to PplSpec::runs
};

struct PplResult {
  PplSpec spec;
  std::vector<PplRecord> records;
  size_t text_tokens = 0;
  double total_s = 0;

  // Over every scored token of all contexts, or of one length (length_index); NaN when none.
  double perplexity(size_t run) const;
  double perplexity(size_t run, size_t length_index) const;
  double mean_kl(size_t run) const;
  double agreement(size_t run) const;
  double kv_kept(size_t run) const;  // mean over contexts
};

using PplProgress = std::function<void(const PplRecord&, size_t done, size_t total)>;

// Throws std::invalid_argument on an empty grid, a run list not starting with full, a
// continuation under 2 tokens, a length the context cannot hold with the continuation, or a
// text too short for the longest context plus continuation; std::runtime_error on unreadable
// text files.
PplResult run_ppl(runtime::Worker& engine, const PplSpec& spec, const PplProgress& progress = {});

// One row per run: perplexity over all contexts and per length, its ratio to the full cache's,
// mean KL from the full cache, top-1 agreement and KV kept; then adakv against snapkv.
std::string format_ppl(const PplResult& r);
nlohmann::json to_json(const PplResult& r);

}  // namespace adakv::eval
