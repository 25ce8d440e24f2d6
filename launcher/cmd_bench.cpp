// adakv bench: prefill and decode tokens/s of the default model at several prompt lengths,
// side by side with llama.cpp (llama-cpp-python on the same file, ids and threads) in one run.
// Each cell is the median of --repeats runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/job.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"

#ifndef ADAKV_SOURCE_DIR
#define ADAKV_SOURCE_DIR "."
#endif

namespace adakv::cli {
namespace {

struct BenchOptions {
  std::string model;
  std::vector<size_t> lengths = {512, 2048, 8000};
  size_t decode_tokens = 32;
  int repeats = 3;
  int threads = 0;
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  std::string peer = "llama.cpp";
  std::string peer_script = std::string(ADAKV_SOURCE_DIR) + "/tests/tools/bench_llamacpp.py";
  std::string python = "python3";
  CompressionFlags compression;  // the policy compared with the full cache
};

struct Speeds {
  std::vector<double> prefill, decode;  // tokens/s per repeat
};

// One generation under a policy, as the engine runs it.
struct PolicyRun {
  double prefill_s, decode_tps, overhead_s, attention_s_per_token;
  size_t full_bytes, kept_bytes;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A prompt of exactly `n` tokens: the text repeated as often as needed.
std::vector<int32_t> prompt_ids(runtime::Engine& engine, const std::string& path, size_t n) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read benchmark text " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto once = engine.tokenizer().encode(ss.str());
  if (once.empty()) throw std::runtime_error("benchmark text " + path + " is empty");
  std::vector<int32_t> ids;
  while (ids.size() < n) ids.insert(ids.end(), once.begin(), once.end());
  ids.resize(n);
  return ids;
}

runtime::GenerateResult run_engine(runtime::Engine& engine, const std::vector<int32_t>& ids,
                                   size_t length, const compression::CompressionConfig& policy,
                                   const BenchOptions& o) {
  runtime::GenerateRequest req;
  req.prompt.assign(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(length));
  req.max_tokens = o.decode_tokens + 1;  // the first token comes from the prefill's logits
  req.stop_at_eos = false;
  req.compression = policy;
  req.kv_dtype = o.compression.dtype();
  return engine.generate(req);
}

Speeds measure_adakv(runtime::Engine& engine, const std::vector<int32_t>& ids, size_t length,
                     const BenchOptions& o) {
  compression::CompressionConfig full;
  full.policy = compression::Policy::kFull;
  Speeds s;
  for (int r = 0; r < o.repeats; ++r) {
    const auto g = run_engine(engine, ids, length, full, o);
    s.prefill.push_back(length / g.prefill_s);
    s.decode.push_back(o.decode_tokens / g.decode_s);
  }
  return s;
}

PolicyRun measure_policy(runtime::Engine& engine, const std::vector<int32_t>& ids, size_t length,
                         const compression::CompressionConfig& policy, const BenchOptions& o) {
  const auto g = run_engine(engine, ids, length, policy, o);
  const auto& c = g.compression;
  return {g.prefill_s,
          o.decode_tokens / g.decode_s,
          c.score_s + c.allocate_s + c.compact_s + c.lookahead_s,
          c.decode_attention_s / o.decode_tokens,
          g.kv_full_after_prefill_bytes,
          g.kv_after_prefill_bytes};
}

// Read bandwidth of this machine in bytes/s: the best of a few vectorised parallel sums over
// 512 MiB (far larger than any cache).
double read_bandwidth() {
  std::vector<float> buf(size_t{128} << 20, 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < buf.size(); ++i) sum += buf[i];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + sum;
    best = std::max(best, buf.size() * sizeof(float) / s);
  }
  return best;
}

// Runs the peer script; returns speeds per length, or an explanation in `why` when unavailable.
std::map<size_t, Speeds> measure_llamacpp(const std::string& model_path,
                                          const std::vector<int32_t>& ids, const BenchOptions& o,
                                          std::string& why) {
  std::map<size_t, Speeds> out;
  if (!std::filesystem::exists(o.peer_script)) {
    why = "peer script not found: " + o.peer_script;
    return out;
  }
  const auto ids_path = std::filesystem::temp_directory_path() /
                        ("adakv-bench-ids-" + std::to_string(::getpid()) + ".bin");
  {
    std::ofstream f(ids_path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  }
  std::string lengths;
  for (size_t l : o.lengths) lengths += (lengths.empty() ? "" : ",") + std::to_string(l);
  const std::string cmd = o.python + " '" + o.peer_script + "' --model '" + model_path +
                          "' --ids '" + ids_path.string() + "' --lengths " + lengths +
                          " --decode-tokens " + std::to_string(o.decode_tokens) + " --repeats " +
                          std::to_string(o.repeats) + " --threads " +
                          std::to_string(kernels::num_threads());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    why = "cannot start " + o.python;
    return out;
  }
  char line[65536];
  while (std::fgets(line, sizeof line, pipe)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    if (j.contains("error")) why = j["error"].get<std::string>();
    if (j.contains("length")) {
      auto& s = out[j["length"].get<size_t>()];
      s.prefill = j["prefill_tps"].get<std::vector<double>>();
      s.decode = j["decode_tps"].get<std::vector<double>>();
    }
  }
  const int rc = ::pclose(pipe);
  std::filesystem::remove(ids_path);
  if (out.empty() && why.empty()) why = "peer exited with status " + std::to_string(rc);
  return out;
}

int run_bench(const BenchOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string path = runtime::resolve_model(o.model);
  runtime::Engine engine(path, tp_group());
  if (!engine.is_root()) return engine.follow();
  const auto& cfg = engine.model().config();
  const size_t longest = *std::max_element(o.lengths.begin(), o.lengths.end());
  if (longest + o.decode_tokens > cfg.context_length) {
    throw std::invalid_argument(
        "prompt length " + std::to_string(longest) + " + " + std::to_string(o.decode_tokens) +
        " decode tokens exceed the model's context of " + std::to_string(cfg.context_length));
  }
  const auto ids = prompt_ids(engine, o.text_file, longest);
  std::printf("adakv bench: %s, %d threads, %zu decode tokens after each prefill\n", path.c_str(),
              kernels::num_threads(), o.decode_tokens);

  std::map<size_t, Speeds> ours;
  for (size_t l : o.lengths) {
    ours[l] = measure_adakv(engine, ids, l, o);
    std::fprintf(stderr, "[bench] adakv %zu tokens done\n", l);
  }
  std::string why = "disabled with --peer none";
  std::map<size_t, Speeds> peer;
  if (o.peer == "llama.cpp") {
    why.clear();
    peer = measure_llamacpp(path, ids, o, why);
  }

  // Decode reads every weight and the whole KV cache once per token: its speed limit is the
  // machine's read bandwidth over those bytes (adakv holds weights as float32 for now).
  const double bandwidth = read_bandwidth();
  const double weight_bytes = static_cast<double>(engine.model().weights().bytes());
  std::printf("read bandwidth %.1f GB/s; weights %.0f MiB (float32)\n", bandwidth / 1e9,
              weight_bytes / 1048576.0);

  auto cell = [](bool have, double v, int precision) {
    char buf[32] = "-";
    if (have) std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    return std::string(buf);
  };
  std::printf("\n%7s | %11s %11s %6s | %11s %11s %6s %10s %7s | %8s\n", "prompt", "adakv pf",
              "llama.cpp", "ratio", "adakv dec", "llama.cpp", "ratio", "bw limit", "of lim",
              "KV MiB");
  for (size_t l : o.lengths) {
    const double ap = median(ours[l].prefill), ad = median(ours[l].decode);
    const bool have = peer.count(l) > 0;
    const double lp = have ? median(peer[l].prefill) : 0, ld = have ? median(peer[l].decode) : 0;
    const double kv_bytes = static_cast<double>((l + o.decode_tokens) * cfg.kv_bytes_per_token());
    const double limit = bandwidth / (weight_bytes + kv_bytes);
    std::printf("%7zu | %11.1f %11s %6s | %11.2f %11s %6s %10.2f %7.2f | %8.1f\n", l, ap,
                cell(have, lp, 1).c_str(), cell(have, ap / lp, 2).c_str(), ad,
                cell(have, ld, 2).c_str(), cell(have, ad / ld, 2).c_str(), limit, ad / limit,
                kv_bytes / 1048576.0);
  }
  if (peer.empty()) std::printf("(llama.cpp columns empty: %s)\n", why.c_str());
  std::printf(
      "tokens/s, median of %d runs; ratio = adakv / llama.cpp (above 1: adakv faster);\n"
      "bw limit = decode tokens/s if every weight and KV byte is read once at the read "
      "bandwidth; of lim = adakv decode / bw limit\n",
      o.repeats);

  // The compression policy next to the full cache, one run each per length.
  const auto policy = o.compression.config();
  compression::CompressionConfig full;
  full.policy = compression::Policy::kFull;
  std::printf("\npolicy %s, budget %s, scope %s: cost of compressing, and what it buys\n",
              compression::to_string(policy.policy),
              o.compression.budget.empty() ? "0.2" : o.compression.budget.c_str(),
              compression::to_string(policy.scope));
  std::printf("%7s | %9s %9s %7s | %9s %9s %6s | %9s %9s %6s | %8s %8s %6s\n", "prompt",
              "prefill s", "compr. s", "share", "full t/s", "policy", "ratio", "full attn",
              "policy", "ratio", "full MiB", "kept MiB", "kept");
  for (size_t l : o.lengths) {
    const auto f = measure_policy(engine, ids, l, full, o);
    const auto p = measure_policy(engine, ids, l, policy, o);
    std::printf(
        "%7zu | %9.2f %9.3f %6.2f%% | %9.2f %9.2f %6.2f | %7.2fms %7.2fms %6.2f | %8.1f %8.1f "
        "%5.1f%%\n",
        l, p.prefill_s, p.overhead_s, 100 * p.overhead_s / p.prefill_s, f.decode_tps, p.decode_tps,
        p.decode_tps / f.decode_tps, 1e3 * f.attention_s_per_token, 1e3 * p.attention_s_per_token,
        p.attention_s_per_token / f.attention_s_per_token, f.kept_bytes / 1048576.0,
        p.kept_bytes / 1048576.0, 100.0 * p.kept_bytes / f.kept_bytes);
  }
  std::printf(
      "compr. s = scoring + allocation + compaction (+ the look-ahead tokens' decode steps) "
      "inside the prefill;\nattn = decode attention per token; kept = KV bytes held after prefill, "
      "block rounding "
      "included\n");
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench", "Prefill/decode tokens per second, next to llama.cpp");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  sub->add_option("--lengths", o->lengths, "Prompt lengths in tokens")->delimiter(',');
  sub->add_option("--decode-tokens", o->decode_tokens, "Tokens decoded after each prefill")
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  sub->add_option("--repeats", o->repeats, "Runs per cell (the median is printed)")
      ->check(CLI::Range(1, 100));
  sub->add_option("--threads", o->threads,
                  "CPU threads for both engines (default: OMP_NUM_THREADS, else all cores)");
  sub->add_option("--text", o->text_file, "Text the prompts are cut from");
  sub->add_option("--peer", o->peer, "Peer engine: llama.cpp or none")
      ->check(CLI::IsMember({"llama.cpp", "none"}));
  sub->add_option("--peer-script", o->peer_script, "The llama.cpp peer script");
  sub->add_option("--python", o->python, "Python interpreter with llama-cpp-python");
  o->compression.add_to(sub);
  add_bench_batch(sub, selected);
  // `bench batch` sets its own runner; plain `bench` runs this one.
  sub->callback([o, sub, &selected] {
    if (sub->get_subcommands().empty()) selected = [o] { return run_bench(*o); };
  });
}

}  // namespace adakv::cli
