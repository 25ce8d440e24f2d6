// Prefix caching in the serving loop on the real model: a prompt that starts like an earlier
// one takes its cached spans instead of computing them, and gives the tokens a cold cache
// gives; cached spans nobody uses make room for new prompts before anything is preempted; the
// pool's blocks are all free or cached once every request ended. Float decode dots, as in
// StepEngine: a prompt computed after cached spans differs from one computed whole only by
// float32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "kernels/quant.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/engine.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"
#include "tests/e2e/model_fixture.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::runtime::Engine;
using adakv::runtime::GenerateRequest;
using adakv::runtime::GenerateResult;
using adakv::runtime::ServingConfig;
using adakv::runtime::Worker;

class PrefixCaching : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
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
  static std::vector<int32_t> text(size_t offset, size_t n) {
    return {text_->begin() + offset, text_->begin() + offset + n};
  }
  static GenerateRequest request(std::vector<int32_t> prompt, Policy policy = Policy::kFull) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = 12;
    r.stop_at_eos = false;
    r.compression.policy = policy;
    r.compression.budget_ratio = 0.2;
    return r;
  }
  static ServingConfig serving(size_t blocks, bool caching) {
    ServingConfig c;
    c.kv_pool_blocks = blocks;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 1024;
    c.prefill_chunk = 256;
    c.prefix_caching = caching;
    return c;
  }
  struct Run {
    std::vector<GenerateResult> results;
    std::vector<std::vector<std::vector<float>>> logits;  // [request][step][vocab]
    adakv::runtime::PrefixCacheStats stats;
    size_t preemptions = 0;
  };
  // The requests through one loop, each added once the one before it ended (`one_by_one`) or
  // all at once; the pool is checked after every step and once idle. Request i is asked for
  // samples[i] samples (default one; sample k seeded 1 + k), their results one after another.
  static Run run(const std::vector<GenerateRequest>& reqs, const ServingConfig& config,
                 bool one_by_one, const std::vector<size_t>& samples = {}) {
    Run out;
    std::vector<size_t> first(reqs.size() + 1, 0);
    for (size_t i = 0; i < reqs.size(); ++i) {
      first[i + 1] = first[i] + (samples.empty() ? 1 : samples[i]);
    }
    out.results.resize(first.back());
    out.logits.resize(first.back());
    Engine loop(*engine_, config);
    auto add = [&](size_t i) {
      std::vector<adakv::runtime::Request> group;
      for (size_t k = first[i]; k < first[i + 1]; ++k) {
        adakv::runtime::Request r;
        r.generate = reqs[i];
        if (first[i + 1] - first[i] > 1) r.generate.sampling.seed = 1 + (k - first[i]);
        r.on_logits = [&out, k](const float* lg, size_t v) {
          out.logits[k].emplace_back(lg, lg + v);
        };
        r.on_done = [&out, k](GenerateResult&& g) { out.results[k] = std::move(g); };
        group.push_back(std::move(r));
      }
      if (group.size() == 1) {
        loop.add(std::move(group.front()));
      } else {
        loop.add_samples(std::move(group));
      }
    };
    auto drain = [&] {
      while (loop.has_work()) {
        loop.step();
        const auto& sched = loop.scheduler();
        const size_t used = config.kv_pool_blocks - loop.free_blocks();
        if (!sched.releases_pending()) EXPECT_LE(used, sched.used_blocks(0));
        if (sched.accounts_exactly()) EXPECT_EQ(used, sched.used_blocks(0));
        EXPECT_LE(used, config.kv_pool_blocks);
      }
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      add(i);
      if (one_by_one) drain();
    }
    drain();
    EXPECT_EQ(loop.free_blocks() + loop.cached_free_blocks(), config.kv_pool_blocks)
        << "blocks lost";
    EXPECT_EQ(loop.scheduler().cached_blocks(0, true), loop.scheduler().cached_blocks(0, false))
        << "a span is still referenced with every request ended";
    out.stats = loop.scheduler().prefix_stats();
    out.preemptions = loop.stats().preemptions;
    return out;
  }
  // Same greedy tokens; every step's logits within `tol` up to the first difference.
  static void expect_same(const Run& a, const Run& b, size_t i, double tol) {
    const auto& ta = a.results[i].tokens;
    const auto& tb = b.results[i].tokens;
    EXPECT_EQ(ta, tb) << "request " << i;
    double worst = 0;
    for (size_t s = 0; s < std::min(a.logits[i].size(), b.logits[i].size()); ++s) {
      for (size_t v = 0; v < a.logits[i][s].size(); ++v) {
        worst = std::max(worst, double(std::fabs(a.logits[i][s][v] - b.logits[i][s][v])));
      }
      if (s < ta.size() && s < tb.size() && ta[s] != tb[s]) break;
    }
    EXPECT_LE(worst, tol) << "request " << i;
  }
  static Worker* engine_;
  static std::vector<int32_t>* text_;
};
Worker* PrefixCaching::engine_ = nullptr;
std::vector<int32_t>* PrefixCaching::text_ = nullptr;

