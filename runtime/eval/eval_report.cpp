#include "runtime/eval/eval_report.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace adakv::eval {
namespace {

using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) {
    throw std::invalid_argument("eval results: " + where + " has no \"" + key + "\"");
  }
  return j.at(key);
}

template <class T>
T get(const json& j, const char* key, const std::string& where) {
  try {
    return field(j, key, where).get<T>();
  } catch (const json::exception& e) {
    throw std::invalid_argument("eval results: " + where + " \"" + key + "\" is malformed (" +
                                e.what() + ")");
  }
}

template <class T>
size_t index_in(const std::vector<T>& v, T x, const std::string& what) {
  const auto it = std::find(v.begin(), v.end(), x);
  if (it == v.end()) throw std::invalid_argument("eval results: " + what + " is not in the grid");
  return static_cast<size_t>(it - v.begin());
}

PolicyRun run_from_json(const json& j, const std::string& where) {
  PolicyRun run;
  run.policy = get<std::string>(j, "policy", where);
  run.budget = get<std::string>(j, "budget", where);
  auto& c = run.config;
  c.policy = compression::parse_policy(run.policy.substr(0, run.policy.find(':')));
  const json& ratio = field(j, "budget_ratio", where);
  const json& tokens = field(j, "budget_tokens", where);
  c.budget_ratio = ratio.is_number() ? ratio.get<double>() : 0.0;
  c.budget_tokens = tokens.is_number() ? tokens.get<size_t>() : 0;
  c.window = get<size_t>(j, "window", where);
  c.alpha = get<double>(j, "alpha", where);
  c.scope = compression::parse_scope(get<std::string>(j, "scope", where));
  c.rule = compression::parse_rule(get<std::string>(j, "rule", where));
  // Written since the scorer knobs became part of the results; older files keep the defaults.
  if (j.contains("pooling"))
    c.pooling = compression::parse_pooling(get<std::string>(j, "pooling", where));
  if (j.contains("pool_kernel")) c.pool_kernel = get<size_t>(j, "pool_kernel", where);
  if (j.contains("pool_sink")) c.pool_sink = get<size_t>(j, "pool_sink", where);
  if (j.contains("pool_shift")) c.pool_shift = get<size_t>(j, "pool_shift", where);
  if (j.contains("lookahead")) c.lookahead = get<size_t>(j, "lookahead", where);
  if (j.contains("min_keep")) c.min_keep = get<size_t>(j, "min_keep", where);
  if (j.contains("lookahead_weight")) {
    c.lookahead_weight = get<double>(j, "lookahead_weight", where);
  }
  if (j.contains("gqa")) c.gqa = compression::parse_gqa(get<std::string>(j, "gqa", where));
  if (j.contains("budget_scores")) {
    c.budget_scores = compression::parse_budget_scores(get<std::string>(j, "budget_scores", where));
  }
  if (j.contains("scoring")) {
    c.scoring = compression::parse_scoring(get<std::string>(j, "scoring", where));
  }
  return run;
}

// The knobs two parts must share for their runs to be the same experiment.
std::string run_signature(const PolicyRun& r) {
  const auto& c = r.config;
  return r.label() + " (window " + std::to_string(c.window) + ", " +
         compression::to_string(c.pooling) + " " + std::to_string(c.pool_kernel) + " sink " +
         std::to_string(c.pool_sink) + " shift " + std::to_string(c.pool_shift) + ", lookahead " +
         std::to_string(c.lookahead) + " x " + std::to_string(c.lookahead_weight) + ", gqa " +
         compression::to_string(c.gqa) + ", budget scores " +
         compression::to_string(c.budget_scores) + ", scoring " +
         compression::to_string(c.scoring) + ", alpha " + std::to_string(c.alpha) + ", scope " +
         compression::to_string(c.scope) + ", rule " + compression::to_string(c.rule) + ")";
}

}  // namespace

