// adakv profile: for one prompt, the per-layer x per-head budgets, retained attention mass,
// attention entropy and head roles, as a table (or JSON with --json), DIR/profile.json and a
// heatmap picture DIR/head_budgets.svg (+ .png when rsvg-convert or ImageMagick is installed).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/chat_template_flag.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "launcher/text_file.h"
#include "runtime/model_registry.h"
#include "runtime/profile/prompt_profile.h"
#include "runtime/profile/svg_heatmap.h"
#include "runtime/svg_output.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

namespace fs = std::filesystem;

struct ProfileOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string out = ".";
  bool chat = false;
  bool json = false;
  int threads = 0;
  CompressionFlags compression;
  ParallelFlags parallel;
  ChatTemplateFlag chat_template;
};

std::string budget_text(const compression::CompressionConfig& c, size_t n) {
  const size_t b = c.budget_per_head(n);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%zu tokens/head (%.1f%% of the prompt)", b, 100.0 * b / n);
  return buf;
}

// The role rule in words, one line per role.
std::vector<std::string> role_rule_lines(const profile::RoleThresholds& t) {
  char local[160], retrieval[160], content[160];
  std::snprintf(content, sizeof content,
                "Roles read the content attention: the prefix past its first %zu (sink) tokens.",
                t.sink_tokens);
  std::snprintf(local, sizeof local,
                "L local: >= %.0f%% of the content attention on the last %.0f%% of the prefix.",
                100 * t.local_min_locality, 100 * t.recent_fraction);
  std::snprintf(retrieval, sizeof retrieval,
                "R retrieval: not local, >= %.0f%% on the top %.0f%% of the earlier positions. "
                "M mixed: the rest.",
                100 * t.retrieval_min_focus, 100 * t.focus_fraction);
  return {content, local, retrieval};
}

profile::HeatmapFigure figure(const profile::HeadProfile& p, const std::string& model_name) {
  const auto& c = p.policy;
  const size_t n = p.prompt_tokens, L = p.layers(), H = p.kv_heads();
  profile::HeatmapPanel budgets{"Budget (kept tokens), role", {}, {}, 0};
  profile::HeatmapPanel mass{"Retained attention mass", {}, {}, 2};
  double mean_mass = 0;
  for (const auto& layer : p.heads) {
    budgets.values.emplace_back();
    budgets.cell_text.emplace_back();
    mass.values.emplace_back();
    mass.cell_text.emplace_back();
    for (const auto& h : layer) {
      budgets.values.back().push_back(static_cast<double>(h.budget));
      budgets.cell_text.back().push_back(std::to_string(h.budget) + " " +
                                         profile::role_letter(h.role));
      mass.values.back().push_back(h.retained_mass);
      char buf[16];
      std::snprintf(buf, sizeof buf, "%.2f", h.retained_mass);
      mass.cell_text.back().push_back(buf);
      mean_mass += h.retained_mass;
    }
  }
  mean_mass /= static_cast<double>(std::max<size_t>(L * H, 1));
  char summary[160];
  std::snprintf(summary, sizeof summary,
                "%zu tokens kept of %zu (%zu layers x %zu KV heads); mean retained mass %.3f",
                p.total_budget(), n * L * H, L, H, mean_mass);
  profile::HeatmapFigure f;
  f.title = "Ada-KV head profile: " + model_name;
  f.notes = {"prompt " + std::to_string(n) + " tokens (" + std::to_string(n - c.window) +
                 " scored + window " + std::to_string(c.window) + "); policy " +
                 compression::to_string(c.policy) + ", " + budget_text(c, n) + ", scope " +
                 compression::to_string(c.scope),
             summary};
  f.footer = role_rule_lines(p.thresholds);
  f.footer.push_back(
      "Retained mass: share of a head's window scores over the prefix on the tokens it keeps.");
  f.panels = {std::move(budgets), std::move(mass)};
  return f;
}

// One row per layer; per head: budget, retained mass, sink share, role.
void print_table(const profile::HeadProfile& p) {
  const size_t H = p.kv_heads();
  std::printf("%5s", "");
  for (size_t h = 0; h < H; ++h) std::printf(" | %-28s", ("head " + std::to_string(h)).c_str());
  std::printf("\n%5s", "layer");
  for (size_t h = 0; h < H; ++h)
    std::printf(" | %6s %6s %4s %-9s", "budget", "mass", "sink", "role");
  std::printf("\n");
  for (size_t l = 0; l < p.layers(); ++l) {
    std::printf("%5zu", l);
    for (const auto& s : p.heads[l]) {
      std::printf(" | %6zu %6.3f %3.0f%% %-9s", s.budget, s.retained_mass, 100 * s.sink_mass,
                  profile::to_string(s.role));
    }
    std::printf("\n");
  }
}