// One 600-token document, five questions after it (one request at a time): every request after
// the first computes only its question, and each gives the tokens a cold cache gives.
TEST_F(PrefixCaching, PromptsWithTheSameBeginningComputeOnlyTheirOwnTokens) {
  const auto doc = text(0, 600);
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 5; ++i) {
    auto p = doc;
    const auto q = text(2000 + 97 * i, 20 + 7 * i);
    p.insert(p.end(), q.begin(), q.end());
    reqs.push_back(request(p));
  }
  const size_t blocks = 30 * 3 * 8 * 64;  // layers x KV heads x 8 prompts of 1024 tokens
  const Run cold = run(reqs, serving(blocks, false), true);
  const Run warm = run(reqs, serving(blocks, true), true);
  const size_t spans = 600 / 16;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(cold.results[i].cached_tokens, 0u);
    EXPECT_EQ(warm.results[i].cached_tokens, i == 0 ? 0u : spans * 16) << "request " << i;
    expect_same(warm, cold, i, 1e-3);
  }
  EXPECT_EQ(cold.stats.queried_tokens, 0u);
  size_t queried = 0;
  for (const auto& r : reqs) queried += r.prompt.size();
  EXPECT_EQ(warm.stats.queried_tokens, queried);
  EXPECT_EQ(warm.stats.hit_tokens, 4 * spans * 16);
}

// A prompt that compresses neither takes nor leaves cached spans (compaction would rewrite
// them); a full-cache prompt after it still finds the first one's.
TEST_F(PrefixCaching, CompressedPromptsNeitherTakeNorLeaveSpans) {
  const auto doc = text(100, 500);
  std::vector<GenerateRequest> reqs = {request(doc, Policy::kFull), request(doc, Policy::kAdaKV),
                                       request(doc, Policy::kFull)};
  const Run warm = run(reqs, serving(30 * 3 * 512, true), true);
  EXPECT_EQ(warm.results[0].cached_tokens, 0u);
  EXPECT_EQ(warm.results[1].cached_tokens, 0u);
  EXPECT_EQ(warm.results[2].cached_tokens, (499 / 16) * 16u);  // the last token is computed
  EXPECT_EQ(warm.stats.queried_tokens, 1000u);
  EXPECT_EQ(warm.results[0].tokens, warm.results[2].tokens);
}

// A pool that holds about two of the prompts: the spans the finished prompts left are evicted
// for each new one (never a running sequence preempted for them), the tokens are the cold
// cache's, and the blocks all come back.
TEST_F(PrefixCaching, UnusedSpansMakeRoomBeforeAnythingIsPreempted) {
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 6; ++i) reqs.push_back(request(text(300 * i, 400)));
  const size_t blocks = 30 * 3 * (2 * 416 / 16);
  const Run cold = run(reqs, serving(blocks, false), true);
  const Run warm = run(reqs, serving(blocks, true), true);
  EXPECT_EQ(warm.preemptions, 0u);
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(warm, cold, i, 1e-3);
  // All at once too: admissions wait for blocks as without caching.
  const Run together = run(reqs, serving(blocks, true), false);
  for (size_t i = 0; i < reqs.size(); ++i) expect_same(together, cold, i, 1e-3);
}

