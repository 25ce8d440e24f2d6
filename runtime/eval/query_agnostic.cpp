#include "runtime/eval/query_agnostic.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "runtime/compression/reconstruction.h"
#include "runtime/eval/passkey_multi.h"
#include "runtime/eval/scoring.h"

namespace adakv::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A reply that starts unlike every question: the common prefix of the prompts then ends
// before the first question word, so the context holds no part of any question.
constexpr const char* kProbe = "Thanks.";

// Run indices grouped by scoring: the runs of a group share one recording prefill.
std::vector<std::vector<size_t>> scoring_groups(const std::vector<PolicyRun>& runs) {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < runs.size(); ++i) {
    bool placed = false;
    for (auto& g : groups) {
      if (runs[g.front()].config.same_scoring(runs[i].config)) {
        g.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({i});
  }
  return groups;
}

// One document's recorded scores under one scoring, for analysis: <stem>.f32 holds them raw
// ([layer][kv head][prefix] float32, little-endian as in memory), <stem>.json the context's
// tokens, the keys, the shape and each run's kept tokens per [layer][kv head of the model].
void write_scores(const std::string& dir, const std::string& stem,
                  const std::vector<int32_t>& context, const MultiSample& sample,
                  const std::vector<std::vector<float>>& scores, const std::vector<PolicyRun>& runs,
                  const std::vector<size_t>& group,
                  const std::vector<std::vector<runtime::GenerateResult>>& outs) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path base = fs::path(dir) / stem;
  std::ofstream raw(base.string() + ".f32", std::ios::binary);
  size_t per_layer = 0;
  for (const auto& layer : scores) {
    per_layer = std::max(per_layer, layer.size());
    raw.write(reinterpret_cast<const char*>(layer.data()), std::streamsize(layer.size() * 4));
  }
  std::ofstream js(base.string() + ".json");
  js << "{\"layers\": " << scores.size() << ", \"layer_floats\": " << per_layer
     << ", \"context\": [";
  for (size_t i = 0; i < context.size(); ++i) js << (i ? "," : "") << context[i];
  js << "], \"answers\": [";
  for (size_t k = 0; k < sample.answers.size(); ++k) {
    js << (k ? "," : "") << "\"" << sample.answers[k] << "\"";
  }
  js << "], \"runs\": [";
  for (size_t p = 0; p < group.size(); ++p) {
    js << (p ? "," : "") << "{\"label\": \"" << runs[group[p]].label() << "\", \"kept\": [";
    // The budget vector covers every rank's heads; a policy that keeps everything has none.
    const auto& report = outs[p].front().compression;
    const auto& kept = report.budgets.empty() ? report.kept : report.budgets;
    for (size_t l = 0; l < kept.size(); ++l) {
      js << (l ? "," : "") << "[";
      for (size_t g = 0; g < kept[l].size(); ++g) js << (g ? "," : "") << kept[l][g];
      js << "]";
    }
    js << "]}";
  }
  js << "]}\n";
  if (!raw || !js) throw std::runtime_error("cannot write the scores to " + base.string());
}

}  // namespace

std::vector<double> key_bands(size_t keys) {
  std::vector<double> bands;
  for (size_t k = 0; k < keys; ++k) bands.push_back(100.0 * (double(k) + 0.5) / double(keys));
  return bands;
}

