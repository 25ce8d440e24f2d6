// The serving loop on the real model: chunked prefill, ragged batches and preemption give every
// request the tokens it gets alone, and the pool's blocks all come back. The engine decodes on
// float dots (--decode-dots float), whose results another prompt chunking or a recompute after
// preemption changes only by float32 rounding, so that the tight tolerances below check the
// loop's bookkeeping; the default int16 dots, which round those last-bit differences up to
// ~0.01 apart (of logits ~20), get their own test at a looser tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "kernels/quant.h"
#include "runtime/engine.h"
#include "runtime/worker.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/model_fixture.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::runtime::Engine;
using adakv::runtime::GenerateRequest;
using adakv::runtime::GenerateResult;
using adakv::runtime::ServingConfig;
using adakv::runtime::Worker;

class StepEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Chosen before loading: it decides the layout the weights are kept in.
    adakv::kernels::set_decode_dots(adakv::kernels::MatmulPath::kFloatDots);
    engine_ = new Worker(adakv::test::model_path());
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    std::stringstream ss;
    ss << in.rdbuf();
    text_ = new std::vector<int32_t>(engine_->tokenizer().encode(ss.str()));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete text_;
    adakv::kernels::set_decode_dots(adakv::kernels::MatmulPath::kInt16Dots);
  }
  // n tokens of the GPL-3 text from token `offset` on: different prompts for different offsets.
  static std::vector<int32_t> prompt(size_t offset, size_t n) {
    return {text_->begin() + offset, text_->begin() + offset + n};
  }
  static GenerateRequest request(std::vector<int32_t> prompt, const CompressionConfig& c,
                                 size_t max_tokens = 16) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.stop_at_eos = false;
    r.compression = c;
    return r;
  }
  // Each request's sampled rows of logits, and its result, through one loop.
  struct Run {
    std::vector<GenerateResult> results;
    std::vector<std::vector<std::vector<float>>> logits;  // [request][step][vocab]
  };
  static Run run_loop(const std::vector<GenerateRequest>& reqs, const ServingConfig& config,
                      Worker* engine = nullptr) {
    Run run;
    run.results.resize(reqs.size());
    run.logits.resize(reqs.size());
    Engine loop(engine ? *engine : *engine_, config);
    for (size_t i = 0; i < reqs.size(); ++i) {
      adakv::runtime::Request r;
      r.generate = reqs[i];
      r.on_logits = [&run, i](const float* lg, size_t v) {
        run.logits[i].emplace_back(lg, lg + v);
      };
      r.on_done = [&run, i](GenerateResult&& g) { run.results[i] = std::move(g); };
      loop.add(std::move(r));
    }
    const size_t capacity = config.kv_pool_blocks;
    while (loop.has_work()) {
      loop.step();
      // Rank 0's pool holds what the scheduler accounts for it (at most its reservations).
      const size_t used = capacity - loop.free_blocks();
      const auto& sched = loop.scheduler();
      if (!sched.releases_pending()) {
        EXPECT_LE(used, sched.used_blocks(0));
      }
      if (sched.accounts_exactly()) {
        EXPECT_EQ(used, sched.used_blocks(0));
      }
    }
    EXPECT_EQ(loop.free_blocks() + loop.cached_free_blocks(), capacity) << "blocks leaked";
    last_stats_ = loop.stats();
    return run;
  }
  static Run alone(const GenerateRequest& req, Worker* engine = nullptr) {
    Run run;
    run.logits.resize(1);
    run.results.push_back(adakv::runtime::generate(
        *(engine ? engine : engine_), req, {},
        [&](const float* lg, size_t v) { run.logits[0].emplace_back(lg, lg + v); }));
    return run;
  }
  // The same greedy tokens, or a divergence explained by summation order: up to the first
  // differing token, every step's logits agree within `tol`.
  static void expect_same(const Run& a, size_t ia, const Run& b, size_t ib, double tol,
                          const std::string& what) {
    const auto& ta = a.results[ia].tokens;
    const auto& tb = b.results[ib].tokens;
    size_t first = 0;
    while (first < std::min(ta.size(), tb.size()) && ta[first] == tb[first]) ++first;
    double worst = 0;
    for (size_t s = 0; s <= std::min(first, std::min(ta.size(), tb.size()) - 1); ++s) {
      const auto& la = a.logits[ia][s];
      const auto& lb = b.logits[ib][s];
      for (size_t v = 0; v < la.size(); ++v)
        worst = std::max(worst, double(std::fabs(la[v] - lb[v])));
    }
    if (first == ta.size() && ta.size() == tb.size()) {
      std::printf("%s: %zu tokens identical (logits within %.2g)\n", what.c_str(), ta.size(),
                  worst);
    } else {
      std::printf("%s: tokens differ from %zu on; logits within %.2g up to there\n", what.c_str(),
                  first, worst);
    }
    EXPECT_LE(worst, tol) << what;
  }
  static CompressionConfig policy(Policy p, double ratio = 0.2) {
    CompressionConfig c;
    c.policy = p;
    c.budget_ratio = ratio;
    return c;
  }
  // Sixteen requests of 40..715 prompt tokens and all three policies.
  static std::vector<GenerateRequest> sixteen_requests() {
    std::vector<GenerateRequest> reqs;
    for (size_t i = 0; i < 16; ++i) {
      const Policy p = i % 3 == 0 ? Policy::kFull : i % 3 == 1 ? Policy::kAdaKV : Policy::kSnapKV;
      reqs.push_back(request(prompt(37 * i, 40 + 45 * i), policy(p), 12 + i % 5));
    }
    return reqs;
  }
  static ServingConfig serving(size_t blocks, size_t chunk = 256, size_t batched = 1024) {
    ServingConfig c;
    c.kv_pool_blocks = blocks;
    c.max_num_seqs = 32;
    c.max_num_batched_tokens = batched;
    c.prefill_chunk = chunk;
    return c;
  }
  static Worker* engine_;
  static std::vector<int32_t>* text_;
  static adakv::runtime::LoopStats last_stats_;
};
Worker* StepEngine::engine_ = nullptr;
std::vector<int32_t>* StepEngine::text_ = nullptr;
adakv::runtime::LoopStats StepEngine::last_stats_;

