// `adakv batch` as a user runs it: JSONL in, JSONL out in input order, bad lines answered in
// place; the same results as the ranks of an mpirun job at TP 3 as on one rank, with the same
// budget vector on every rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "model_fixture.h"
#include "run_adakv.h"

namespace adakv::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path batch_file(const std::string& name, const std::vector<json>& lines) {
  const auto path = fs::temp_directory_path() /
                    ("adakv-batch-" + std::to_string(::getpid()) + "-" + name + ".jsonl");
  std::ofstream out(path);
  for (const auto& l : lines) out << l.dump() << "\n";
  return path;
}

std::vector<json> parse_lines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) lines.push_back(json::parse(line));
  return lines;
}

// `adakv batch` with `args` on one rank and on three: each run's result lines, in order.
std::pair<std::vector<json>, std::vector<json>> one_and_three_ranks(const std::string& args) {
  const auto one = adakv_mpi(1, args);
  EXPECT_EQ(one.rc, 0) << one.err;
  const auto three = adakv_mpi(3, args);
  EXPECT_EQ(three.rc, 0) << three.err;
  return {parse_lines(one.out), parse_lines(three.out)};
}

// 16 requests: prose of 40 to 490 words, every policy, chat and plain prompts.
std::vector<json> sixteen_requests() {
  std::istringstream words(slurp("/usr/share/common-licenses/GPL-3"));
  std::vector<std::string> all;
  for (std::string w; words >> w;) all.push_back(w);
  const char* policies[] = {"full", "adakv", "snapkv", "pyramidkv", "streaming", "ada-pyramid"};
  std::vector<json> lines;
  for (size_t i = 0; i < 16; ++i) {
    std::string text;
    for (size_t w = 0; w < 40 + 30 * i; ++w) text += all[(i * 131 + w) % all.size()] + " ";
    json r = {{"max_tokens", 8}, {"kv_policy", policies[i % 6]}, {"kv_budget", 0.3}};
    if (i % 2) {
      r["messages"] = json::array({{{"role", "user"}, {"content", text + "\nSummarise."}}});
    } else {
      r["prompt"] = text;
    }
    lines.push_back(r);
  }
  return lines;
}

TEST(BatchCli, Tp3GivesTheResultsOfOneRank) {
  const auto file = batch_file("tp", sixteen_requests());
  // A small floor and short chunks: compression and chunked prefill both take part. f32 KV and
  // float decode dots: three ranks sum the RowParallel outputs in another order than one, and
  // bf16 rounding of K and V, or int16 rounding of the decode activations, can turn those
  // last-bit differences into a different kept token at a budget edge or a near-tied token.
  const std::string args =
      "batch " + file.string() +
      " -q --min-keep 64 --prefill-chunk 256 --kv-pool-mb 256 --kv-dtype f32 --decode-dots float"
      " --model " +
      model_path();
  const auto [a, b] = one_and_three_ranks(args);
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u);
  size_t compressed = 0;
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(a[i]["index"], i);
    EXPECT_EQ(b[i]["index"], i);
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]) << "request " << i;
    EXPECT_EQ(a[i]["kv"]["budgets"], b[i]["kv"]["budgets"]) << "request " << i;
    EXPECT_TRUE(b[i]["kv"]["budgets_agree_across_ranks"].get<bool>()) << "request " << i;
    EXPECT_EQ(b[i]["tp"]["size"], 3);
    EXPECT_EQ(a[i]["tokens"].size(), 8u);
    compressed += a[i]["kv"]["after_prefill"]["kept_bytes"].get<double>() <
                  a[i]["kv"]["after_prefill"]["full_bytes"].get<double>();
  }
  EXPECT_GE(compressed, 8u);
}

// Compressed contexts scored by reconstruction, repeated in pieces of 200 tokens (the cache rolls
// back between them): four questions about one document under TP 3 get one rank's budgets and
// tokens; the pieces' tokens are reported as look-ahead.
TEST(BatchCli, ReconstructedContextsGetOneRanksBudgetsAtTp3) {
  std::istringstream words(slurp("/usr/share/common-licenses/GPL-3"));
  std::string doc;  // about 600 tokens
  for (std::string w; doc.size() < 2800 && words >> w;) doc += w + " ";
  std::vector<json> lines;
  for (const char* q : {"Who may copy it?", "What is a covered work?", "Is there a warranty?",
                        "What must a conveyor give?"}) {
    lines.push_back({{"max_tokens", 6},
                     {"kv_compress_context", true},
                     {"messages", json::array({{{"role", "system"}, {"content", doc}},
                                               {{"role", "user"}, {"content", q}}})}});
  }
  const auto file = batch_file("reconstruct", lines);
  const std::string args =
      "batch " + file.string() +
      " -q --min-keep 64 --prefill-chunk 256 --kv-repeat-piece 200 --kv-pool-mb 256"
      " --kv-dtype f32 --decode-dots float --model " +
      model_path();
  const auto [a, b] = one_and_three_ranks(args);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]);
    EXPECT_EQ(a[i]["kv"]["budgets"], b[i]["kv"]["budgets"]);
    EXPECT_TRUE(b[i]["kv"]["budgets_agree_across_ranks"].get<bool>());
    EXPECT_GT(a[i]["timing"]["lookahead_tokens"].get<size_t>(), 550u);  // 3 or more pieces
    EXPECT_LT(a[i]["kv"]["after_prefill"]["kept_bytes"].get<double>(),
              0.5 * a[i]["kv"]["after_prefill"]["full_bytes"].get<double>());
  }
}

TEST(BatchCli, BadLinesAreAnsweredInPlaceAndTheRestRuns) {
  const auto file = fs::temp_directory_path() / ("adakv-batch-bad-" + std::to_string(::getpid()));
  std::ofstream(file) << R"({"prompt": "The capital of France is", "max_tokens": 4})"
                      << "\n"
                      << "not json\n"
                      << R"({"prompt": "x", "temperature": -1})"
                      << "\n"
                      << "\n"
                      << R"({"messages": []})"
                      << "\n"
                      << R"({"prompt": "Hello", "max_tokens": 3, "stop": ["never"]})"
                      << "\n";
  const auto r = adakv("batch " + file.string() + " -q --model " + model_path());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = parse_lines(r.out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["tokens"].size(), 4u);
  EXPECT_TRUE(lines[1].contains("error"));
  EXPECT_EQ(lines[2]["error"]["param"], "temperature");
  EXPECT_EQ(lines[3]["error"]["param"], "messages");
  EXPECT_EQ(lines[4]["finish_reason"], "length");
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["index"], i);
  // The default model's preset looks ahead in generate; a batch leaves it off.
  const auto& c = lines[0]["compression"];
  if (c["source"].get<std::string>().find("smollm2-135m.yaml") != std::string::npos) {
    EXPECT_EQ(c["lookahead"], 0) << c;
    EXPECT_NE(c["source"].get<std::string>().find("look-ahead off when serving"), std::string::npos)
        << c;
  }
}

TEST(BatchCli, AMissingFileIsNamed) {
  const auto r = adakv("batch /nonexistent/requests.jsonl -q --model " + model_path());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent/requests.jsonl"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace adakv::test