EvalResult run_query_agnostic(runtime::Worker& engine, const EvalSpec& spec,
                              const Progress& progress) {
  const size_t keys = spec.depths.size();
  if (spec.lengths.empty() || keys == 0 || spec.trials == 0) {
    throw std::invalid_argument("the grid is empty: give lengths, keys and trials >= 1");
  }
  if (keys > kMaxPasskeyDoors) {
    throw std::invalid_argument("passkey-multi holds at most " + std::to_string(kMaxPasskeyDoors) +
                                " keys per document, got " + std::to_string(keys));
  }
  if (spec.runs.empty() || spec.runs.front().config.policy != compression::Policy::kFull) {
    throw std::invalid_argument("the first run must be the full cache (the reference)");
  }
  // A question takes about 20 tokens with its chat turn; answer_questions checks exactly. A
  // reconstruction repeats the document after it, in pieces where it does not fit whole.
  const size_t context = engine.model().config().context_length;
  bool reconstructs = false;
  for (const auto& run : spec.runs) {
    reconstructs |= run.config.scoring == compression::Scoring::kReconstruct;
  }
  for (size_t len : spec.lengths) {
    if (reconstructs && len + 32 + compression::kMinRepeatPiece > context) {
      throw std::invalid_argument(
          "length " + std::to_string(len) + ": a document and a piece of its reconstruction (" +
          std::to_string(compression::kMinRepeatPiece) +
          " tokens at least) do not fit the model's context of " + std::to_string(context));
    }
    if (len + 32 + spec.max_tokens > context) {
      throw std::invalid_argument(
          "length " + std::to_string(len) + ", a question and " + std::to_string(spec.max_tokens) +
          " new tokens do not fit the model's context of " + std::to_string(context));
    }
  }
  const auto groups = scoring_groups(spec.runs);
  const TokenCounter count = [&engine](const std::string& text) {
    return engine.encode_prompt(text, /*chat=*/true).size();
  };

  EvalResult result;
  result.spec = spec;
  const auto t_all = Clock::now();
  const size_t total = spec.lengths.size() * spec.trials * keys;
  for (size_t li = 0; li < spec.lengths.size(); ++li) {
    for (size_t t = 0; t < spec.trials; ++t) {
      const auto t0 = Clock::now();
      // Seeded by the cell's values: a document does not change when lengths are added.
      const uint64_t seed = prompt_seed(spec.seed + uint64_t(spec.task), spec.lengths[li], keys, t);
      const MultiSample s = make_passkey_multi(spec.lengths[li], keys, seed, count, spec.doors);
      // Every question's whole prompt, and a probe's: their common prefix is the context.
      std::vector<std::vector<int32_t>> prompts;
      for (size_t k = 0; k < keys; ++k) {
        prompts.push_back(engine.encode_prompt(question_prompt(s, k), /*chat=*/true));
      }
      prompts.push_back(engine.encode_prompt(s.document + "\n\n" + kProbe, /*chat=*/true));
      const size_t n_context = common_prefix(prompts);
      prompts.pop_back();
      runtime::GenerateRequest req;
      req.prompt.assign(prompts.front().begin(), prompts.front().begin() + n_context);
      req.max_tokens = spec.max_tokens;
      req.kv_dtype = spec.kv_dtype;
      std::vector<std::vector<int32_t>> questions;
      for (const auto& p : prompts) questions.emplace_back(p.begin() + n_context, p.end());
      const double build_s = seconds_since(t0);

      std::vector<TrialRecord> recs(keys);
      for (size_t k = 0; k < keys; ++k) {
        recs[k].length_index = li;
        recs[k].depth_index = k;
        recs[k].trial = t;
        recs[k].prompt_tokens = n_context;
        recs[k].depth = s.depths[k];
        recs[k].answer = s.answers[k];
        recs[k].build_s = build_s;
        recs[k].runs.resize(spec.runs.size());
      }
      double prefill_s = 0;
      for (const auto& group : groups) {
        std::vector<compression::CompressionConfig> configs;
        for (size_t i : group) configs.push_back(spec.runs[i].config);
        compression::RepeatPieces repeat;
        if (configs.front().scoring == compression::Scoring::kReconstruct) {
          const auto instruction =
              engine.encode_prompt(compression::kRepeatInstruction, /*chat=*/false);
          const auto text = engine.encode_prompt(s.document, /*chat=*/false);
          size_t piece =
              compression::repeat_piece_tokens(n_context, text.size(), instruction.size(), context);
          if (spec.repeat_piece > 0) piece = std::min(piece, spec.repeat_piece);
          if (piece == 0) {
            throw std::invalid_argument("a document of " + std::to_string(n_context) +
                                        " tokens leaves no room for its reconstruction");
          }
          repeat = compression::repeat_pieces(instruction, text, piece,
                                              compression::text_offset(req.prompt, text));
        }
        std::vector<std::vector<float>> scores;
        const auto outs = runtime::answer_questions(engine, req, questions, configs, repeat,
                                                    spec.scores_dir.empty() ? nullptr : &scores);
        if (!spec.scores_dir.empty()) {
          const std::string stem = "doc-" + std::to_string(spec.lengths[li]) + "-" +
                                   std::to_string(t) + "-" + spec.runs[group.front()].policy;
          write_scores(spec.scores_dir, stem, req.prompt, s, scores, spec.runs, group, outs);
        }
        prefill_s += outs.front().front().prefill_s;
        for (size_t p = 0; p < group.size(); ++p) {
          for (size_t k = 0; k < keys; ++k) {
            const runtime::GenerateResult& o = outs[p][k];
            TrialRecord::Run& run = recs[k].runs[group[p]];
            run.output = o.text;
            run.correct = is_correct(o.text, s.answers[k]);
            run.kv_kept = double(o.kv_after_prefill_bytes) /
                          double(std::max<size_t>(o.kv_full_after_prefill_bytes, 1));
            run.kv_bytes = o.kv_after_prefill_bytes;
            run.kv_full_bytes = o.kv_full_after_prefill_bytes;
            run.budgets_fingerprint = budgets_fingerprint(o.compression.budgets);
            run.budgets_agree_across_ranks = o.budgets_agree_across_ranks;
            run.decode_s = o.decode_s;
            run.prefill_s = o.prefill_s;
            run.reconstruct_s = configs.front().scoring == compression::Scoring::kReconstruct
                                    ? o.compression.lookahead_s
                                    : 0;
          }
        }
      }
      for (auto& rec : recs) {
        rec.prefill_s = prefill_s;
        rec.total_s = seconds_since(t0);
        result.records.push_back(std::move(rec));
        if (progress) progress(result.records.back(), result.records.size(), total);
      }
    }
  }
  result.total_s = seconds_since(t_all);
  return result;
}

}  // namespace adakv::eval
