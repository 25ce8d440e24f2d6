#include "runtime/eval/ppl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "runtime/eval/niah.h"
#include "runtime/eval/prompt_builder.h"
#include "runtime/eval/text_table.h"

namespace adakv::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sums of one run's per-context counters over the records `take` selects.
template <class Take>
PplRecord::Run total(const PplResult& r, size_t run, Take take) {
  PplRecord::Run t;
  for (const auto& rec : r.records) {
    if (!take(rec)) continue;
    const auto& x = rec.runs[run];
    t.nll_sum += x.nll_sum;
    t.kl_sum += x.kl_sum;
    t.agree += x.agree;
    t.tokens += x.tokens;
  }
  return t;
}

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

double PplResult::perplexity(size_t run) const {
  const auto t = total(*this, run, [](const PplRecord&) { return true; });
  return t.tokens ? std::exp(t.nll_sum / double(t.tokens)) : kNaN;
}

double PplResult::perplexity(size_t run, size_t length_index) const {
  const auto t =
      total(*this, run, [&](const PplRecord& rec) { return rec.length_index == length_index; });
  return t.tokens ? std::exp(t.nll_sum / double(t.tokens)) : kNaN;
}

double PplResult::mean_kl(size_t run) const {
  const auto t = total(*this, run, [](const PplRecord&) { return true; });
  return t.tokens ? t.kl_sum / double(t.tokens) : kNaN;
}

double PplResult::agreement(size_t run) const {
  const auto t = total(*this, run, [](const PplRecord&) { return true; });
  return t.tokens ? double(t.agree) / double(t.tokens) : kNaN;
}

double PplResult::kv_kept(size_t run) const {
  double sum = 0;
  for (const auto& rec : records) sum += rec.runs[run].kv_kept;
  return records.empty() ? kNaN : sum / double(records.size());
}

PplResult run_ppl(runtime::Worker& engine, const PplSpec& spec, const PplProgress& progress) {
  if (spec.lengths.empty() || spec.trials == 0) {
    throw std::invalid_argument("the grid is empty: give lengths and trials >= 1");
  }
  if (spec.runs.empty() || spec.runs.front().config.policy != compression::Policy::kFull) {
    throw std::invalid_argument("the first run must be the full cache (the reference)");
  }
  if (spec.continuation < 2) {
    throw std::invalid_argument("the continuation must be at least 2 tokens");
  }
  const size_t context = engine.model().config().context_length;
  const size_t longest = *std::max_element(spec.lengths.begin(), spec.lengths.end());
  for (size_t len : spec.lengths) {
    if (len == 0 || len + spec.continuation > context) {
      throw std::invalid_argument("length " + std::to_string(len) + " plus a continuation of " +
                                  std::to_string(spec.continuation) +
                                  " tokens does not fit the model's context of " +
                                  std::to_string(context));
    }
  }
  // The prose as one running text; each context starts at a seeded offset in its tokens.
  const auto files = spec.text_files.empty() ? default_haystack_files() : spec.text_files;
  std::string text;
  for (const auto& sentence : load_sentences(files)) text += (text.empty() ? "" : " ") + sentence;
  const std::vector<int32_t> tokens = engine.encode_prompt(text, /*chat=*/false);
  if (tokens.size() < longest + spec.continuation) {
    throw std::invalid_argument("the text has " + std::to_string(tokens.size()) +
                                " tokens; the longest context plus continuation needs " +
                                std::to_string(longest + spec.continuation));
  }
  std::vector<compression::CompressionConfig> configs;
  for (const auto& run : spec.runs) configs.push_back(run.config);

  PplResult result;
  result.spec = spec;
  result.spec.text_files = files;
  result.text_tokens = tokens.size();
  const auto t_all = Clock::now();
  const size_t n_contexts = spec.lengths.size() * spec.trials;
  for (size_t li = 0; li < spec.lengths.size(); ++li) {
    const size_t len = spec.lengths[li], span = len + spec.continuation;
    for (size_t t = 0; t < spec.trials; ++t) {
      PplRecord rec;
      rec.length_index = li;
      rec.trial = t;
      const auto t0 = Clock::now();
      // Seeded by the length's value (not its index), like the retrieval grid's cells.
      rec.offset = size_t(prompt_seed(spec.seed, len, 0, t) % (tokens.size() - span + 1));
      runtime::GenerateRequest req;
      req.prompt.assign(tokens.begin() + rec.offset, tokens.begin() + rec.offset + len);
      req.kv_dtype = spec.kv_dtype;
      const std::vector<int32_t> continuation(tokens.begin() + rec.offset + len,
                                              tokens.begin() + rec.offset + span);
      const auto scores = runtime::score_continuation(engine, req, continuation, configs);
      for (const auto& s : scores) {
        PplRecord::Run run;
        for (size_t i = 0; i < s.nll.size(); ++i) {
          run.nll_sum += s.nll[i];
          run.kl_sum += s.kl[i];
          run.agree += s.agrees[i];
        }
        run.tokens = s.nll.size();
        run.kv_kept = double(s.kv_after_prefill_bytes) /
                      double(std::max<size_t>(s.kv_full_after_prefill_bytes, 1));
        rec.runs.push_back(run);
      }
      rec.prefill_s = scores.front().prefill_s;
      rec.total_s = seconds_since(t0);
      result.records.push_back(std::move(rec));
      if (progress) progress(result.records.back(), result.records.size(), n_contexts);
    }
  }
  result.total_s = seconds_since(t_all);
  return result;
}