TEST_F(StepEngine, ChunkedPrefillGivesTheTokensOfOneForward) {
  CompressionConfig lookahead = policy(Policy::kAdaKV);
  lookahead.lookahead = 8;
  for (const auto& c :
       {policy(Policy::kFull), policy(Policy::kAdaKV), policy(Policy::kSnapKV), lookahead}) {
    const auto req = request(prompt(100, 700), c);
    const auto chunked = run_loop({req}, serving(20000, 256));
    const auto whole = alone(req);
    // A policy that compresses each layer on its own, without look-ahead, is prefilled layer
    // by layer, the whole prompt at a time: one forward's numbers exactly.
    const bool layered = c.policy != Policy::kFull && c.lookahead == 0;
    expect_same(chunked, 0, whole, 0, layered ? 0.0 : 1e-3,
                std::string(layered ? "layer by layer, " : "chunks of 256, ") +
                    adakv::compression::to_string(c.policy) + (c.lookahead ? " + look-ahead" : ""));
    const double kept = chunked.results[0].kv_after_prefill_bytes;
    EXPECT_NEAR(kept, whole.results[0].kv_after_prefill_bytes, layered ? 0.0 : 0.02 * kept);
    if (layered) {
      EXPECT_EQ(chunked.results[0].compression.budgets, whole.results[0].compression.budgets);
    }
  }
}

TEST_F(StepEngine, SixteenRequestsBatchedGiveTheirTokensAlone) {
  const auto reqs = sixteen_requests();
  const auto batched = run_loop(reqs, serving(40000));
  EXPECT_GE(last_stats_.peak_running, 8u);
  size_t same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto one = alone(reqs[i]);
    expect_same(batched, i, one, 0, 1e-4, "request " + std::to_string(i));
    same += batched.results[i].tokens == one.results[0].tokens;
    EXPECT_EQ(batched.results[i].tokens.size(), reqs[i].max_tokens);
    EXPECT_EQ(batched.results[i].compression.budgets, one.results[0].compression.budgets)
        << "request " << i;
  }
  std::printf("%zu of 16 token for token\n", same);
}

