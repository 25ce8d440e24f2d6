// Pipeline parallelism end to end: `adakv generate --pp N` as the ranks of real mpirun jobs
// against the same command on one rank, in the exact mode (float32 KV and decode activations):
// the same greedy tokens, the same budget vector (Ada-KV scope layer inside each stage, scope
// global across the stages), every rank agreeing on it, and per-rank KV bytes that sum to the
// total. Layouts: PP 2, PP 3 and TP 3 x PP 2 (6 ranks), on the default model (30 layers) and on a
// synthetic model of 7 layers, whose stages are uneven (4 + 3, 3 + 2 + 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_fixture.h"
#include "run_adakv.h"

namespace adakv::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kExactNumerics = " --kv-dtype f32 --decode-dots float --min-keep 0";

fs::path work_dir() {
  const auto dir = fs::temp_directory_path() / ("adakv-pp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string prompt_file(size_t bytes) {
  const auto path = work_dir() / ("prompt-" + std::to_string(bytes) + ".txt");
  std::string text = slurp("/usr/share/common-licenses/GPL-3");
  text.resize(std::min(text.size(), bytes));
  std::ofstream(path) << text;
  return path.string();
}

struct Layout {
  int ranks, pp;
};
constexpr Layout kLayouts[] = {{2, 2}, {3, 3}, {6, 2}};

json generate(const Layout& l, const std::string& args) {
  const std::string command = "generate " + args + " --pp " + std::to_string(l.pp);
  const auto r = l.ranks == 1 ? adakv(command) : adakv_mpi(l.ranks, command);
  if (r.rc != 0) {
    throw std::runtime_error(std::to_string(l.ranks) + " ranks, PP " + std::to_string(l.pp) +
                             " failed: " + r.err);
  }
  return json::parse(r.out);
}

size_t sum(const json& v) {
  size_t s = 0;
  for (const auto& x : v) s += x.get<size_t>();
  return s;
}

void expect_same(const json& one, const json& many, const Layout& l) {
  SCOPED_TRACE(std::to_string(l.ranks) + " ranks, PP " + std::to_string(l.pp));
  EXPECT_EQ(one["tokens"], many["tokens"]);
  EXPECT_EQ(one["kv"]["budgets"], many["kv"]["budgets"]);
  EXPECT_TRUE(many["kv"]["budgets_agree_across_ranks"].get<bool>());
  EXPECT_EQ(one["kv"]["kept_bytes"], many["kv"]["kept_bytes"]);
  EXPECT_EQ(many["kv"]["rank_kept_bytes"].size(), size_t(l.ranks));
  EXPECT_EQ(sum(many["kv"]["rank_kept_bytes"]), many["kv"]["kept_bytes"].get<size_t>());
  std::printf("[pp] %d ranks, PP %d: %zu tokens identical=%d, budgets identical=%d\n", l.ranks,
              l.pp, many["tokens"].size(), int(one["tokens"] == many["tokens"]),
              int(one["kv"]["budgets"] == many["kv"]["budgets"]));
}

void check_layouts(const std::string& model, const std::string& prompt, int tokens,
                   const std::string& policy) {
  SCOPED_TRACE(policy);
  const std::string args = "--model " + model + " --prompt-file " + prompt + " --max-tokens " +
                           std::to_string(tokens) + " --threads 1 --ignore-eos --json" +
                           kExactNumerics + " " + policy;
  const json one = generate({1, 1}, args);
  ASSERT_EQ(one["tokens"].size(), size_t(tokens));
  ASSERT_FALSE(one["kv"]["budgets"].empty());
  for (const Layout& l : kLayouts) expect_same(one, generate(l, args), l);
}

TEST(PipelineParallel, DefaultModelMatchesOneRank) {
  const std::string model = model_path();
  const auto prompt = prompt_file(1200);
  for (const char* policy : {"--policy adakv --budget 0.2 --scope layer",
                             "--policy adakv --budget 0.2 --scope global"}) {
    check_layouts(model, prompt, 12, policy);
  }
}

TEST(PipelineParallel, UnevenStagesOfASyntheticModel) {
  const auto model = (work_dir() / "syn7.gguf").string();
  const auto made = run_command(std::string(ADAKV_MAKE_TEST_MODEL) + " " + model +
                                " --layers 7 --heads 6 --kv-heads 3 --head-dim 16 --ffn 192");
  ASSERT_EQ(made.rc, 0) << made.err;
  const auto prompt = prompt_file(1500);
  for (const char* policy : {"--policy full", "--policy adakv --budget 0.2 --scope layer",
                             "--policy adakv --budget 0.2 --scope global",
                             "--policy adakv --budget 0.2 --scope layer --lookahead 4"}) {
    check_layouts(model, prompt, 32, policy);
  }
  // Scope global with look-ahead: stages alone (TP 1 per stage) equal one rank. Under TP the
  // look-ahead's queries differ from TP 1's in the last bits (the RowParallel sums), and so may
  // a budget; TP 3 x PP 2 is held to TP 3 instead.
  const std::string args = "--model " + model + " --prompt-file " + prompt +
                           " --max-tokens 16 --threads 1 --ignore-eos --json" + kExactNumerics +
                           " --policy adakv --budget 0.2 --scope global --lookahead 4";
  const json one = generate({1, 1}, args);
  expect_same(one, generate({2, 2}, args), {2, 2});
  expect_same(one, generate({3, 3}, args), {3, 3});
  expect_same(generate({3, 1}, args), generate({6, 2}, args), {6, 2});
}

// The 7-layer synthetic model of the batch tests (uneven stages under PP 2: 4 + 3 layers).
std::string batch_model() {
  const auto model = (work_dir() / "syn7-batch.gguf").string();
  if (fs::exists(model)) return model;
  const auto made = run_command(std::string(ADAKV_MAKE_TEST_MODEL) + " " + model +
                                " --layers 7 --heads 6 --kv-heads 3 --head-dim 16 --ffn 192");
  if (made.rc != 0) throw std::runtime_error(made.err);
  return model;
}

// `adakv batch` of `file` on one rank (a pool that holds everything) and under PP 2 (each
// stage's pool `pp_pool_mb`): every request gets one rank's tokens and budgets, and every
// stage's blocks come back. Returns the PP 2 run's stderr (its summary lines).
std::string batch_matches_one_rank(const fs::path& file, const std::string& pp_pool_mb,
                                   const std::string& flags = "") {
  const std::string args = "batch " + file.string() + " --model " + batch_model() +
                           " --min-keep 0 --prefill-chunk 128 --kv-dtype f32 --decode-dots float " +
                           flags;
  const auto one = adakv(args + " -q --kv-pool-mb 64");
  EXPECT_EQ(one.rc, 0) << one.err;
  const auto two = adakv_mpi(2, args + " --pp 2 --kv-pool-mb " + pp_pool_mb);
  EXPECT_EQ(two.rc, 0) << two.err;
  std::vector<json> a, b;
  for (const auto* text : {&one.out, &two.out}) {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
      (text == &one.out ? a : b).push_back(json::parse(line));
    }
  }
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_TRUE(b[i].contains("tokens")) << b[i];
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]);
    EXPECT_EQ(a[i]["kv"]["budgets"], b[i]["kv"]["budgets"]);
    EXPECT_TRUE(b[i].value("/kv/budgets_agree_across_ranks"_json_pointer, false));
  }
  // "pool free at the end: N of N blocks": every stage's blocks came back.
  const auto at = two.err.rfind("pool free at the end: ");
  EXPECT_NE(at, std::string::npos) << two.err;
  if (at == std::string::npos) return two.err;
  std::istringstream end(two.err.substr(at + 22));
  size_t free = 0, total = 0;
  std::string of;
  end >> free >> of >> total;
  EXPECT_EQ(free, total);
  EXPECT_GT(total, 0u);
  return two.err;
}

