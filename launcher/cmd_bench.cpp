// adakv bench: prefill and decode tokens/s of the default model at several prompt lengths and
// thread counts, and batched decode of many sequences through the step-level engine, side by side
// with llama.cpp in one run: llama-cpp-python on the same file, token ids and threads for the
// single sequence, llama.cpp's own llama-batched-bench for the batch. Each cell is the median of
// --repeats runs; each decode figure is also set against the machine's memory-bandwidth limit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"
#include "runtime/worker.h"

#ifndef ADAKV_SOURCE_DIR
#define ADAKV_SOURCE_DIR "."
#endif

namespace adakv::cli {
namespace {

// Tokens each batched sequence may sample beyond the timed steps: those sampled while other
// prompts are still being prefilled, before every sequence decodes in the same step.
constexpr size_t kBatchSlack = 64;

struct BenchOptions {
  std::string model;
  std::vector<size_t> lengths = {512, 2048, 8000};
  size_t decode_tokens = 32;
  int repeats = 3;
  std::vector<int> threads;  // empty: 1 and the default count (OMP_NUM_THREADS, else all cores)
  size_t batch_seqs = 16;    // 0 skips the batched table
  size_t batch_prompt = 1024;
  size_t batch_decode_tokens = 32;
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  std::string peer = "llama.cpp";
  std::string peer_script = std::string(ADAKV_SOURCE_DIR) + "/tests/tools/bench_llamacpp.py";
  std::string batched_script =
      std::string(ADAKV_SOURCE_DIR) + "/tests/tools/bench_llama_batched.py";
  std::string batched_bin;  // empty: the script looks in $ADAKV_HOME/llama.cpp/build/bin
  std::string python = "python3";
  CompressionFlags compression;  // the policy compared with the full cache; its KV dtype is used
  ParallelFlags parallel;
};

struct Speeds {
  std::vector<double> prefill, decode;  // tokens/s per repeat
};

// Results keyed by (threads, prompt length); the batched table uses length 0.
using Results = std::map<std::pair<int, size_t>, Speeds>;

// A peer's results, or why there are none.
struct PeerResults {
  Results speeds;
  std::string about;  // what ran (version, binary), as the peer script reports it
  std::string why;    // non-empty when the peer gave nothing
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

template <typename T>
std::string join(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// A shell word: single-quoted, any single quote inside spelled '\''.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The benchmark text's token ids, once.
std::vector<int32_t> text_ids(runtime::Worker& engine, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read benchmark text " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto ids = engine.tokenizer().encode(ss.str());
  if (ids.empty()) throw std::runtime_error("benchmark text " + path + " is empty");
  return ids;
}

// n tokens of the text from offset `start`, wrapping around as often as needed.
std::vector<int32_t> prompt_ids(const std::vector<int32_t>& text, size_t start, size_t n) {
  std::vector<int32_t> ids(n);
  for (size_t k = 0; k < n; ++k) ids[k] = text[(start + k) % text.size()];
  return ids;
}

// KV bytes one token adds to the cache (every layer, every KV head, K and V) in `dtype`.
double kv_bytes_per_token(const model::ModelConfig& cfg, kernels::KvDtype dtype) {
  const kernels::KvBlockLayout layout{16, cfg.head_dim, dtype};
  return double(cfg.n_layers * cfg.n_kv_heads) * layout.block_bytes() / layout.block_tokens;
}

runtime::GenerateResult run_engine(runtime::Worker& engine, const std::vector<int32_t>& ids,
                                   size_t length, const compression::CompressionConfig& policy,
                                   const BenchOptions& o) {
  runtime::GenerateRequest req;
  req.prompt.assign(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(length));
  req.max_tokens = o.decode_tokens + 1;  // the first token comes from the prefill's logits
  req.stop_at_eos = false;
  req.compression = policy;
  req.kv_dtype = o.compression.dtype();
  return runtime::generate(engine, req);
}

compression::CompressionConfig full_cache() {
  compression::CompressionConfig full;
  full.policy = compression::Policy::kFull;
  return full;
}

Speeds measure_adakv(runtime::Worker& engine, const std::vector<int32_t>& ids, size_t length,
                     const BenchOptions& o) {
  Speeds s;
  for (int r = 0; r < o.repeats; ++r) {
    const auto g = run_engine(engine, ids, length, full_cache(), o);
    s.prefill.push_back(length / g.prefill_s);
    s.decode.push_back(o.decode_tokens / g.decode_s);
  }
  return s;
}

// Aggregate decode tokens/s of `batch_seqs` sequences decoding together in the step-level
// engine, each with its own `batch_prompt`-token prompt. Only steps that decode every sequence
// at once count (no prefill rows in them), timed as the engine's forward, as llama-batched-bench
// times its llama_decode calls. The run ends once `batch_decode_tokens` such steps are timed.
double measure_batched_once(runtime::Worker& engine, const std::vector<int32_t>& text,
                            const BenchOptions& o) {
  const auto& local = engine.model().local_config();
  const size_t max_tokens = o.batch_decode_tokens + kBatchSlack;
  const size_t per_seq =
      (o.batch_prompt + max_tokens + 15) / 16 * local.n_layers * local.n_kv_heads;
  runtime::ServingConfig config;
  config.kv_dtype = o.compression.dtype();
  config.kv_pool_blocks = per_seq * o.batch_seqs;
  config.max_num_seqs = o.batch_seqs;
  config.max_num_batched_tokens = std::max<size_t>(2048, 2 * o.batch_seqs);
  config.prefill_chunk = 512;
  runtime::Engine loop(engine, config);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < o.batch_seqs; ++i) {
    runtime::Request r;
    // Prompts start far apart in the text, so no two share a prefix.
    r.generate.prompt = prompt_ids(text, i * 997, o.batch_prompt);
    r.generate.max_tokens = max_tokens;
    r.generate.stop_at_eos = false;
    r.generate.compression = full_cache();
    r.generate.kv_dtype = config.kv_dtype;
    ids.push_back(loop.add(std::move(r)));
  }
  size_t steps = 0;
  double seconds = 0;
  while (loop.has_work() && steps < o.batch_decode_tokens) {
    const auto before = loop.stats();
    loop.step();
    const auto& after = loop.stats();
    if (after.decode_only_tokens - before.decode_only_tokens == o.batch_seqs) {
      ++steps;
      seconds += after.decode_only_s - before.decode_only_s;
    }
  }
  for (uint64_t id : ids) loop.abort(id);
  loop.run_until_done();
  if (steps == 0) throw std::runtime_error("batched bench: no step decoded every sequence at once");
  if (steps < o.batch_decode_tokens) {
    std::fprintf(stderr, "[bench] batched: only %zu of %zu steps decoded every sequence at once\n",
                 steps, o.batch_decode_tokens);
  }
  return double(steps * o.batch_seqs) / seconds;
}

// Read bandwidth of this machine in bytes/s at the current thread count: the best of a few
// vectorised parallel sums over 512 MiB (far larger than any cache).
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

// Runs a peer script (`python script args`), which prints one JSON object per line:
// {"peer": ...} says what runs, {"error": ...} why nothing does, any other line is a result
// handed to `on_result`. A peer that is missing or fails leaves `why` set, never throws.
PeerResults run_peer(const BenchOptions& o, const std::string& script, const std::string& args,
                     const std::function<void(const nlohmann::json&, Results&)>& on_result) {
  PeerResults p;
  if (!std::filesystem::exists(script)) {
    p.why = "peer script not found: " + script;
    return p;
  }
  const std::string cmd = o.python + " " + quote(script) + " " + args;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    p.why = "cannot start " + o.python;
    return p;
  }
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) {
    line += buf;
    if (line.back() != '\n' && !std::feof(pipe)) continue;  // a line longer than the buffer
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    line.clear();
    if (j.is_discarded() || !j.is_object()) continue;
    try {
      if (j.contains("error")) {
        p.why = j["error"].get<std::string>();
      } else if (j.contains("peer")) {
        p.about = j["peer"].get<std::string>();
        if (j.contains("flash_attn")) {
          p.about += " (flash attention " + j["flash_attn"].get<std::string>() + ")";
        }
      } else {
        on_result(j, p.speeds);
      }
    } catch (const nlohmann::json::exception& e) {
      p.why = std::string("unreadable peer output: ") + e.what();
    }
  }
  const int rc = ::pclose(pipe);
  if (p.speeds.empty() && p.why.empty()) p.why = "peer exited with status " + std::to_string(rc);
  return p;
}

// llama-cpp-python on the same ids: prefill and decode per (threads, length).
PeerResults measure_llamacpp(const std::string& model_path, const std::vector<int32_t>& ids,
                             const std::vector<int>& threads, const BenchOptions& o) {
  const auto ids_path = std::filesystem::temp_directory_path() /
                        ("adakv-bench-ids-" + std::to_string(::getpid()) + ".bin");
  {
    std::ofstream f(ids_path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  }
  const std::string args = "--model " + quote(model_path) + " --ids " + quote(ids_path.string()) +
                           " --lengths " + join(o.lengths) + " --decode-tokens " +
                           std::to_string(o.decode_tokens) + " --repeats " +
                           std::to_string(o.repeats) + " --threads " + join(threads);
  auto p = run_peer(o, o.peer_script, args, [](const nlohmann::json& j, Results& out) {
    auto& s = out[{j.at("threads").get<int>(), j.at("length").get<size_t>()}];
    s.prefill = j.at("prefill_tps").get<std::vector<double>>();
    s.decode = j.at("decode_tps").get<std::vector<double>>();
  });
  std::filesystem::remove(ids_path);
  return p;
}

// llama-batched-bench: aggregate decode of batch_seqs sequences per thread count (length 0).
PeerResults measure_llama_batched(const std::string& model_path, const std::vector<int>& threads,
                                  const BenchOptions& o) {
  std::string args = "--model " + quote(model_path) + " --threads " + join(threads) + " --seqs " +
                     std::to_string(o.batch_seqs) + " --prompt " + std::to_string(o.batch_prompt) +
                     " --decode-tokens " + std::to_string(o.batch_decode_tokens) + " --repeats " +
                     std::to_string(o.repeats);
  if (!o.batched_bin.empty()) args += " --bin " + quote(o.batched_bin);
  return run_peer(o, o.batched_script, args, [](const nlohmann::json& j, Results& out) {
    auto& s = out[{j.at("threads").get<int>(), size_t{0}}];
    s.prefill = j.at("prefill_tps").get<std::vector<double>>();
    s.decode = j.at("decode_tps").get<std::vector<double>>();
  });
}

PolicyRun measure_policy(runtime::Worker& engine, const std::vector<int32_t>& ids, size_t length,
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

std::string cell(bool have, double v, int precision) {
  char buf[32] = "-";
  if (have) std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

void print_policy_table(runtime::Worker& engine, const std::vector<int32_t>& ids,
                        const BenchOptions& o) {
  const auto policy = o.compression.config();
  const auto full = full_cache();
  std::printf(
      "\npolicy %s, budget %s, scope %s (%d threads): cost of compressing, and what it buys\n",
      compression::to_string(policy.policy),
      o.compression.budget.empty() ? "0.2" : o.compression.budget.c_str(),
      compression::to_string(policy.scope), kernels::num_threads());
  std::printf("%7s | %9s %9s %7s | %9s %9s %6s | %9s %9s %6s | %8s %8s %6s\n", "prompt",
              "prefill s", "compr. s", "share", "full t/s", "policy", "ratio", "attn ms", "policy",
              "ratio", "full MiB", "kept MiB", "kept");
  for (size_t l : o.lengths) {
    const auto f = measure_policy(engine, ids, l, full, o);
    const auto p = measure_policy(engine, ids, l, policy, o);
    // Attention time is "-" where the engine did not time it (a forward path without timers).
    const bool timed = f.attention_s_per_token > 0 && p.attention_s_per_token > 0;
    std::printf(
        "%7zu | %9.2f %9.3f %6.2f%% | %9.2f %9.2f %6.2f | %9s %9s %6s | %8.1f %8.1f "
        "%5.1f%%\n",
        l, p.prefill_s, p.overhead_s, 100 * p.overhead_s / p.prefill_s, f.decode_tps, p.decode_tps,
        p.decode_tps / f.decode_tps, cell(timed, 1e3 * f.attention_s_per_token, 2).c_str(),
        cell(timed, 1e3 * p.attention_s_per_token, 2).c_str(),
        cell(timed, p.attention_s_per_token / f.attention_s_per_token, 2).c_str(),
        f.kept_bytes / 1048576.0, p.kept_bytes / 1048576.0, 100.0 * p.kept_bytes / f.kept_bytes);
  }
  std::printf(
      "compr. s = scoring + allocation + compaction (+ the look-ahead tokens' decode steps) "
      "inside the prefill;\nattn ms = decode attention per token (full cache, then the policy); "
      "kept = KV bytes held after prefill, block rounding included\n");
}

int run_bench(const BenchOptions& o) {
  // The default list needs OpenMP's own count, read before any thread count is set.
  std::vector<int> threads = o.threads;
  if (threads.empty()) {
    threads = {1};
    if (kernels::num_threads() > 1) threads.push_back(kernels::num_threads());
  }
  const std::string path = runtime::resolve_model(o.model);
  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(path, job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  const auto& cfg = engine.model().config();
  const size_t longest = *std::max_element(o.lengths.begin(), o.lengths.end());
  if (longest + o.decode_tokens > cfg.context_length) {
    throw std::invalid_argument(
        "prompt length " + std::to_string(longest) + " + " + std::to_string(o.decode_tokens) +
        " decode tokens exceed the model's context of " + std::to_string(cfg.context_length));
  }
  if (o.batch_seqs > 0 &&
      o.batch_prompt + o.batch_decode_tokens + kBatchSlack > cfg.context_length) {
    throw std::invalid_argument("--batch-prompt " + std::to_string(o.batch_prompt) +
                                " + --batch-decode-tokens exceed the model's context");
  }
  const auto text = text_ids(engine, o.text_file);
  const auto ids = prompt_ids(text, 0, longest);
  const double weight_bytes = static_cast<double>(engine.model().weights().bytes());
  const double kv_token = kv_bytes_per_token(cfg, o.compression.dtype());
  std::printf("adakv bench: %s\n", path.c_str());
  std::printf(
      "  threads %s; prompts of %s tokens, then %zu decode tokens; median of %d runs\n"
      "  weights MiB %.1f; KV %s, %.1f KiB per token; decode dots %s\n",
      join(threads).c_str(), join(o.lengths).c_str(), o.decode_tokens, o.repeats,
      weight_bytes / 1048576.0, o.compression.kv_dtype.c_str(), kv_token / 1024.0,
      o.compression.decode_dots.c_str());
  std::fflush(stdout);

  // adakv, every thread count: each length, the batch, the bandwidth at that count.
  Results ours;
  std::map<int, double> bandwidth;
  for (int t : threads) {
    kernels::set_num_threads(t);
    for (size_t l : o.lengths) {
      ours[{t, l}] = measure_adakv(engine, ids, l, o);
      std::fprintf(stderr, "[bench] adakv %d threads, %zu tokens done\n", t, l);
    }
    for (int r = 0; o.batch_seqs > 0 && r < o.repeats; ++r) {
      ours[{t, 0}].decode.push_back(measure_batched_once(engine, text, o));
    }
    if (o.batch_seqs > 0) std::fprintf(stderr, "[bench] adakv %d threads, batch done\n", t);
    bandwidth[t] = read_bandwidth();
  }

  PeerResults peer, batched;
  peer.why = batched.why = "disabled with --peer none";
  if (o.peer == "llama.cpp") {
    peer = measure_llamacpp(path, ids, threads, o);
    std::fprintf(stderr, "[bench] llama.cpp done\n");
    if (o.batch_seqs > 0) {
      batched = measure_llama_batched(path, threads, o);
      std::fprintf(stderr, "[bench] llama-batched-bench done\n");
    }
  }

  const std::string peer_line =
      peer.speeds.empty() ? "unavailable: " + peer.why : peer.about + ", same token ids";
  std::printf("  llama.cpp: %s\n", peer_line.c_str());
  std::printf("  read bandwidth (GB/s):");
  for (size_t i = 0; i < threads.size(); ++i) {
    std::printf("%s %.1f at %d thread%s", i ? "," : "", bandwidth[threads[i]] / 1e9, threads[i],
                threads[i] > 1 ? "s" : "");
  }
  std::printf("\n\nsingle sequence, tokens/s\n");
  std::printf("%7s %7s | %10s %10s %6s | %10s %10s %6s | %9s %7s | %8s\n", "threads", "prompt",
              "adakv pf", "llama.cpp", "ratio", "adakv dec", "llama.cpp", "ratio", "bw limit",
              "of lim", "KV MiB");
  for (int t : threads) {
    for (size_t l : o.lengths) {
      const auto& a = ours[{t, l}];
      const double ap = median(a.prefill), ad = median(a.decode);
      const auto it = peer.speeds.find({t, l});
      const bool have = it != peer.speeds.end();
      const double lp = have ? median(it->second.prefill) : 0;
      const double ld = have ? median(it->second.decode) : 0;
      // Decode reads every weight and the whole cache once per token.
      const double kv = (l + o.decode_tokens) * kv_token;
      const double limit = bandwidth[t] / (weight_bytes + kv);
      std::printf("%7d %7zu | %10.1f %10s %6s | %10.2f %10s %6s | %9.2f %7.2f | %8.1f\n", t, l, ap,
                  cell(have, lp, 1).c_str(), cell(have, ap / lp, 2).c_str(), ad,
                  cell(have, ld, 2).c_str(), cell(have, ad / ld, 2).c_str(), limit, ad / limit,
                  kv / 1048576.0);
    }
  }

  if (o.batch_seqs > 0) {
    std::printf(
        "\nbatched decode: %zu sequences of %zu-token prompts decoding together, %zu steps\n",
        o.batch_seqs, o.batch_prompt, o.batch_decode_tokens);
    const std::string batched_line = batched.speeds.empty() ? "unavailable: " + batched.why
                                                            : batched.about + ", random token ids";
    std::printf("  llama.cpp: %s\n", batched_line.c_str());
    std::printf("%7s | %10s %10s %6s | %9s %7s | %8s\n", "threads", "adakv t/s", "llama.cpp",
                "ratio", "bw limit", "of lim", "KV MiB");
    for (int t : threads) {
      const double ad = median(ours[{t, 0}].decode);
      const auto it = batched.speeds.find({t, size_t{0}});
      const bool have = it != batched.speeds.end();
      const double ld = have ? median(it->second.decode) : 0;
      // One step reads every weight once and every sequence's cache, for batch_seqs tokens.
      const double kv = o.batch_seqs * (o.batch_prompt + o.batch_decode_tokens) * kv_token;
      const double limit = o.batch_seqs * bandwidth[t] / (weight_bytes + kv);
      std::printf("%7d | %10.1f %10s %6s | %9.1f %7.2f | %8.1f\n", t, ad, cell(have, ld, 1).c_str(),
                  cell(have, ad / ld, 2).c_str(), limit, ad / limit, kv / 1048576.0);
    }
  }
  std::printf(
      "\ntokens/s, median of %d runs; pf = prefill, dec = decode at the prompt's depth; ratio = "
      "adakv / llama.cpp (above 1: adakv faster);\nbw limit = decode tokens/s if the weights "
      "(weights MiB) and the KV cache (KV MiB) were each read once per step at the read "
      "bandwidth\nof the same thread count; of lim = adakv decode / bw limit; batched: aggregate "
      "tokens/s of steps decoding every sequence\n(adakv: the step engine's forward; llama.cpp: "
      "llama-batched-bench's S_TG)\n",
      o.repeats);
  std::fflush(stdout);

  // The compression policy next to the full cache, one run each per length.
  kernels::set_num_threads(threads.back());
  print_policy_table(engine, ids, o);
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench", "Prefill/decode tokens per second, next to llama.cpp");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  sub->add_option("--lengths", o->lengths, "Prompt lengths in tokens")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  sub->add_option("--decode-tokens", o->decode_tokens, "Tokens decoded after each prefill")
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  sub->add_option("--repeats", o->repeats, "Runs per cell (the median is printed)")
      ->check(CLI::Range(1, 100));
  sub->add_option("--threads", o->threads,
                  "CPU thread counts for both engines, e.g. 1,2 (default: 1 and OMP_NUM_THREADS, "
                  "else all cores)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  sub->add_option("--batch-seqs", o->batch_seqs,
                  "Sequences of the batched decode table (16; 0 skips it)");
  sub->add_option("--batch-prompt", o->batch_prompt,
                  "Prompt tokens of each batched sequence (1024)");
  sub->add_option("--batch-decode-tokens", o->batch_decode_tokens,
                  "Batched decode steps timed (32)")
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  sub->add_option("--text", o->text_file, "Text the prompts are cut from");
  sub->add_option("--peer", o->peer, "Peer engine: llama.cpp or none")
      ->check(CLI::IsMember({"llama.cpp", "none"}));
  sub->add_option("--peer-script", o->peer_script, "The llama.cpp (llama-cpp-python) peer script");
  sub->add_option("--batched-script", o->batched_script, "The llama-batched-bench peer script");
  sub->add_option("--llama-batched-bench", o->batched_bin,
                  "llama-batched-bench binary (default: $ADAKV_HOME/llama.cpp/build/bin)");
  sub->add_option("--python", o->python,
                  "Python interpreter for the peer scripts (they fall back to $ADAKV_HOME/venv)");
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  add_bench_batch(sub, selected);
  // `bench batch` sets its own runner; plain `bench` runs this one.
  sub->callback([o, sub, &selected] {
    if (sub->get_subcommands().empty()) selected = [o] { return run_bench(*o); };
  });
}

}  // namespace adakv::cli