std::string format_ppl(const PplResult& r) {
  const auto& spec = r.spec;
  std::string out;
  char head[256];
  std::snprintf(head, sizeof head,
                "ppl: %zu lengths x %zu contexts, %zu scored tokens after each, %zu runs per "
                "context (one prefill), %.0f s\n",
                spec.lengths.size(), spec.trials, spec.continuation - 1, spec.runs.size(),
                r.total_s);
  out += head;
  out +=
      "perplexity (all contexts, then per context length), its ratio to the full cache's, mean "
      "KL(full || run) in nats per token, top-1 agreement with the full cache in %\n";
  std::string line = pad("policy", -14) + pad("budget", -9) + pad("ppl", 8);
  for (size_t len : spec.lengths) line += pad(std::to_string(len), 8);
  line += pad("/ full", 8) + pad("KL", 9) + pad("top-1", 7) + pad("KV kept", 9);
  out += line + "\n" + std::string(line.size(), '-') + "\n";
  const double full = r.perplexity(0);
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    line = pad(spec.runs[i].policy, -14) + pad(spec.runs[i].budget, -9) +
           pad(fixed(r.perplexity(i), 3), 8);
    for (size_t li = 0; li < spec.lengths.size(); ++li) {
      line += pad(fixed(r.perplexity(i, li), 3), 8);
    }
    line += pad(fixed(r.perplexity(i) / full, 4), 8) + pad(fixed(r.mean_kl(i), 5), 9) +
            pad(pct(r.agreement(i)), 7) + pad(pct(r.kv_kept(i)) + "%", 9);
    out += line + "\n";
  }
  for (const auto& run : spec.runs) {
    if (run.config.policy != compression::Policy::kAdaKV) continue;
    const size_t ada = find_run(spec.runs, run.policy, run.budget);
    const size_t snap = find_run(spec.runs, "snapkv", run.budget);
    if (snap == std::string::npos) continue;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s @ %s vs snapkv: perplexity %.3f vs %.3f, KL %.5f vs %.5f",
                  run.policy.c_str(), run.budget.c_str(), r.perplexity(ada), r.perplexity(snap),
                  r.mean_kl(ada), r.mean_kl(snap));
    out += buf;
    if (r.mean_kl(snap) > 0) out += " (ratio " + fixed(r.mean_kl(ada) / r.mean_kl(snap), 3) + ")";
    out += "\n";
  }
  return out;
}

nlohmann::json to_json(const PplResult& r) {
  using nlohmann::json;
  const auto& spec = r.spec;
  auto num = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
  json runs = json::array();
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    const auto& c = spec.runs[i].config;
    json per_length = json::object();
    for (size_t li = 0; li < spec.lengths.size(); ++li) {
      per_length[std::to_string(spec.lengths[li])] = num(r.perplexity(i, li));
    }
    runs.push_back({{"policy", spec.runs[i].policy},
                    {"budget", spec.runs[i].budget},
                    {"budget_ratio", c.budget_tokens ? json(nullptr) : json(c.budget_ratio)},
                    {"budget_tokens", c.budget_tokens ? json(c.budget_tokens) : json(nullptr)},
                    {"window", c.window},
                    {"alpha", c.alpha},
                    {"scope", compression::to_string(c.scope)},
                    {"pooling", compression::to_string(c.pooling)},
                    {"pool_kernel", c.pool_kernel},
                    {"gqa", compression::to_string(c.gqa)},
                    {"budget_scores", compression::to_string(c.budget_scores)},
                    {"lookahead", c.lookahead},
                    {"lookahead_weight", c.lookahead_weight},
                    {"min_keep", c.min_keep},
                    {"perplexity", num(r.perplexity(i))},
                    {"perplexity_by_length", per_length},
                    {"relative_to_full", num(r.perplexity(i) / r.perplexity(0))},
                    {"mean_kl", num(r.mean_kl(i))},
                    {"top1_agreement", num(r.agreement(i))},
                    {"kv_kept", num(r.kv_kept(i))}});
  }
  json records = json::array();
  for (const auto& rec : r.records) {
    json outs = json::array();
    for (const auto& o : rec.runs) {
      outs.push_back({{"nll_sum", o.nll_sum},
                      {"kl_sum", o.kl_sum},
                      {"agree", o.agree},
                      {"tokens", o.tokens},
                      {"kv_kept", o.kv_kept}});
    }
    records.push_back({{"length", spec.lengths[rec.length_index]},
                       {"trial", rec.trial},
                       {"offset", rec.offset},
                       {"prefill_s", rec.prefill_s},
                       {"total_s", rec.total_s},
                       {"runs", outs}});
  }
  return {{"task", "ppl"},
          {"lengths", spec.lengths},
          {"trials", spec.trials},
          {"continuation", spec.continuation},
          {"seed", spec.seed},
          {"text_files", spec.text_files},
          {"text_tokens", r.text_tokens},
          {"total_s", r.total_s},
          {"runs", runs},
          {"records", records}};
}

}  // namespace adakv::eval
