#include "runtime/eval/eval_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "runtime/eval/niah.h"
#include "runtime/eval/passkey.h"
#include "runtime/eval/query_agnostic.h"
#include "runtime/eval/scoring.h"
#include "runtime/eval/text_table.h"

namespace adakv::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::string budgets_fingerprint(const std::vector<std::vector<size_t>>& budgets) {
  if (budgets.empty()) return "";
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(budgets.size());
  for (const auto& layer : budgets) {
    mix(layer.size());
    for (size_t v : layer) mix(v);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

std::string budget_label(const compression::CompressionConfig& c) {
  if (c.budget_tokens > 0) return std::to_string(c.budget_tokens) + " tok";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", std::round(c.budget_ratio * 1000) / 10);
  return buf;
}

}  // namespace

size_t find_run(const std::vector<PolicyRun>& runs, const std::string& policy,
                const std::string& budget) {
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].policy == policy && runs[i].budget == budget) return i;
  }
  return std::string::npos;
}

const char* to_string(Task t) {
  switch (t) {
    case Task::kPasskey:
      return "passkey";
    case Task::kNiah:
      return "niah";
    case Task::kPasskeyMulti:
      return "passkey-multi";
  }
  return "?";
}

std::vector<PolicyRun> make_runs(const compression::CompressionConfig& base,
                                 const std::vector<std::string>& policies,
                                 const std::vector<std::string>& budgets) {
  if (policies.empty()) throw std::invalid_argument("no policy given");
  std::vector<PolicyRun> runs;
  PolicyRun full{base, "full", "100%"};
  full.config.policy = compression::Policy::kFull;
  full.config.budget_ratio = 1.0;
  full.config.budget_tokens = 0;
  runs.push_back(full);
  for (const auto& name : policies) {
    // "adakv:global" picks the scope of this policy alone, so one grid can compare scopes.
    const size_t colon = name.find(':');
    const auto policy = compression::parse_policy(name.substr(0, colon));
    if (policy == compression::Policy::kFull) continue;
    if (budgets.empty()) throw std::invalid_argument("no budget given");
    for (const auto& b : budgets) {
      PolicyRun run{base, compression::to_string(policy), ""};
      run.config.policy = policy;
      if (colon != std::string::npos) {
        const std::string option = name.substr(colon + 1);
        if (option == "layer" || option == "global") {
          run.config.scope = compression::parse_scope(option);
        } else {
          run.config.scoring = compression::parse_scoring(option);
          if (policy != compression::Policy::kAdaKV) run.config.scope = compression::Scope::kLayer;
        }
        run.policy = name;
      } else if (policy != compression::Policy::kAdaKV) {
        // Uniform and fixed-shape policies mean the same in either scope.
        run.config.scope = compression::Scope::kLayer;
      }
      run.config.budget_tokens = 0;
      compression::parse_budget(b, run.config);
      run.config.validate();
      run.budget = budget_label(run.config);
      if (find_run(runs, run.policy, run.budget) == std::string::npos) runs.push_back(run);
    }
  }
  return runs;
}

double EvalResult::accuracy(size_t run) const {
  size_t n = 0, ok = 0;
  for (const auto& r : records) {
    ++n;
    ok += r.runs[run].correct;
  }
  return n ? double(ok) / n : std::numeric_limits<double>::quiet_NaN();
}

double EvalResult::accuracy(size_t run, size_t length_index) const {
  size_t n = 0, ok = 0;
  for (const auto& r : records) {
    if (r.length_index == length_index) {
      ++n;
      ok += r.runs[run].correct;
    }
  }
  return n ? double(ok) / n : std::numeric_limits<double>::quiet_NaN();
}

double EvalResult::accuracy(size_t run, size_t length_index, size_t depth_index) const {
  size_t n = 0, ok = 0;
  for (const auto& r : records) {
    if (r.length_index == length_index && r.depth_index == depth_index) {
      ++n;
      ok += r.runs[run].correct;
    }
  }
  return n ? double(ok) / n : std::numeric_limits<double>::quiet_NaN();
}

double EvalResult::kv_kept(size_t run) const {
  double sum = 0;
  for (const auto& r : records) sum += r.runs[run].kv_kept;
  return records.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / records.size();
}