// The samples of a request kept whole (n = 3, drawn at temperature 0.8) start from the spans
// an earlier prompt left and leave their own, as one sample does: a later prompt equal to
// theirs finds all of it cached. Each sample draws the tokens a cold cache draws, and once every
// request ended no span is still referenced (the samples' shared prompt let go of them).
TEST_F(PrefixCaching, TheSamplesOfARequestTakeAndLeaveSpans) {
  const auto doc = text(0, 600);
  auto after_doc = [&](size_t offset, size_t n) {
    auto p = doc;
    const auto q = text(offset, n);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  GenerateRequest sampled = request(after_doc(2000, 100));
  sampled.sampling.temperature = 0.8f;
  const std::vector<GenerateRequest> reqs = {request(after_doc(3000, 30)), sampled,
                                             request(sampled.prompt)};
  const std::vector<size_t> samples = {1, 3, 1};  // results: 0, then 1-3 the samples, then 4
  const size_t blocks = 30 * 3 * 8 * 64;
  const Run cold = run(reqs, serving(blocks, false), true, samples);
  const Run warm = run(reqs, serving(blocks, true), true, samples);
  EXPECT_EQ(warm.results[0].cached_tokens, 0u);
  EXPECT_EQ(warm.results[1].cached_tokens, (600 / 16) * 16u);  // the document's whole spans
  EXPECT_EQ(warm.results[4].cached_tokens, ((sampled.prompt.size() - 1) / 16) * 16);
  std::set<std::vector<int32_t>> drawn;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(cold.results[i].cached_tokens, 0u);
    expect_same(warm, cold, i, 1e-3);
  }
  for (size_t i = 1; i <= 3; ++i) drawn.insert(warm.results[i].tokens);
  EXPECT_GE(drawn.size(), 2u) << "the samples were not drawn apart";
}

// n = 3 samples in a pool too small for all three to decode 40 tokens: the newest is
// preempted, and prefills again from the spans the other samples' shared prompt still holds,
// computing only the prompt's last partial block. Every sample draws the tokens it draws
// without caching (where it is preempted too), and no block is lost.
TEST_F(PrefixCaching, APreemptedSampleStartsAgainFromTheSharedPromptsSpans) {
  GenerateRequest sampled = request(text(0, 600));
  sampled.sampling.temperature = 0.8f;
  sampled.max_tokens = 40;
  const size_t blocks = 30 * 3 * 44;  // per head: the prompt's 38 blocks and 6 more
  const Run cold = run({sampled}, serving(blocks, false), true, {3});
  const Run warm = run({sampled}, serving(blocks, true), true, {3});
  ASSERT_GE(cold.preemptions, 1u);
  ASSERT_GE(warm.preemptions, 1u);
  // Each readmission of a preempted sample found the prompt's 37 full spans cached.
  EXPECT_EQ(warm.stats.hit_tokens, warm.preemptions * 37 * 16);
  EXPECT_EQ(warm.stats.queried_tokens, (1 + warm.preemptions) * 600);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(warm.results[i].tokens, cold.results[i].tokens);
}

}  // namespace