// The words of a long text, for prompts.
std::vector<std::string> license_words() {
  std::istringstream words(slurp("/usr/share/common-licenses/GPL-3"));
  std::vector<std::string> all;
  for (std::string w; words >> w;) all.push_back(w);
  return all;
}

// The serving loop under PP 2: `adakv batch` of five prompts of 700-1,800 tokens on the synthetic
// model, in chunks of 128 tokens (policy full) or layer by layer (Ada-KV scope layer), with a pool
// per stage that holds about two of them at once (so requests wait for blocks), gives every
// request the tokens and budgets of one rank, and every block comes back.
TEST(PipelineParallel, BatchWithChunkedAndLayeredPrefillMatchesOneRank) {
  const auto all = license_words();
  const auto file = work_dir() / "requests.jsonl";
  {
    std::ofstream out(file);
    for (size_t i = 0; i < 5; ++i) {
      std::string text;
      for (size_t w = 0; w < 120 + 50 * i; ++w) text += all[(i * 53 + w) % all.size()] + " ";
      out << json{{"prompt", text},
                  {"max_tokens", 12},
                  {"ignore_eos", true},
                  {"kv_policy", i % 3 ? "full" : "adakv"},
                  {"kv_budget", 0.2}}
                 .dump()
          << "\n";
    }
  }
  batch_matches_one_rank(file, "3");
}