double EvalResult::answer_nll(size_t run) const {
  double sum = 0;
  size_t n = 0;
  for (const auto& r : records) {
    if (std::isnan(r.runs[run].answer_nll)) continue;
    sum += r.runs[run].answer_nll;
    ++n;
  }
  return n ? sum / double(n) : std::numeric_limits<double>::quiet_NaN();
}

EvalResult run_eval(runtime::Worker& engine, const EvalSpec& spec, const Progress& progress) {
  if (spec.task == Task::kPasskeyMulti) return run_query_agnostic(engine, spec, progress);
  if (spec.lengths.empty() || spec.depths.empty() || spec.trials == 0) {
    throw std::invalid_argument("the grid is empty: give lengths, depths and trials >= 1");
  }
  if (spec.runs.empty() || spec.runs.front().config.policy != compression::Policy::kFull) {
    throw std::invalid_argument("the first run must be the full cache (the reference)");
  }
  const size_t context = engine.model().config().context_length;
  for (size_t len : spec.lengths) {
    if (len + spec.max_tokens > context) {
      throw std::invalid_argument(
          "length " + std::to_string(len) + " plus " + std::to_string(spec.max_tokens) +
          " new tokens does not fit the model's context of " + std::to_string(context));
    }
  }
  for (double d : spec.depths) {
    if (!(d >= 0 && d <= 100)) {
      throw std::invalid_argument("depths are percentages in [0, 100], got " + std::to_string(d));
    }
  }
  std::vector<std::string> sentences;
  if (spec.task == Task::kNiah) {
    sentences = load_sentences(spec.haystack_files.empty() ? default_haystack_files()
                                                           : spec.haystack_files);
  }
  std::vector<compression::CompressionConfig> configs;
  for (const auto& run : spec.runs) configs.push_back(run.config);
  const TokenCounter count = [&engine](const std::string& text) {
    return engine.encode_prompt(text, /*chat=*/true).size();
  };

  EvalResult result;
  result.spec = spec;
  const auto t_all = Clock::now();
  const size_t total = spec.lengths.size() * spec.depths.size() * spec.trials;
  for (size_t li = 0; li < spec.lengths.size(); ++li) {
    for (size_t di = 0; di < spec.depths.size(); ++di) {
      for (size_t t = 0; t < spec.trials; ++t) {
        TrialRecord rec;
        rec.length_index = li;
        rec.depth_index = di;
        rec.trial = t;
        const auto t0 = Clock::now();
        // Seeded by the cell's values (not indices): a cell's prompts do not change when
        // other lengths or depths are added to the grid.
        const size_t depth_key = size_t(std::lround(spec.depths[di] * 100));
        const uint64_t seed =
            prompt_seed(spec.seed + uint64_t(spec.task), spec.lengths[li], depth_key, t);
        const double depth = spec.depths[di] / 100;
        const Sample s = spec.task == Task::kPasskey
                             ? make_passkey(spec.lengths[li], depth, seed, count)
                             : make_niah(sentences, spec.lengths[li], depth, seed, count);
        runtime::GenerateRequest req;
        req.prompt = engine.encode_prompt(s.user_text, /*chat=*/true);
        req.max_tokens = spec.max_tokens;
        req.kv_dtype = spec.kv_dtype;
        req.reference = engine.encode_prompt(s.reference, /*chat=*/false);
        rec.prompt_tokens = req.prompt.size();
        rec.depth = s.depth;
        rec.answer = s.answer;
        rec.build_s = seconds_since(t0);

        const auto outs = runtime::generate_policies(engine, req, configs);
        for (const auto& o : outs) {
          TrialRecord::Run run;
          run.output = o.text;
          run.correct = is_correct(o.text, s.answer);
          run.kv_kept = double(o.kv_after_prefill_bytes) /
                        double(std::max<size_t>(o.kv_full_after_prefill_bytes, 1));
          run.kv_bytes = o.kv_after_prefill_bytes;
          run.kv_full_bytes = o.kv_full_after_prefill_bytes;
          run.budgets_fingerprint = budgets_fingerprint(o.compression.budgets);
          run.budgets_agree_across_ranks = o.budgets_agree_across_ranks;
          run.decode_s = o.decode_s;
          run.answer_nll = 0;
          for (double x : o.reference_nll) run.answer_nll += x;
          rec.runs.push_back(std::move(run));
        }
        rec.prefill_s = outs.front().prefill_s;
        rec.total_s = seconds_since(t0);
        result.records.push_back(std::move(rec));
        if (progress) progress(result.records.back(), result.records.size(), total);
      }
    }
  }
  result.total_s = seconds_since(t_all);
  return result;
}