namespace {

// Compressed contexts ("compress once, ask many"): a 1,500-token document compressed by Ada-KV
// at 20% without the questions, asked five questions.
class CompressedContexts : public PrefixCaching {
 protected:
  static GenerateRequest ask(const std::vector<int32_t>& context, const std::vector<int32_t>& q) {
    auto p = context;
    p.insert(p.end(), q.begin(), q.end());
    GenerateRequest r = request(p, Policy::kAdaKV);
    r.context_tokens = context.size();
    return r;
  }
  static std::vector<int32_t> question(size_t i) { return text(3000 + 131 * i, 18 + 3 * i); }
};

// Every question after the first prefills only itself and answers as a request that compresses
// the same context from scratch (in a loop of its own); the context is held once.
TEST_F(CompressedContexts, LaterQuestionsPrefillOnlyThemselvesAndAnswerAsFromScratch) {
  const auto doc = text(0, 1500);
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < 5; ++i) reqs.push_back(ask(doc, question(i)));
  const size_t blocks = 30 * 3 * 8 * 100;
  const Run warm = run(reqs, serving(blocks, true), true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(warm.results[i].cached_tokens, i == 0 ? 0u : 1500u) << "question " << i;
    EXPECT_EQ(warm.results[i].tokens.size(), 12u);
    const Run scratch = run({reqs[i]}, serving(blocks, true), true);
    EXPECT_EQ(scratch.results[0].cached_tokens, 0u);
    EXPECT_EQ(warm.results[i].tokens, scratch.results[0].tokens) << "question " << i;
    EXPECT_EQ(warm.logits[i], scratch.logits[0]) << "question " << i;
  }
  // Compressed: the context's KV is about a fifth of the uncompressed document's.
  EXPECT_LT(warm.results[1].kv_after_prefill_bytes,
            0.4 * warm.results[1].kv_full_after_prefill_bytes);
  EXPECT_EQ(warm.stats.hit_tokens, 4 * 1500u);
  // All at once: the first compresses the context, the others wait for it and fork.
  const Run together = run(reqs, serving(blocks, true), false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together.results[i].tokens, warm.results[i].tokens) << "question " << i;
  }
}

// A chat of five turns: each turn's context is the previous turn's context, question and answer.
// A turn reuses the cached context while what it adds stays within the tail, and compresses
// anew past it; the computed prompt tokens of each turn are its prompt minus the cached ones.
TEST_F(CompressedContexts, AChatReusesItsContextUntilTheTailGrowsPastTheLimit) {
  ServingConfig config = serving(30 * 3 * 8 * 100, true);
  config.context_tail = 80;
  std::vector<int32_t> context = text(0, 1200);
  std::vector<size_t> cached, computed;
  Engine loop(*engine_, config);
  for (size_t turn = 0; turn < 5; ++turn) {
    const auto q = question(turn);
    GenerateResult got;
    adakv::runtime::Request r;
    r.generate = ask(context, q);
    r.on_done = [&](GenerateResult&& g) { got = std::move(g); };
    loop.add(std::move(r));
    loop.run_until_done();
    cached.push_back(got.cached_tokens);
    computed.push_back(got.prompt_tokens - got.cached_tokens);
    std::printf("turn %zu: %zu prompt tokens, %zu cached, %zu computed\n", turn, got.prompt_tokens,
                got.cached_tokens, computed.back());
    context.insert(context.end(), q.begin(), q.end());
    context.insert(context.end(), got.tokens.begin(), got.tokens.end());
  }
  // Turn 1's context adds 18 + 12 tokens to turn 0's, turn 2's 30 + 33 (63 <= 80), turn 3's
  // 99 (> 80): compressed anew (1,299 tokens); turn 4's adds 27 + 12 to that.
  EXPECT_EQ(cached, (std::vector<size_t>{0, 1200, 1200, 0, 1299}));
  for (size_t turn = 0; turn < 5; ++turn) EXPECT_LT(computed[turn], turn == 0 ? 1300u : 1400u);
  EXPECT_EQ(loop.scheduler().cached_contexts(), 2u);
  EXPECT_EQ(loop.free_blocks() + loop.cached_free_blocks(), config.kv_pool_blocks);
}