EvalResult from_json(const json& j) {
  EvalResult r;
  auto& spec = r.spec;
  const std::string task = get<std::string>(j, "task", "the file");
  if (task == "passkey") {
    spec.task = Task::kPasskey;
  } else if (task == "niah") {
    spec.task = Task::kNiah;
  } else if (task == "passkey-multi") {
    spec.task = Task::kPasskeyMulti;
  } else {
    throw std::invalid_argument("eval results: unknown task \"" + task + "\"");
  }
  spec.lengths = get<std::vector<size_t>>(j, "lengths", "the file");
  spec.depths = get<std::vector<double>>(j, "depths", "the file");
  spec.trials = get<size_t>(j, "trials", "the file");
  spec.seed = get<uint64_t>(j, "seed", "the file");
  spec.max_tokens = get<size_t>(j, "max_tokens", "the file");
  if (j.contains("haystack_files")) {
    spec.haystack_files = get<std::vector<std::string>>(j, "haystack_files", "the file");
  }
  // Results written before door names could be chosen used the colors.
  if (j.contains("doors")) spec.doors = parse_door_names(get<std::string>(j, "doors", "the file"));
  // Files from before the field repeated the whole document where it fit.
  spec.repeat_piece = j.contains("repeat_piece") ? get<size_t>(j, "repeat_piece", "the file") : 0;
  r.total_s = get<double>(j, "total_s", "the file");
  const json& runs = field(j, "runs", "the file");
  for (size_t i = 0; i < runs.size(); ++i) {
    spec.runs.push_back(run_from_json(runs[i], "run " + std::to_string(i)));
  }
  if (spec.runs.empty() || spec.runs.front().config.policy != compression::Policy::kFull) {
    throw std::invalid_argument("eval results: the first run must be the full cache");
  }
  const json& records = field(j, "records", "the file");
  for (size_t i = 0; i < records.size(); ++i) {
    const json& jr = records[i];
    const std::string where = "record " + std::to_string(i);
    TrialRecord rec;
    rec.length_index =
        index_in(spec.lengths, get<size_t>(jr, "length", where), where + "'s length");
    rec.depth_index = index_in(spec.depths, get<double>(jr, "depth", where), where + "'s depth");
    rec.trial = get<size_t>(jr, "trial", where);
    rec.prompt_tokens = get<size_t>(jr, "prompt_tokens", where);
    rec.depth = get<double>(jr, "depth_reached", where);
    rec.answer = get<std::string>(jr, "answer", where);
    rec.build_s = get<double>(jr, "build_s", where);
    rec.prefill_s = get<double>(jr, "prefill_s", where);
    rec.total_s = get<double>(jr, "total_s", where);
    const json& outs = field(jr, "runs", where);
    if (outs.size() != spec.runs.size()) {
      throw std::invalid_argument("eval results: " + where + " has " + std::to_string(outs.size()) +
                                  " runs, the grid " + std::to_string(spec.runs.size()));
    }
    for (const json& o : outs) {
      TrialRecord::Run run;
      run.output = get<std::string>(o, "output", where);
      run.correct = get<bool>(o, "correct", where);
      run.kv_kept = get<double>(o, "kv_kept", where);
      run.decode_s = get<double>(o, "decode_s", where);
      if (o.contains("prefill_s")) run.prefill_s = get<double>(o, "prefill_s", where);
      if (o.contains("reconstruct_s")) run.reconstruct_s = get<double>(o, "reconstruct_s", where);
      // Absent from results written before it was measured; null when not measured.
      if (o.contains("answer_nll") && o["answer_nll"].is_number()) {
        run.answer_nll = o["answer_nll"].get<double>();
      }
      // Absent from results written before they were recorded.
      run.kv_bytes = o.value("kv_bytes", size_t(0));
      run.kv_full_bytes = o.value("kv_full_bytes", size_t(0));
      run.budgets_fingerprint = o.value("budgets_fingerprint", std::string());
      run.budgets_agree_across_ranks = o.value("budgets_agree_across_ranks", true);
      rec.runs.push_back(run);
    }
    r.records.push_back(std::move(rec));
  }
  return r;
}

EvalResult merge_results(const std::vector<EvalResult>& parts) {
  if (parts.empty()) throw std::invalid_argument("merge: no results given");
  const EvalSpec& first = parts.front().spec;
  EvalResult merged;
  merged.spec = first;
  merged.spec.lengths.clear();
  merged.spec.trials = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const EvalSpec& s = parts[p].spec;
    const std::string which = "part " + std::to_string(p + 1);
    if (s.task != first.task) {
      throw std::invalid_argument("merge: " + which + " is " + to_string(s.task) + ", part 1 " +
                                  to_string(first.task));
    }
    if (s.depths != first.depths)
      throw std::invalid_argument("merge: " + which + " has other depths");
    if (s.max_tokens != first.max_tokens) {
      throw std::invalid_argument("merge: " + which + " decoded another number of tokens");
    }
    if (s.doors != first.doors) {
      throw std::invalid_argument("merge: " + which + " names its doors " + to_string(s.doors) +
                                  ", part 1 " + to_string(first.doors));
    }
    if (s.repeat_piece != first.repeat_piece) {
      throw std::invalid_argument("merge: " + which + " repeats the document in pieces of " +
                                  std::to_string(s.repeat_piece) + " tokens, part 1 " +
                                  std::to_string(first.repeat_piece));
    }
    if (s.runs.size() != first.runs.size()) {
      throw std::invalid_argument("merge: " + which + " has " + std::to_string(s.runs.size()) +
                                  " runs, part 1 " + std::to_string(first.runs.size()));
    }
    for (size_t i = 0; i < s.runs.size(); ++i) {
      if (run_signature(s.runs[i]) != run_signature(first.runs[i])) {
        throw std::invalid_argument("merge: run " + std::to_string(i) + " of " + which + " is " +
                                    run_signature(s.runs[i]) + ", of part 1 " +
                                    run_signature(first.runs[i]));
      }
    }
    for (size_t q = 0; q < p; ++q) {
      const EvalSpec& o = parts[q].spec;
      for (size_t len : s.lengths) {
        if (o.seed == s.seed && std::count(o.lengths.begin(), o.lengths.end(), len)) {
          throw std::invalid_argument("merge: parts " + std::to_string(q + 1) + " and " +
                                      std::to_string(p + 1) + " both hold length " +
                                      std::to_string(len) + " with seed " + std::to_string(s.seed) +
                                      " (the same prompts)");
        }
      }
    }
    for (size_t len : s.lengths) {
      if (!std::count(merged.spec.lengths.begin(), merged.spec.lengths.end(), len)) {
        merged.spec.lengths.push_back(len);
      }
    }
    merged.total_s += parts[p].total_s;
  }
  std::sort(merged.spec.lengths.begin(), merged.spec.lengths.end());
  // Prompts per cell: parts of the same length with other seeds add trials to its cells.
  std::vector<size_t> per_cell(merged.spec.lengths.size() * first.depths.size(), 0);
  for (const auto& part : parts) {
    for (TrialRecord rec : part.records) {
      rec.length_index =
          index_in(merged.spec.lengths, part.spec.lengths[rec.length_index], "length");
      const size_t cell = rec.length_index * first.depths.size() + rec.depth_index;
      merged.spec.trials = std::max(merged.spec.trials, ++per_cell[cell]);
      merged.records.push_back(std::move(rec));
    }
  }
  return merged;
}

}  // namespace adakv::eval
