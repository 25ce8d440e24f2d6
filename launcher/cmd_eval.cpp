// adakv eval passkey|niah|passkey-multi: retrieval accuracy of every KV policy over a grid of
// prompt lengths, needle depths and budgets. One prefill per prompt serves every policy;
// passkey-multi compresses a document once per policy and asks each of its keys against it.
// Prints the summary table; writes the table, JSON results and SVG (PNG when a converter exists)
// heatmaps to --out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/chat_template_flag.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/eval_runs.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/eval/eval_report.h"
#include "runtime/eval/eval_runner.h"
#include "runtime/eval/niah.h"
#include "runtime/eval/passkey_multi.h"
#include "runtime/eval/query_agnostic.h"
#include "runtime/eval/svg_plot.h"
#include "runtime/model_registry.h"
#include "runtime/svg_output.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct EvalOptions {
  eval::Task task = eval::Task::kPasskey;
  std::string model;
  // Small defaults that finish in a few minutes on a laptop CPU; flags scale to the full grid.
  std::vector<size_t> lengths = {1024, 2048};
  std::vector<double> depths = {0, 25, 50, 75, 100};
  std::vector<std::string> budgets = {"0.1", "0.2"};
  std::vector<std::string> policies = {"full", "snapkv", "adakv"};
  size_t trials = 2;
  size_t keys = 4;  // passkey-multi: keys per document, one per depth band
  uint64_t seed = 0;
  size_t max_tokens = 0;  // 0: the task's default
  std::string out = "eval-results";
  std::vector<std::string> haystack;
  std::string doors = "colors";                            // passkey-multi
  size_t repeat_piece = compression::kDefaultRepeatPiece;  // passkey-multi
  std::string scores_dir;                                  // passkey-multi
  int threads = 0;
  CompressionFlags compression;
  ParallelFlags parallel;
  ChatTemplateFlag chat_template;
};

// File-name-safe form of a run: "adakv_20pct", "snapkv_128tok", "adakv-output-aware_20pct".
std::string file_tag(const eval::PolicyRun& run) {
  std::string tag = run.policy + "_";
  std::replace(tag.begin(), tag.end(), ':', '-');
  for (char c : run.budget) {
    if (c == '%') {
      tag += "pct";
    } else if (c != ' ') {
      tag += c == '.' ? 'p' : c;
    }
  }
  return tag;
}

eval::Heatmap heatmap_of(const eval::EvalResult& r, size_t run) {
  const auto& spec = r.spec;
  eval::Heatmap h;
  const double acc = r.accuracy(run);
  char title[160];
  std::snprintf(title, sizeof title, "%s: %.0f%%", spec.runs[run].label().c_str(), 100 * acc);
  h.title = title;
  h.x_title = "prompt tokens";
  h.y_title = "needle depth";
  for (size_t len : spec.lengths) h.x_labels.push_back(std::to_string(len));
  for (size_t di = 0; di < spec.depths.size(); ++di) {
    char d[16];
    std::snprintf(d, sizeof d, "%g%%", spec.depths[di]);
    h.y_labels.push_back(d);
    std::vector<double> row;
    for (size_t li = 0; li < spec.lengths.size(); ++li) row.push_back(r.accuracy(run, li, di));
    h.values.push_back(row);
  }
  return h;
}

eval::BarChart summary_chart(const eval::EvalResult& r) {
  const auto& runs = r.spec.runs;
  eval::BarChart c;
  c.title = std::string(eval::to_string(r.spec.task)) + ": accuracy by policy and budget";
  c.x_title = "budget (average KV tokens kept per head)";
  c.y_title = "accuracy (%)";
  auto index_of = [](std::vector<std::string>& v, const std::string& s) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == s) return i;
    }
    v.push_back(s);
    return v.size() - 1;
  };
  for (size_t i = 1; i < runs.size(); ++i) {
    index_of(c.series, runs[i].policy);
    index_of(c.groups, runs[i].budget);
  }
  c.values.assign(c.series.size(), std::vector<double>(c.groups.size(), std::nan("")));
  for (size_t i = 1; i < runs.size(); ++i) {
    c.values[index_of(c.series, runs[i].policy)][index_of(c.groups, runs[i].budget)] =
        r.accuracy(i);
  }
  c.reference = r.accuracy(0);
  c.reference_label = "full cache";
  return c;
}