// Compressed contexts under PP 2, scored by reconstruction in pieces of 100 tokens (each stage
// rolls its layers back between pieces): four questions after one 200-token context get one
// rank's tokens and budgets, and every block comes back.
TEST(PipelineParallel, ReconstructedContextsMatchOneRank) {
  const auto all = license_words();
  const auto file = work_dir() / "contexts.jsonl";
  {
    std::ofstream out(file);
    std::string context;
    for (size_t w = 0; w < 300; ++w) context += all[(17 + w) % all.size()] + " ";
    for (size_t i = 0; i < 4; ++i) {
      std::string question;
      for (size_t w = 0; w < 12; ++w) question += all[(900 + 31 * i + w) % all.size()] + " ";
      out << json{{"prompt", context + question},
                  {"max_tokens", 8},
                  {"ignore_eos", true},
                  {"kv_compress_context", true},
                  {"kv_context_tokens", 200},
                  {"kv_policy", "adakv"},
                  {"kv_budget", 0.2}}
                 .dump()
          << "\n";
    }
  }
  batch_matches_one_rank(file, "3", "--kv-repeat-piece 100");
}

// Preemption under PP 2, with plans in flight on both stages: four requests whose prompts fit
// the pool two at a time but whose generations do not, so the newest sequences not in flight
// are preempted, prefilled again and replayed, and still give one rank's tokens.
TEST(PipelineParallel, PreemptedRequestsGiveTheTokensOfOneRank) {
  const auto all = license_words();
  const auto file = work_dir() / "preempted.jsonl";
  {
    std::ofstream out(file);
    for (size_t i = 0; i < 4; ++i) {
      std::string text;
      for (size_t w = 0; w < 20; ++w) text += all[(i * 71 + w) % all.size()] + " ";
      out << json{{"prompt", text},
                  {"max_tokens", 64},
                  {"ignore_eos", true},
                  {"kv_policy", i % 2 ? "full" : "adakv"},
                  {"kv_budget", 0.5}}
                 .dump()
          << "\n";
    }
  }
  const std::string err = batch_matches_one_rank(file, "0.5");
  // "[adakv] 4 requests, ...; N preemptions; ..."
  const auto at = err.find(" preemptions;");
  ASSERT_NE(at, std::string::npos) << err;
  const auto from = err.rfind(' ', at - 1);
  EXPECT_GT(std::stoul(err.substr(from + 1, at - from - 1)), 0u) << err;
}