std::string format_summary(const EvalResult& r) {
  const auto& spec = r.spec;
  std::string out;
  char head[256];
  std::snprintf(head, sizeof head,
                "%s: %zu lengths x %zu depths x %zu trials = %zu prompts, %zu runs each "
                "(one prefill per prompt), %.0f s\n",
                to_string(spec.task), spec.lengths.size(), spec.depths.size(), spec.trials,
                r.records.size(), spec.runs.size(), r.total_s);
  out += head;
  out += "accuracy in % (over all prompts, then per prompt length in tokens)\n";
  // The policy column fits the longest name ("adakv:output-aware"), 14 at least.
  int policy_width = 14;
  for (const auto& run : spec.runs) {
    policy_width = std::max(policy_width, int(run.policy.size()) + 2);
  }
  std::string line = pad("policy", -policy_width) + pad("budget", -9) + pad("all", 7);
  for (size_t len : spec.lengths) line += pad(std::to_string(len), 8);
  line += pad("/ full", 8) + pad("KV kept", 9) + pad("ans NLL", 9);
  out += line + "\n" + std::string(line.size(), '-') + "\n";
  const double full = r.accuracy(0);
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    const double acc = r.accuracy(i);
    line =
        pad(spec.runs[i].policy, -policy_width) + pad(spec.runs[i].budget, -9) + pad(pct(acc), 7);
    for (size_t li = 0; li < spec.lengths.size(); ++li) line += pad(pct(r.accuracy(i, li)), 8);
    char rel[32] = "-";
    if (full > 0) std::snprintf(rel, sizeof rel, "%.3f", acc / full);
    char nll[32] = "-";
    if (!std::isnan(r.answer_nll(i))) std::snprintf(nll, sizeof nll, "%.3f", r.answer_nll(i));
    line += pad(rel, 8) + pad(pct(r.kv_kept(i)) + "%", 9) + pad(nll, 9);
    out += line + "\n";
  }
  // Ada-KV against its uniform twin (SnapKV) and the full cache, budget by budget.
  for (const auto& run : spec.runs) {
    if (run.config.policy != compression::Policy::kAdaKV) continue;
    const size_t ada = find_run(spec.runs, run.policy, run.budget);
    const size_t snap = find_run(spec.runs, "snapkv", run.budget);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s @ %s: %s%% of full", run.policy.c_str(), run.budget.c_str(),
                  full > 0 ? pct(r.accuracy(ada) / full).c_str() : "-");
    out += buf;
    if (snap != std::string::npos) {
      // The prompts where the two disagree: on a grid this size a point is a prompt or two,
      // and these counts say whether a gap is one policy winning or both trading misses.
      size_t only_ada = 0, only_snap = 0;
      for (const TrialRecord& rec : r.records) {
        only_ada += rec.runs[ada].correct && !rec.runs[snap].correct;
        only_snap += rec.runs[snap].correct && !rec.runs[ada].correct;
      }
      std::snprintf(buf, sizeof buf,
                    "; %+.1f points vs snapkv (prompts right with only one of them: %s %zu, "
                    "snapkv %zu)",
                    100 * (r.accuracy(ada) - r.accuracy(snap)), run.policy.c_str(), only_ada,
                    only_snap);
      out += buf;
      // The graded view: which of the two gives the right answer the higher likelihood.
      size_t ada_higher = 0, snap_higher = 0;
      for (const TrialRecord& rec : r.records) {
        const double a = rec.runs[ada].answer_nll, b = rec.runs[snap].answer_nll;
        ada_higher += a < b;
        snap_higher += b < a;
      }
      if (ada_higher + snap_higher > 0) {
        std::snprintf(buf, sizeof buf,
                      "; answer NLL %.3f vs %.3f (lower with %s on %zu prompts, with snapkv on "
                      "%zu)",
                      r.answer_nll(ada), r.answer_nll(snap), run.policy.c_str(), ada_higher,
                      snap_higher);
        out += buf;
      }
    }
    out += "\n";
  }
  return out;
}