// Writes the table, the JSON and the pictures (PNG too when a converter works here).
void write_outputs(const eval::EvalResult& r, const std::string& table, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string task = eval::to_string(r.spec.task);
  const auto path = [&](const std::string& name) { return (fs::path(dir) / name).string(); };
  svg::write_text_file(path(task + "_table.txt"), table);
  svg::write_text_file(path(task + "_results.json"), eval::to_json(r).dump(1) + "\n");

  std::vector<std::string> svgs;
  std::vector<eval::Heatmap> maps;
  for (size_t i = 0; i < r.spec.runs.size(); ++i) {
    maps.push_back(heatmap_of(r, i));
    auto alone = maps.back();
    alone.title = task + ", " + alone.title;
    svgs.push_back(path(task + "_heatmap_" + file_tag(r.spec.runs[i]) + ".svg"));
    svg::write_text_file(svgs.back(), eval::heatmap_svg(alone));
  }
  // The overview: one row per policy, its budgets left to right after the full-cache reference.
  // make_runs orders the runs policy by policy, every policy at the same budgets.
  const size_t budgets = summary_chart(r).groups.size();
  std::vector<eval::Heatmap> grid;
  for (size_t i = 1; i < maps.size(); ++i) {
    if ((i - 1) % budgets == 0) grid.push_back(maps.front());
    grid.push_back(maps[i]);
  }
  if (grid.empty()) grid.push_back(maps.front());
  svgs.push_back(path(task + "_heatmaps.svg"));
  svg::write_text_file(
      svgs.back(),
      eval::heatmap_grid_svg(grid, budgets + 1, task + ": accuracy by prompt length x depth"));
  if (r.spec.runs.size() > 1) {
    svgs.push_back(path(task + "_summary.svg"));
    svg::write_text_file(svgs.back(), eval::bar_chart_svg(summary_chart(r)));
  }

  const std::string conv = svg::find_png_converter();
  size_t pngs = 0;
  if (!conv.empty()) {
    for (const auto& svg : svgs) {
      pngs += svg::svg_to_png(conv, svg, fs::path(svg).replace_extension(".png").string());
    }
  }
  std::fprintf(stderr, "[eval] wrote %s_table.txt, %s_results.json and %zu SVG pictures to %s\n",
               task.c_str(), task.c_str(), svgs.size(), dir.c_str());
  if (conv.empty()) {
    std::fprintf(stderr,
                 "[eval] only SVG written: no working SVG-to-PNG converter (rsvg-convert or "
                 "ImageMagick) found\n");
  } else {
    std::fprintf(stderr, "[eval] %zu of %zu pictures converted to PNG with %s\n", pngs, svgs.size(),
                 conv.c_str());
  }
}

void print_progress(const eval::EvalSpec& spec, const eval::TrialRecord& rec, size_t done,
                    size_t total) {
  std::string marks, said = rec.runs.front().output;
  std::replace(said.begin(), said.end(), '\n', ' ');
  for (size_t i = 0; i < rec.runs.size(); ++i) {
    marks += " " + spec.runs[i].policy + "@" + spec.runs[i].budget +
             (rec.runs[i].correct ? ":ok" : ":miss");
  }
  std::fprintf(stderr,
               "[eval] %zu/%zu len %zu depth %g%% trial %zu: %zu tokens, key %s, build %.2f s, "
               "prefill %.2f s, total %.2f s |%s | full said: %s\n",
               done, total, spec.lengths[rec.length_index], spec.depths[rec.depth_index], rec.trial,
               rec.prompt_tokens, rec.answer.c_str(), rec.build_s, rec.prefill_s, rec.total_s,
               marks.c_str(), said.c_str());
}