// The policy-fork commands under PP 2 (a recording prefill forked into each policy, run as
// steps of the engine): profile's budget table, generate --compare's answers and KV columns,
// and eval ppl's perplexities are those of one rank, on the uneven synthetic model.
TEST(PipelineParallel, ProfileCompareAndEvalPplMatchOneRank) {
  const std::string model = batch_model();
  const auto prompt = prompt_file(1500);
  std::string tables[2], compares[2];
  json ppl[2];
  for (int i = 0; i < 2; ++i) {
    const std::string pp = i == 0 ? "" : " --pp 2";
    const int np = i == 0 ? 1 : 2;
    const auto out = work_dir() / ("fork-" + std::to_string(np));
    const auto p =
        adakv_mpi(np, "profile --model " + model + " --prompt-file " + prompt +
                          " --threads 1 --out " + (out / "profile").string() + pp + kExactNumerics);
    ASSERT_EQ(p.rc, 0) << p.err;
    tables[i] = json::parse(slurp(out / "profile" / "profile.json"))["budgets"].dump();
    const auto c = adakv_mpi(np, "generate --model " + model + " --prompt-file " + prompt +
                                     " --threads 1 --max-tokens 8 --compare full,snapkv" + pp +
                                     kExactNumerics);
    ASSERT_EQ(c.rc, 0) << c.err;
    // The answers and KV columns; the timing columns differ from run to run.
    for (const char* policy : {"adakv ", "full ", "snapkv "}) {
      const size_t at = c.out.find(std::string("\n") + policy);
      ASSERT_NE(at, std::string::npos) << c.out;
      const std::string line = c.out.substr(at + 1, c.out.find('\n', at + 1) - at - 1);
      compares[i] +=
          line.substr(0, line.find('|', line.find('|') + 1)) + line.substr(line.rfind('|')) + "\n";
    }
    const auto e = adakv_mpi(np, "eval ppl --model " + model +
                                     " --lengths 300 --trials 1 --continuation 16 --budgets 0.2"
                                     " --policies snapkv,adakv --threads 1 --out " +
                                     (out / "ppl").string() + pp + kExactNumerics);
    ASSERT_EQ(e.rc, 0) << e.err;
    ppl[i] = json::parse(slurp(out / "ppl" / "ppl_results.json"))["runs"];
  }
  EXPECT_EQ(tables[0], tables[1]);
  EXPECT_EQ(compares[0], compares[1]);
  ASSERT_EQ(ppl[0].size(), 3u);
  ASSERT_EQ(ppl[1].size(), ppl[0].size());
  for (size_t p = 0; p < ppl[0].size(); ++p) {
    SCOPED_TRACE(ppl[0][p]["policy"].get<std::string>());
    EXPECT_NEAR(ppl[1][p]["perplexity"].get<double>() / ppl[0][p]["perplexity"].get<double>(), 1.0,
                1e-6);
    EXPECT_EQ(ppl[1][p]["kv_kept"], ppl[0][p]["kv_kept"]);
  }
  std::printf("[pp] compare under one rank and PP 2:\n%s", compares[1].c_str());
}

TEST(PipelineParallel, RefusesWhatCannotSplit) {
  const std::string model = model_path();
  // 4 ranks do not split into 3 stages; generate runs one engine, not data-parallel replicas.
  const auto uneven =
      adakv_mpi(4, "generate --model " + model + " --prompt hi --max-tokens 1 --pp 3");
  EXPECT_NE(uneven.rc, 0);
  EXPECT_NE(uneven.err.find("pp x dp = 3 must divide the number of ranks"), std::string::npos)
      << uneven.err;
  const auto dp = adakv("generate --model " + model + " --prompt hi --max-tokens 1 --dp 2");
  EXPECT_EQ(dp.rc, 1);
  EXPECT_NE(dp.err.find("--dp 2"), std::string::npos) << dp.err;
  EXPECT_NE(dp.err.find("data-parallel replicas"), std::string::npos) << dp.err;
}

}  // namespace
}  // namespace adakv::test
