// The retrieval evaluation grid: for every (length, depth, trial) one prompt is built and
// prefilled ONCE; that prefill serves the full cache and every (policy, budget) run
// (runtime::generate_policies), each decoding greedily and scored on the key it wrote.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/config.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/eval/passkey_multi.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"

namespace adakv::eval {

// kPasskeyMulti: query-agnostic, several keys per document (runtime/eval/query_agnostic.h);
// its depths are the needles' depth bands, one key each.
enum class Task { kPasskey, kNiah, kPasskeyMulti };
const char* to_string(Task t);

// One column of the grid: a policy at a budget.
struct PolicyRun {
  compression::CompressionConfig config;
  std::string policy;  // "full", "adakv", ...
  std::string budget;  // "20%", "128 tok"; "100%" for full
  std::string label() const { return policy + " @ " + budget; }
};

// The runs of a grid: full first (the reference), then every policy other than full at every
// budget, all sharing `base`'s window, pooling, GQA aggregation and other knobs. A policy name
// may carry a scope or a scoring after a colon ("adakv:global", "snapkv:output-aware"), which
// that run alone takes. Budgets are
// parsed as parse_budget does ("0.2", "20%", "128"); throws std::invalid_argument on a bad one
// or an empty list.
std::vector<PolicyRun> make_runs(const compression::CompressionConfig& base,
                                 const std::vector<std::string>& policies,
                                 const std::vector<std::string>& budgets);

// The first run with this policy and budget label, or std::string::npos.
size_t find_run(const std::vector<PolicyRun>& runs, const std::string& policy,
                const std::string& budget);

// 64-bit FNV-1a of a budget vector [layer][model kv head] (its shape included), as 16 hex
// digits; "" without budgets.
std::string budgets_fingerprint(const std::vector<std::vector<size_t>>& budgets);

struct EvalSpec {
  Task task = Task::kPasskey;
  std::vector<size_t> lengths;  // prompt tokens, chat template included
  std::vector<double> depths;   // needle depth in percent, 0 (start) .. 100 (end)
  size_t trials = 3;            // prompts per (length, depth) cell
  uint64_t seed = 0;
  size_t max_tokens = 12;       // greedy tokens decoded per run
  std::vector<PolicyRun> runs;  // runs[0] is the full-cache reference
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  std::vector<std::string> haystack_files;  // NIAH prose; empty: default_haystack_files()
  DoorNames doors = DoorNames::kColors;     // passkey-multi's door names
  // passkey-multi's reconstruction: the most document tokens per repeated piece (0: the longest
  // piece that fits after the document in the model's context), as a server's
  // ServingConfig::context_repeat_piece.
  size_t repeat_piece = compression::kDefaultRepeatPiece;
  // passkey-multi: a folder that receives, per document and scoring, the recording's scores
  // and each policy's kept tokens per head (query_agnostic.h); empty: none written.
  std::string scores_dir;
};

// One prompt and what every run made of it.
struct TrialRecord {
  size_t length_index = 0, depth_index = 0, trial = 0;
  size_t prompt_tokens = 0;
  double depth = 0;  // depth actually reached, in [0, 1]
  std::string answer;
  double build_s = 0, prefill_s = 0, total_s = 0;
  struct Run {
    std::string output;
    bool correct = false;
    double kv_kept = 1;  // KV held after prefill / uncompressed
    // The same in bytes, in the pool's dtype with block rounding (0: results written before
    // they were recorded).
    size_t kv_bytes = 0, kv_full_bytes = 0;
    // FNV-1a of the budget vector [layer][model kv head] every rank computed ("" for the full
    // cache): equal fingerprints under TP 1 and TP N mean equal budgets.
    std::string budgets_fingerprint;
    bool budgets_agree_across_ranks = true;
    double decode_s = 0;
    // The recording prefill that served this run (its scoring included); 0 where not recorded.
    double prefill_s = 0;
    // Of prefill_s, the reconstruction's forward and scoring (scoring reconstruct), else 0.
    double reconstruct_s = 0;
    // -log p (nats) of a right answer, teacher-forced: the whole sentence (Sample::reference)
    // after the prompt in this run's cache. A graded measure next to right / wrong. NaN when
    // not measured (results written before it existed).
    double answer_nll = std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<Run> runs;  // parallel to EvalSpec::runs
};

struct EvalResult {
  EvalSpec spec;
  std::vector<TrialRecord> records;
  double total_s = 0;

  // Fraction correct of run `run` over all prompts, one length, or one (length, depth) cell;
  // NaN when there is no prompt there.
  double accuracy(size_t run) const;
  double accuracy(size_t run, size_t length_index) const;
  double accuracy(size_t run, size_t length_index, size_t depth_index) const;
  double kv_kept(size_t run) const;  // mean over prompts
  // Mean answer_nll over the prompts that have one; NaN when none has.
  double answer_nll(size_t run) const;
};

// Called after each prompt with the record and how many prompts are done of how many.
using Progress = std::function<void(const TrialRecord&, size_t done, size_t total)>;

// Throws std::invalid_argument on an empty grid, a run list not starting with full, or a
// length the model's context cannot hold (prompt plus max_tokens).
EvalResult run_eval(runtime::Worker& engine, const EvalSpec& spec, const Progress& progress = {});

// The summary table: one row per run with accuracy over all prompts and per length, accuracy
// relative to full, and KV kept; then adakv against snapkv and full at every budget.
std::string format_summary(const EvalResult& r);
// The accuracy of every run by length x depth, as text.
std::string format_cells(const EvalResult& r);
nlohmann::json to_json(const EvalResult& r);

}  // namespace adakv::eval