int run_eval_command(const EvalOptions& o) {
  // The results are written at the end: an unwritable --out fails now, not after the run.
  if (is_job_root()) svg::prepare_output_dir(o.out);
  kernels::set_num_threads(o.threads);
  eval::EvalSpec spec;
  spec.task = o.task;
  spec.lengths = o.lengths;
  spec.depths = o.task == eval::Task::kPasskeyMulti ? eval::key_bands(o.keys) : o.depths;
  spec.trials = o.trials;
  spec.seed = o.seed;
  spec.max_tokens = o.max_tokens ? o.max_tokens : (o.task == eval::Task::kPasskey ? 12 : 20);
  spec.kv_dtype = o.compression.dtype();
  spec.haystack_files = o.haystack;
  spec.doors = eval::parse_door_names(o.doors);
  if (o.repeat_piece != 0 && o.repeat_piece < compression::kMinRepeatPiece) {
    throw std::invalid_argument("--repeat-piece must be 0 or at least " +
                                std::to_string(compression::kMinRepeatPiece) + " tokens (got " +
                                std::to_string(o.repeat_piece) + ")");
  }
  spec.repeat_piece = o.repeat_piece;
  spec.scores_dir = o.scores_dir;
  if (spec.task == eval::Task::kNiah && spec.haystack_files.empty()) {
    spec.haystack_files = eval::default_haystack_files();
  }
  spec.runs = eval_runs(o.compression, o.policies, o.budgets);

  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(runtime::resolve_model(o.model), job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  o.chat_template.apply(engine, /*renders_chats=*/true);  // every task's question is a chat
  std::fprintf(stderr,
               "[eval] %s: %zu prompts (%zu lengths x %zu depths x %zu trials), %zu runs per "
               "prompt, %zu threads\n",
               eval::to_string(spec.task), spec.lengths.size() * spec.depths.size() * spec.trials,
               spec.lengths.size(), spec.depths.size(), spec.trials, spec.runs.size(),
               size_t(kernels::num_threads()));
  const auto result = eval::run_eval(engine, spec, [&](const auto& rec, size_t done, size_t n) {
    print_progress(spec, rec, done, n);
  });
  const std::string summary = eval::format_summary(result);
  std::cout << summary << std::flush;
  write_outputs(result, summary + eval::format_cells(result), o.out);
  return 0;
}

struct ReportOptions {
  std::vector<std::string> files;
  std::string out = "eval-results";
};

// adakv eval report: one table and one set of pictures from results written by separate runs.
int run_report_command(const ReportOptions& o) {
  std::vector<eval::EvalResult> parts;
  for (const auto& path : o.files) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("cannot read eval results " + path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(path + " is not JSON: " + e.what());
    }
    try {
      parts.push_back(eval::from_json(j));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": " + e.what());
    }
  }
  const auto merged = eval::merge_results(parts);
  std::fprintf(stderr, "[eval] report: %zu files, %zu prompts, lengths", o.files.size(),
               merged.records.size());
  for (size_t len : merged.spec.lengths) std::fprintf(stderr, " %zu", len);
  std::fprintf(stderr, "\n");
  const std::string summary = eval::format_summary(merged);
  std::cout << summary << std::flush;
  write_outputs(merged, summary + eval::format_cells(merged), o.out);
  return 0;
}