std::string format_cells(const EvalResult& r) {
  const auto& spec = r.spec;
  std::string out;
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    out += "\n" + spec.runs[i].label() + ": accuracy in % by depth (rows) x length (columns)\n";
    std::string line = pad("depth", -8);
    for (size_t len : spec.lengths) line += pad(std::to_string(len), 8);
    out += line + "\n";
    for (size_t di = 0; di < spec.depths.size(); ++di) {
      char d[16];
      std::snprintf(d, sizeof d, "%g%%", spec.depths[di]);
      line = pad(d, -8);
      for (size_t li = 0; li < spec.lengths.size(); ++li) {
        line += pad(pct(r.accuracy(i, li, di)), 8);
      }
      out += line + "\n";
    }
  }
  return out;
}

nlohmann::json to_json(const EvalResult& r) {
  using nlohmann::json;
  const auto& spec = r.spec;
  auto num = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
  json runs = json::array();
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    const auto& c = spec.runs[i].config;
    json cells = json::array();
    json per_length = json::object();
    for (size_t li = 0; li < spec.lengths.size(); ++li) {
      json row = json::array();
      for (size_t di = 0; di < spec.depths.size(); ++di) row.push_back(num(r.accuracy(i, li, di)));
      cells.push_back(row);
      per_length[std::to_string(spec.lengths[li])] = num(r.accuracy(i, li));
    }
    const double full = r.accuracy(0);
    runs.push_back({{"policy", spec.runs[i].policy},
                    {"budget", spec.runs[i].budget},
                    {"budget_ratio", c.budget_tokens ? json(nullptr) : json(c.budget_ratio)},
                    {"budget_tokens", c.budget_tokens ? json(c.budget_tokens) : json(nullptr)},
                    {"window", c.window},
                    {"alpha", c.alpha},
                    {"scope", compression::to_string(c.scope)},
                    {"rule", compression::to_string(c.rule)},
                    {"pooling", compression::to_string(c.pooling)},
                    {"pool_kernel", c.pool_kernel},
                    {"pool_sink", c.pool_sink},
                    {"pool_shift", c.pool_shift},
                    {"lookahead", c.lookahead},
                    {"lookahead_weight", c.lookahead_weight},
                    {"min_keep", c.min_keep},
                    {"gqa", compression::to_string(c.gqa)},
                    {"budget_scores", compression::to_string(c.budget_scores)},
                    {"scoring", compression::to_string(c.scoring)},
                    {"accuracy", num(r.accuracy(i))},
                    {"relative_to_full", full > 0 ? num(r.accuracy(i) / full) : json(nullptr)},
                    {"accuracy_by_length", per_length},
                    {"accuracy_by_length_depth", cells},
                    {"kv_kept", num(r.kv_kept(i))},
                    {"answer_nll", num(r.answer_nll(i))}});
  }
  json records = json::array();
  for (const auto& rec : r.records) {
    json outs = json::array();
    for (const auto& o : rec.runs) {
      outs.push_back({{"output", o.output},
                      {"correct", o.correct},
                      {"kv_kept", o.kv_kept},
                      {"kv_bytes", o.kv_bytes},
                      {"kv_full_bytes", o.kv_full_bytes},
                      {"budgets_fingerprint", o.budgets_fingerprint},
                      {"budgets_agree_across_ranks", o.budgets_agree_across_ranks},
                      {"decode_s", o.decode_s},
                      {"prefill_s", o.prefill_s},
                      {"reconstruct_s", o.reconstruct_s},
                      {"answer_nll", num(o.answer_nll)}});
    }
    records.push_back({{"length", spec.lengths[rec.length_index]},
                       {"depth", spec.depths[rec.depth_index]},
                       {"trial", rec.trial},
                       {"prompt_tokens", rec.prompt_tokens},
                       {"depth_reached", rec.depth},
                       {"answer", rec.answer},
                       {"build_s", rec.build_s},
                       {"prefill_s", rec.prefill_s},
                       {"total_s", rec.total_s},
                       {"runs", outs}});
  }
  return {{"task", to_string(spec.task)},
          {"lengths", spec.lengths},
          {"depths", spec.depths},
          {"trials", spec.trials},
          {"seed", spec.seed},
          {"max_tokens", spec.max_tokens},
          {"haystack_files", spec.haystack_files},
          {"doors", to_string(spec.doors)},
          {"repeat_piece", spec.repeat_piece},
          {"total_s", r.total_s},
          {"runs", runs},
          {"records", records}};
}

}  // namespace adakv::eval