// A context scored by reconstruction (context_scoring reconstruct, the default) in the serving
// loop keeps what the eval's recording keeps when the same repeat follows it: the same head
// budgets, the same answer; so it does when the repeat comes in pieces (the cache rolled back
// between them), which change what is kept. Scored by its window instead, it keeps other tokens.
TEST_F(CompressedContexts, ReconstructionScoresAServedContextAsTheEvalRecordingDoes) {
  const auto doc = text(0, 1500);
  const auto q = question(1);
  GenerateRequest context = request(doc, Policy::kAdaKV);
  CompressionConfig policy = context.compression;
  policy.scoring = adakv::compression::Scoring::kReconstruct;
  const auto instruction = engine_->encode_prompt(adakv::compression::kRepeatInstruction, false);
  std::vector<std::vector<std::vector<size_t>>> budgets;
  for (size_t piece : {0, 600}) {
    ServingConfig config = serving(30 * 3 * 8 * 100, true);
    config.prefill_chunk = 2048;           // one forward for the context, and one for each piece,
    config.max_num_batched_tokens = 4096;  // as the recording has them
    config.context_repeat_piece = piece;
    GenerateRequest served = ask(doc, q);
    ASSERT_EQ(served.compression.context_scoring, adakv::compression::Scoring::kReconstruct);
    const Run reconstructed = run({served}, config, true);
    const auto repeat =
        adakv::compression::repeat_pieces(instruction, doc, piece > 0 ? piece : doc.size());
    ASSERT_EQ(repeat.ends.size(), piece > 0 ? 3u : 1u);
    const auto recorded =
        adakv::runtime::answer_questions(*engine_, context, {q}, {policy}, repeat);
    budgets.push_back(reconstructed.results[0].compression.budgets);
    ASSERT_FALSE(budgets.back().empty());
    EXPECT_EQ(budgets.back(), recorded[0][0].compression.budgets) << "piece " << piece;
    EXPECT_EQ(reconstructed.results[0].tokens, recorded[0][0].tokens) << "piece " << piece;
    EXPECT_EQ(reconstructed.results[0].compression.lookahead_tokens, repeat.tokens.size());
  }
  EXPECT_NE(budgets[0], budgets[1]);
  GenerateRequest windowed = ask(doc, q);
  windowed.compression.context_scoring = adakv::compression::Scoring::kWindow;
  EXPECT_NE(budgets[0],
            run({windowed}, serving(30 * 3 * 8 * 100, true), true).results[0].compression.budgets);
}

// A context is compacted by its context_policy: policy adakv with context_policy ada-pyramid
// keeps what policy ada-pyramid keeps (the same budgets, the same answer), its early layers more
// than its late ones; left to the policy, Ada-KV gives every layer the same share.
TEST_F(CompressedContexts, AContextIsAllocatedByItsContextPolicy) {
  using adakv::compression::ContextPolicy;
  const auto doc = text(0, 1500);
  const auto q = question(1);
  auto served = [&](Policy policy, ContextPolicy context_policy) {
    GenerateRequest r = ask(doc, q);
    r.compression.policy = policy;
    r.compression.context_policy = context_policy;
    // The allocation is under test, not the repeat: the window scores the context.
    r.compression.context_scoring = adakv::compression::Scoring::kWindow;
    return run({r}, serving(30 * 3 * 8 * 100, true), true).results[0];
  };
  const GenerateResult by_context = served(Policy::kAdaKV, ContextPolicy::kAdaPyramid);
  const GenerateResult by_policy = served(Policy::kAdaPyramid, ContextPolicy::kAsPolicy);
  const GenerateResult adakv = served(Policy::kAdaKV, ContextPolicy::kAsPolicy);
  ASSERT_FALSE(by_context.compression.budgets.empty());
  EXPECT_EQ(by_context.compression.budgets, by_policy.compression.budgets);
  EXPECT_EQ(by_context.tokens, by_policy.tokens);
  auto layer_total = [](const std::vector<std::vector<size_t>>& budgets, size_t layer) {
    return std::accumulate(budgets[layer].begin(), budgets[layer].end(), size_t{0});
  };
  const auto& pyramid = by_context.compression.budgets;
  EXPECT_GT(layer_total(pyramid, 0), layer_total(pyramid, pyramid.size() - 1));
  const auto& even = adakv.compression.budgets;
  EXPECT_EQ(layer_total(even, 0), layer_total(even, even.size() - 1));
}

// A context needs a question after it.
TEST_F(CompressedContexts, AContextAsLongAsThePromptIsRefusedByName) {
  Engine loop(*engine_, serving(30 * 3 * 200, true));
  adakv::runtime::Request r;
  r.generate = request(text(0, 600), Policy::kAdaKV);
  r.generate.context_tokens = 600;
  try {
    loop.add(std::move(r));
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("must be shorter than the prompt"), std::string::npos)
        << e.what();
  }
}

}  // namespace