// The same on the default int16 decode dots (an engine of its own: the choice precedes loading).
// A batch chunks the prompts otherwise than one request alone does; the rounding of the
// activations turns those last-bit differences into logits up to 0.0083 apart (of logits ~20;
// 4 of the 16 requests), so the tolerance here is 0.05, with the same budgets.
TEST_F(StepEngine, SixteenRequestsBatchedOnInt16DotsGiveTheirTokensAlone) {
  const adakv::test::DecodeDotsScope dots(adakv::kernels::MatmulPath::kInt16Dots);
  Worker engine(adakv::test::model_path());
  const auto reqs = sixteen_requests();
  const auto batched = run_loop(reqs, serving(40000), &engine);
  size_t same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto one = alone(reqs[i], &engine);
    expect_same(batched, i, one, 0, 0.05, "int16, request " + std::to_string(i));
    same += batched.results[i].tokens == one.results[0].tokens;
    EXPECT_EQ(batched.results[i].compression.budgets, one.results[0].compression.budgets)
        << "request " << i;
  }
  std::printf("int16 dots: %zu of 16 token for token\n", same);
}

TEST_F(StepEngine, PreemptedRequestsContinueSeamlesslyAndTheBlocksComeBack) {
  // Full-cache prompts of 300-1000 tokens, 32 new tokens each: the pool holds ~2.5 of them,
  // so decoding runs short and the newest sequences are preempted and recomputed.
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 8; ++i) {
    reqs.push_back(request(prompt(53 * i, 300 + 100 * i), policy(Policy::kFull), 32));
  }
  const size_t per_token_blocks = 30 * 3;  // layers x KV heads, 16 tokens per block
  const auto run = run_loop(reqs, serving(per_token_blocks * 2600 / 16, 256));
  std::printf("preemptions: %zu, peak in flight %zu\n", last_stats_.preemptions,
              last_stats_.peak_running);
  EXPECT_GE(last_stats_.preemptions, 1u);
  size_t preempted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(run.results[i].tokens.size(), 32u);
    preempted += run.results[i].preemptions > 0;
    const auto one = alone(reqs[i]);
    expect_same(run, i, one, 0, 1e-4, "request " + std::to_string(i));
  }
  EXPECT_GE(preempted, 1u);
}

TEST_F(StepEngine, APreemptedLayeredPromptStartsAgainAndGivesItsTokens) {
  // A full-cache prompt of 816 tokens (51 blocks per head, 4590 in all) in chunks of 256, and an
  // Ada-KV 20% prompt of 1000 tokens prefilled layer by layer, reserving 30 x (38 + 3) = 1230
  // blocks: the pool holds exactly both. With 300 tokens per step the layered prompt gets one
  // layer per step beside the chunks, then 7; the full prompt's first decode opens a block per
  // head, so the layered prompt, the newest, is preempted between its layers, and starts again
  // once the other is done.
  const std::vector<GenerateRequest> reqs = {
      request(prompt(0, 816), policy(Policy::kFull), 24),
      request(prompt(900, 1000), policy(Policy::kAdaKV), 24)};
  const auto run = run_loop(reqs, serving(30 * 3 * 51 + 1230, 256, 300));
  EXPECT_EQ(last_stats_.preemptions, 1u);
  EXPECT_EQ(run.results[0].preemptions, 0u);
  EXPECT_EQ(run.results[1].preemptions, 1u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(run.results[i].tokens.size(), 24u);
    const auto one = alone(reqs[i]);
    // The full prompt's chunks of 256 against its one forward alone: summation order, as in
    // ChunkedPrefillGivesTheTokensOfOneForward (just over 1e-4 on some CPUs).
    expect_same(run, i, one, 0, i == 1 ? 0.0 : 1e-3, "request " + std::to_string(i));
    EXPECT_EQ(run.results[i].compression.budgets, one.results[0].compression.budgets);
  }
}