void add_task(CLI::App* eval_app, eval::Task task, const char* help, Runner& selected) {
  auto o = std::make_shared<EvalOptions>();
  o->task = task;
  auto* sub = eval_app->add_subcommand(eval::to_string(task), help);
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  sub->add_option("--lengths", o->lengths, "Prompt lengths in tokens, chat template included")
      ->delimiter(',')
      ->capture_default_str();
  if (task == eval::Task::kPasskeyMulti) {
    sub->add_option("--keys", o->keys,
                    "Pass keys per document, each in its own depth band and asked in its own "
                    "question")
        ->check(CLI::Range(size_t{1}, eval::kMaxPasskeyDoors))
        ->capture_default_str();
    sub->add_option("--doors", o->doors,
                    "Door names: colors (red, blue, green, yellow, ...; three of them are also "
                    "filler words) or distinct (names found only in their needles)")
        ->check(CLI::IsMember({"colors", "distinct"}))
        ->capture_default_str();
    sub->add_option("--repeat-piece", o->repeat_piece,
                    "Reconstruct scoring: the most document tokens repeated after one "
                    "instruction, as serve's --kv-repeat-piece (0: the longest piece that fits "
                    "in the model's context)")
        ->capture_default_str();
    sub->add_option("--dump-scores", o->scores_dir,
                    "Folder for each document's recorded token scores and each policy's kept "
                    "tokens per head (<doc>.f32 and <doc>.json), for analysis");
  } else {
    sub->add_option("--depths", o->depths, "Needle depths in % of the haystack (0 = start)")
        ->delimiter(',')
        ->capture_default_str();
  }
  sub->add_option("--budgets", o->budgets,
                  "Budgets: ratios (0.1,0.2,0.5 or 20%) or tokens per head (64,128,256)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option(
         "--policies", o->policies,
         "Policies (full is always run as the reference): "
         "full,streaming,snapkv,pyramidkv,adakv,ada-pyramid; adakv:global or adakv:layer sets "
         "that policy's scope, adakv:output-aware or (passkey-multi) adakv:reconstruct its scoring")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--trials", o->trials, "Prompts per (length, depth) cell")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the keys, needles and haystack offsets")
      ->capture_default_str();
  sub->add_option(
      "--max-tokens", o->max_tokens,
      "Greedy tokens decoded per policy (default: passkey 12, niah and passkey-multi 20)");
  sub->add_option("--out", o->out, "Output folder for the table, JSON and pictures")
      ->capture_default_str();
  if (task == eval::Task::kNiah) {
    sub->add_option("--haystack", o->haystack,
                    "Prose files for the haystack (default: /usr/share/common-licenses texts)")
        ->delimiter(',');
  }
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  o->compression.reconstructs = task == eval::Task::kPasskeyMulti;
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  o->chat_template.add_to(sub);
  sub->callback([o, &selected] { selected = [o] { return run_eval_command(*o); }; });
}

}  // namespace

void add_eval(CLI::App& app, Runner& selected) {
  auto* sub =
      app.add_subcommand("eval", "Retrieval accuracy of the KV policies (tables, pictures)");
  sub->require_subcommand(1);
  add_task(sub, eval::Task::kPasskey, "Passkey retrieval: a 5-digit key hidden in filler text",
           selected);
  add_task(sub, eval::Task::kNiah, "Needle in a haystack: a 7-digit fact hidden in prose",
           selected);
  add_task(sub, eval::Task::kPasskeyMulti,
           "Query-agnostic passkey: one document with several keys, compressed once per policy "
           "without the question, each key asked against that cache",
           selected);
  auto report = std::make_shared<ReportOptions>();
  auto* rep = sub->add_subcommand(
      "report", "One table and picture set from *_results.json files of separate eval runs");
  rep->add_option("files", report->files, "Results files (eval's --out/<task>_results.json)")
      ->required()
      ->check(CLI::ExistingFile);
  rep->add_option("--out", report->out, "Output folder for the merged table, JSON and pictures")
      ->capture_default_str();
  rep->callback(
      [report, &selected] { selected = [report] { return run_report_command(*report); }; });
  add_eval_ppl(sub, selected);
}

}  // namespace adakv::cli