int run_profile(const ProfileOptions& o) {
  // The files are written at the end: an unwritable --out fails now, not after the prefill.
  if (is_job_root()) svg::prepare_output_dir(o.out);
  kernels::set_num_threads(o.threads);
  const std::string text = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
  const std::string model_path = runtime::resolve_model(o.model);
  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(model_path, job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  o.chat_template.apply(engine, o.chat);

  profile::ProfileRequest req;
  req.prompt = engine.encode_prompt(text, o.chat);
  req.policy = o.compression.config();
  req.kv_dtype = o.compression.dtype();
  const auto p = profile::profile_prompt(engine, req);

  const fs::path json_path = fs::path(o.out) / "profile.json";
  const fs::path svg_path = fs::path(o.out) / "head_budgets.svg";
  const fs::path png_path = fs::path(o.out) / "head_budgets.png";
  const std::string model_name = fs::path(model_path).filename().string();
  svg::write_text_file(svg_path.string(), profile::heatmap_svg(figure(p, model_name)));
  const std::string converter = svg::find_png_converter();
  const bool png =
      !converter.empty() && svg::svg_to_png(converter, svg_path.string(), png_path.string());

  auto j = profile::to_json(p);
  j["model"] = model_name;
  j["files"] = {{"json", json_path.string()},
                {"svg", svg_path.string()},
                {"png", png ? nlohmann::json(png_path.string()) : nlohmann::json(nullptr)}};
  svg::write_text_file(json_path.string(), j.dump(1) + "\n");

  if (o.json) {
    std::cout << j.dump() << std::endl;
  } else {
    print_table(p);
    const auto& sum = j["summary"];
    std::printf(
        "\nprompt %zu tokens, policy %s, %s, scope %s; prefill %.2f s\n"
        "kept %zu tokens in all (mean %.1f per head); mean retained mass %.3f for a mean kept "
        "prefix fraction of %.3f\n"
        "roles: %d retrieval, %d local, %d mixed\n"
        "mass: share of a head's prefix scores on the tokens it keeps; sink: share on the first "
        "%zu tokens\n",
        p.prompt_tokens, compression::to_string(p.policy.policy),
        budget_text(p.policy, p.prompt_tokens).c_str(), compression::to_string(p.policy.scope),
        p.prefill_s, p.total_budget(), sum["mean_budget"].get<double>(),
        sum["mean_retained_mass"].get<double>(), sum["mean_kept_fraction"].get<double>(),
        sum["roles"]["retrieval"].get<int>(), sum["roles"]["local"].get<int>(),
        sum["roles"]["mixed"].get<int>(), p.thresholds.sink_tokens);
    for (const auto& line : role_rule_lines(p.thresholds)) std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[adakv] wrote %s, %s", json_path.c_str(), svg_path.c_str());
  if (png) {
    std::fprintf(stderr, ", %s\n", png_path.c_str());
  } else {
    std::fprintf(stderr,
                 "; no PNG: neither rsvg-convert (librsvg2-bin) nor ImageMagick could convert "
                 "the SVG\n");
  }
  return 0;
}

}  // namespace

void add_profile(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<ProfileOptions>();
  auto* sub = app.add_subcommand(
      "profile", "Per-head budgets, retained attention mass, entropy and head roles of a prompt");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  auto* p = sub->add_option("--prompt", o->prompt, "Prompt text");
  auto* pf = sub->add_option("--prompt-file", o->prompt_file, "Read the prompt from a file");
  p->excludes(pf);
  sub->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  sub->add_flag("--json", o->json, "Print the profile as one JSON object instead of a table");
  sub->add_option("--out", o->out,
                  "Directory for profile.json and head_budgets.svg/.png (default: .)");
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  o->chat_template.add_to(sub);
  sub->callback([o, p, pf, &selected] {
    if (p->count() == 0 && pf->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-file");
    }
    selected = [o] { return run_profile(*o); };
  });
}

}  // namespace adakv::cli