TEST_F(StepEngine, ARequestThePoolCanNeverHoldIsRefusedByName) {
  Engine loop(*engine_, serving(100));
  adakv::runtime::Request r;
  r.generate = request(prompt(0, 500), policy(Policy::kFull));
  try {
    loop.add(std::move(r));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(loop.has_work());
}

TEST_F(StepEngine, StopStringsEndTheTextBeforeThem) {
  auto req = request(prompt(0, 60), policy(Policy::kFull), 24);
  const auto plain = alone(req);
  const std::string text = plain.results[0].text;
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(4, 3);
  Engine loop(*engine_, serving(20000));
  GenerateResult got;
  std::string streamed;
  adakv::runtime::Request r;
  r.generate = req;
  r.stop = {stop, "never appears \x01"};
  r.on_text = [&](std::string_view s) { streamed += s; };
  r.on_done = [&](GenerateResult&& g) { got = std::move(g); };
  loop.add(std::move(r));
  loop.run_until_done();
  EXPECT_EQ(got.finish_reason, "stop");
  EXPECT_EQ(got.text, text.substr(0, text.find(stop)));
  EXPECT_EQ(streamed, got.text);
}

TEST_F(StepEngine, AbortEndsARequestAndFreesItsBlocks) {
  Engine loop(*engine_, serving(20000));
  GenerateResult a, b;
  adakv::runtime::Request r1, r2;
  r1.generate = request(prompt(0, 200), policy(Policy::kAdaKV), 64);
  r1.on_done = [&](GenerateResult&& g) { a = std::move(g); };
  r2.generate = request(prompt(300, 200), policy(Policy::kFull), 8);
  r2.on_done = [&](GenerateResult&& g) { b = std::move(g); };
  const auto id = loop.add(std::move(r1));
  loop.add(std::move(r2));
  for (int i = 0; i < 4; ++i) loop.step();
  loop.abort(id);
  loop.run_until_done();
  EXPECT_EQ(a.finish_reason, "abort");
  EXPECT_LT(a.tokens.size(), 64u);
  EXPECT_EQ(b.finish_reason, "length");
  EXPECT_EQ(b.tokens.size(), 8u);
  EXPECT_EQ(loop.free_blocks() + loop.cached_free_blocks(), 20000u);
}

// n samples of one prompt: one prefill, the others forked from its compressed cache. Greedy,
// every sample gives the tokens the prompt gives alone; at temperature 0.8 with per-sample
// seeds they differ and repeat run to run; the pool holds the prompt's full blocks once.
TEST_F(StepEngine, SamplesOfOnePromptShareItsCompressedCache) {
  struct Samples {
    Run run;
    size_t peak_used = 0;
  };
  auto run_samples = [&](const GenerateRequest& req, size_t n, float temperature, bool separate) {
    Samples out;
    out.run.results.resize(n);
    out.run.logits.resize(n);
    const ServingConfig config = serving(20000);
    Engine loop(*engine_, config);
    std::vector<adakv::runtime::Request> reqs(n);
    for (size_t i = 0; i < n; ++i) {
      reqs[i].generate = req;
      reqs[i].generate.sampling.temperature = temperature;
      reqs[i].generate.sampling.seed = 1 + i;
      reqs[i].on_logits = [&out, i](const float* lg, size_t v) {
        out.run.logits[i].emplace_back(lg, lg + v);
      };
      reqs[i].on_done = [&out, i](GenerateResult&& g) { out.run.results[i] = std::move(g); };
    }
    if (separate) {
      for (auto& r : reqs) loop.add(std::move(r));
    } else {
      EXPECT_EQ(loop.add_samples(std::move(reqs)).size(), n);
    }
    while (loop.has_work()) {
      loop.step();
      const size_t used = config.kv_pool_blocks - loop.free_blocks();
      out.peak_used = std::max(out.peak_used, used);
      if (loop.scheduler().accounts_exactly()) EXPECT_EQ(used, loop.scheduler().used_blocks(0));
    }
    EXPECT_EQ(loop.free_blocks() + loop.cached_free_blocks(), config.kv_pool_blocks)
        << "blocks leaked";
    return out;
  };
  for (const Policy p : {Policy::kFull, Policy::kAdaKV}) {
    const std::string name = p == Policy::kFull ? "full" : "adakv 20%";
    const GenerateRequest req = request(prompt(100, 400), policy(p), 12);
    const Run one = alone(req);
    const Samples greedy = run_samples(req, 3, 0.0f, false);
    for (size_t i = 0; i < 3; ++i) {
      expect_same(one, 0, greedy.run, i, 2e-3, name + " greedy sample " + std::to_string(i));
    }
    const Samples a = run_samples(req, 4, 0.8f, false), b = run_samples(req, 4, 0.8f, false);
    const Samples apart = run_samples(req, 4, 0.8f, true);
    std::set<std::vector<int32_t>> distinct;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(a.run.results[i].tokens, b.run.results[i].tokens) << name << " sample " << i;
      EXPECT_EQ(a.run.results[i].tokens.size(), 12u);
      distinct.insert(a.run.results[i].tokens);
    }
    EXPECT_EQ(distinct.size(), 4u) << name;
    // 400 prompt tokens in blocks of 16 per head: 4 separate copies against one shared copy
    // plus each sample's partial and generated blocks.
    std::printf("%s: 4 samples peak at %zu KV blocks shared, %zu as 4 separate requests\n",
                name.c_str(), a.peak_used, apart.peak_used);
    EXPECT_LT(a.peak_used * 2, apart.peak_used) << name;
  }
}

}  // namespace
