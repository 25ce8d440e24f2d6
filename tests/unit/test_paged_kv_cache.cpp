// PagedKvCache on random tensors (no model): compaction keeps the window and the top-scored
// tokens in order, frees memory into the pool, and budget 100% changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/compression/scorer.h"
#include "runtime/kv/paged_kv_cache.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::compression::Scope;
using adakv::runtime::BlockPool;
using adakv::runtime::PagedKvCache;

adakv::model::ModelConfig tiny_config() {
  adakv::model::ModelConfig c;
  c.n_layers = 3;
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.ffn_dim = 32;
  c.vocab_size = 10;
  c.context_length = 4096;
  return c;
}

struct Activations {
  size_t n, q_stride, kv_stride;
  std::vector<float> q, k, v;
};

Activations random_activations(const adakv::model::ModelConfig& c, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  Activations a{n, c.q_width(), c.kv_width(), {}, {}, {}};
  a.q.resize(n * a.q_stride);
  a.k.resize(n * a.kv_stride);
  a.v.resize(n * a.kv_stride);
  for (auto* vec : {&a.q, &a.k, &a.v}) {
    for (auto& x : *vec) x = d(rng);
  }
  return a;
}

// Prefills every layer with the same activations and commits.
std::vector<float> prefill(PagedKvCache& cache, const adakv::model::ModelConfig& c,
                           const Activations& a) {
  std::vector<float> out(a.n * c.q_width());
  for (size_t l = 0; l < c.n_layers; ++l) {
    cache.append_and_attend(l, a.q.data(), a.q_stride, a.k.data(), a.v.data(), a.kv_stride, a.n,
                            out.data());
  }
  cache.commit(a.n);
  return out;
}

// One decode step through every layer; returns the attention output of the last layer.
std::vector<float> decode(PagedKvCache& cache, const adakv::model::ModelConfig& c,
                          const Activations& a) {
  std::vector<float> out(c.q_width());
  for (size_t l = 0; l < c.n_layers; ++l) {
    cache.append_and_attend(l, a.q.data(), a.q_stride, a.k.data(), a.v.data(), a.kv_stride, 1,
                            out.data());
  }
  cache.commit(1);
  return out;
}

TEST(PagedKvCache, BudgetOfTheWholePromptIsBitIdenticalToFull) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  BlockPool pool_a(layout, 1000, adakv::kernels::cpu_backend()),
      pool_b(layout, 1000, adakv::kernels::cpu_backend());
  CompressionConfig full, ada;
  full.policy = Policy::kFull;
  ada.policy = Policy::kAdaKV;
  ada.budget_ratio = 1.0;
  PagedKvCache a(pool_a, c, full), b(pool_b, c, ada);
  const auto prompt = random_activations(c, 200, 1);
  EXPECT_EQ(prefill(a, c, prompt), prefill(b, c, prompt));
  for (uint32_t step = 0; step < 64; ++step) {
    const auto t = random_activations(c, 1, 100 + step);
    const auto oa = decode(a, c, t), ob = decode(b, c, t);
    ASSERT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float))) << step;
  }
  EXPECT_EQ(a.held_bytes(), b.held_bytes());
}

TEST(PagedKvCache, TwentyPercentFreesMemoryIntoThePool) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  for (Scope scope : {Scope::kLayer, Scope::kGlobal}) {
    BlockPool pool(layout, 1000, adakv::kernels::cpu_backend());
    CompressionConfig ada;
    ada.scope = scope;
    ada.budget_ratio = 0.2;
    const size_t n = 1000;
    {
      PagedKvCache cache(pool, c, ada);
      prefill(cache, c, random_activations(c, n, 2));
      size_t kept = 0;
      for (size_t l = 0; l < c.n_layers; ++l) {
        for (size_t g = 0; g < c.n_kv_heads; ++g) kept += cache.head_length(l, g);
      }
      // Average 200 tokens per head, give or take the rounding of the Ada-KV formula.
      EXPECT_NEAR(double(kept) / (c.n_layers * c.n_kv_heads), 200.0, 2.0);
      EXPECT_LE(cache.held_bytes(), 0.21 * cache.full_bytes());
      EXPECT_EQ(pool.used_blocks(), cache.held_blocks());
      EXPECT_EQ(pool.free_blocks(), pool.capacity() - cache.held_blocks());
    }
    EXPECT_EQ(pool.free_blocks(), pool.capacity());  // the sequence gave everything back
  }
}

TEST(PagedKvCache, FreedBlocksAreReusedByTheNextSequence) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  // Room for one uncompressed 512-token prompt only: 3 layers x 2 heads x 32 blocks.
  BlockPool pool(layout, 192, adakv::kernels::cpu_backend());
  CompressionConfig ada;
  ada.budget_ratio = 0.2;
  ada.scope = Scope::kGlobal;  // needs the full size during prefill, then frees 80%
  PagedKvCache first(pool, c, ada);
  prefill(first, c, random_activations(c, 512, 3));
  PagedKvCache second(pool, c, ada);
  CompressionConfig full;
  full.policy = Policy::kFull;
  PagedKvCache third(pool, c, full);
  // A full 256-token sequence (96 blocks) fits only because the first one was compacted.
  EXPECT_NO_THROW(prefill(third, c, random_activations(c, 256, 4)));
  PagedKvCache fourth(pool, c, full);
  EXPECT_THROW(prefill(fourth, c, random_activations(c, 512, 5)), std::length_error);
}

// Look-ahead: the queries of the tokens decoded after the prompt join the window's, exactly as
// if prompt and look-ahead tokens were one sequence observed by its last W + steps queries;
// then the cache is the prompt's again. 96 tokens fill 6 blocks of 16, so the look-ahead
// tokens open a 7th block per head, which the roll-back returns.
TEST(PagedKvCache, LookAheadQueriesJoinTheWindowThenTheCacheRollsBack) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  BlockPool pool(layout, 1000, adakv::kernels::cpu_backend());
  CompressionConfig ada;
  ada.budget_ratio = 0.2;
  ada.window = 8;
  ada.lookahead = 5;
  const size_t n = 96, steps = 5;
  const auto prompt = random_activations(c, n, 7);
  Activations all = prompt;  // prompt then look-ahead tokens, as one sequence
  std::vector<Activations> tokens;
  for (uint32_t s = 0; s < steps; ++s) {
    tokens.push_back(random_activations(c, 1, 70 + s));
    all.q.insert(all.q.end(), tokens.back().q.begin(), tokens.back().q.end());
    all.k.insert(all.k.end(), tokens.back().k.begin(), tokens.back().k.end());
  }

  PagedKvCache cache(pool, c, ada, {}, /*record_scores=*/true);
  prefill(cache, c, prompt);
  ASSERT_TRUE(cache.awaiting_lookahead());
  EXPECT_THROW(cache.compressed_copy(ada), std::logic_error);  // not scored yet
  const size_t held = cache.held_blocks();
  EXPECT_EQ(held, c.n_layers * c.n_kv_heads * 6);
  for (const auto& t : tokens) decode(cache, c, t);
  EXPECT_EQ(cache.held_blocks(), c.n_layers * c.n_kv_heads * 7);
  cache.finish_lookahead();

  EXPECT_FALSE(cache.awaiting_lookahead());
  EXPECT_EQ(cache.next_position(), n);
  EXPECT_EQ(cache.held_blocks(), held);
  EXPECT_EQ(pool.used_blocks(), held);
  EXPECT_EQ(cache.report().lookahead_tokens, steps);
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (size_t g = 0; g < c.n_kv_heads; ++g) EXPECT_EQ(cache.head_length(l, g), n);
  }
  const auto want = adakv::compression::score_observations(
      all.q.data() + (n - ada.window) * all.q_stride, all.q_stride, all.k.data(), all.kv_stride,
      n + steps, ada.window + steps, c.n_heads, c.n_kv_heads, c.head_dim, ada, nullptr,
      adakv::kernels::cpu_backend());
  ASSERT_EQ(want.size(), c.n_kv_heads * (n - ada.window));
  for (size_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(cache.scores()[l], want) << "layer " << l;

  // Without look-ahead steps the scores are the window's alone, as recorded without look-ahead.
  CompressionConfig plain = ada;
  plain.lookahead = 0;
  PagedKvCache idle(pool, c, ada, {}, true), reference(pool, c, plain, {}, true);
  prefill(idle, c, prompt);
  prefill(reference, c, prompt);
  idle.finish_lookahead();
  EXPECT_EQ(idle.scores(), reference.scores());
  EXPECT_NE(reference.scores()[0], want);  // the look-ahead queries did change the scores
  EXPECT_EQ(idle.report().lookahead_tokens, 0u);

  // The copy keeps the window and its share of the prompt.
  const auto copy = cache.compressed_copy(ada);
  EXPECT_EQ(copy->next_position(), n);
  EXPECT_LE(copy->held_bytes(), 0.25 * copy->full_bytes());
}

// budget_scores = peak moves Ada-KV's budgets and nothing else: SnapKV keeps the same rows,
// and a recording's copy keeps what a prefill under the same config keeps, for both scopes.
TEST(PagedKvCache, PeakBudgetScoresMoveOnlyAdaKVsBudgets) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  BlockPool pool(layout, 1000, adakv::kernels::cpu_backend());
  const auto prompt = random_activations(c, 300, 9);
  const auto token = random_activations(c, 1, 90);
  for (Scope scope : {Scope::kLayer, Scope::kGlobal}) {
    SCOPED_TRACE(scope == Scope::kLayer ? "scope layer" : "scope global");
    CompressionConfig sum;
    sum.budget_ratio = 0.2;
    sum.scope = scope;
    CompressionConfig peak = sum;
    peak.budget_scores = adakv::compression::BudgetScores::kPeak;

    PagedKvCache ada_sum(pool, c, sum), ada_peak(pool, c, peak);
    prefill(ada_sum, c, prompt);
    prefill(ada_peak, c, prompt);
    EXPECT_NE(ada_sum.report().budgets, ada_peak.report().budgets);

    PagedKvCache recording(pool, c, peak, {}, /*record_scores=*/true);
    prefill(recording, c, prompt);
    const auto copy = recording.compressed_copy(peak);
    EXPECT_EQ(copy->report().budgets, ada_peak.report().budgets);
    EXPECT_EQ(decode(*copy, c, token), decode(ada_peak, c, token));

    CompressionConfig snap_sum = sum, snap_peak = peak;
    snap_sum.policy = snap_peak.policy = Policy::kSnapKV;
    snap_sum.scope = snap_peak.scope = Scope::kLayer;  // global is Ada-KV's alone
    PagedKvCache a(pool, c, snap_sum), b(pool, c, snap_peak);
    prefill(a, c, prompt);
    prefill(b, c, prompt);
    EXPECT_EQ(decode(a, c, token), decode(b, c, token));
  }
}

TEST(BlockPool, DoubleFreeAndBadIdsAreRejected) {
  BlockPool pool({16, 8, adakv::kernels::KvDtype::kF32}, 4, adakv::kernels::cpu_backend());
  const int32_t id = pool.allocate();
  pool.release(id);
  EXPECT_THROW(pool.release(id), std::logic_error);
  EXPECT_THROW(pool.release(4), std::logic_error);
  EXPECT_THROW(pool.release(-1), std::logic_error);
  for (int i = 0; i < 4; ++i) EXPECT_GE(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), -1);
}

TEST(BlockPool, ASharedBlockIsFreeAfterItsLastReference) {
  BlockPool pool({16, 8, adakv::kernels::KvDtype::kF32}, 4, adakv::kernels::cpu_backend());
  const int32_t id = pool.allocate();
  pool.share(id);
  pool.share(id);
  EXPECT_EQ(pool.references(id), 3u);
  pool.release(id);
  pool.release(id);
  EXPECT_EQ(pool.free_blocks(), 3u);
  pool.release(id);
  EXPECT_EQ(pool.free_blocks(), 4u);
  EXPECT_THROW(pool.share(id), std::logic_error);
  EXPECT_THROW(pool.share(9), std::logic_error);
}

// n samples of one prompt: each shared copy references the compressed prompt's full blocks
// and owns a copy of each head's partial last block, so the pool holds the prompt once; every
// sample then decodes as the original would, and the blocks go back with their last holder.
TEST(PagedKvCache, SamplesShareTheCompressedPromptsFullBlocks) {
  const auto c = tiny_config();
  const adakv::kernels::KvBlockLayout layout{16, c.head_dim, adakv::kernels::KvDtype::kF32};
  BlockPool pool(layout, 1000, adakv::kernels::cpu_backend());
  CompressionConfig ada;
  ada.budget_ratio = 0.2;
  const size_t n = 1000;
  auto first = std::make_unique<PagedKvCache>(pool, c, ada);
  prefill(*first, c, random_activations(c, n, 5));
  size_t partial = 0;
  for (size_t l = 0; l < c.n_layers; ++l) {
    for (size_t g = 0; g < c.n_kv_heads; ++g) partial += first->head_length(l, g) % 16 != 0;
  }
  ASSERT_GT(partial, 0u);  // the case that needs the copies
  const size_t prompt_blocks = pool.used_blocks();
  std::vector<std::unique_ptr<PagedKvCache>> samples;
  for (int i = 0; i < 3; ++i) samples.push_back(first->shared_copy());
  EXPECT_EQ(pool.used_blocks(), prompt_blocks + 3 * partial);
  for (const auto& s : samples) {
    EXPECT_EQ(s->held_blocks(), first->held_blocks());
    EXPECT_EQ(s->next_position(), first->next_position());
    EXPECT_EQ(s->model_kept_tokens(c.n_kv_heads), first->model_kept_tokens(c.n_kv_heads));
  }
  // The same next token through each: the same attention output, bit for bit; different
  // tokens in the samples do not disturb each other's rows.
  const auto token = random_activations(c, 1, 6);
  const auto want = decode(*first, c, token);
  EXPECT_EQ(decode(*samples[0], c, token), want);
  decode(*samples[1], c, random_activations(c, 1, 7));
  EXPECT_EQ(decode(*samples[2], c, token), want);
  const auto again = random_activations(c, 1, 8);
  EXPECT_EQ(decode(*samples[2], c, again), decode(*first, c, again));
  EXPECT_THROW(first->shared_copy(), std::logic_error);  // tokens appended after the prompt
  // The first sample gone, its shared blocks stay with the others.
  first.reset();
  EXPECT_GE(pool.used_blocks(), prompt_blocks - partial + 3 * partial);
  for (const auto& s : samples) EXPECT_LE(s->held_blocks(), pool.used_blocks());
  samples.clear();
  EXPECT_EQ(pool.free_blocks(), pool.capacity());
}

}  // namespace

// On the guarded backend the pool's blocks are device memory in all but name: the cache fills
// them through the backend's ops (uploaded activations, kv_append, compaction), and a host read
// of a block outside an op faults, as it would on a GPU, while a download of it works.
TEST(PagedKvCacheDeathTest, AHostReadOfAKvBlockFaultsOnTheGuardedBackend) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto backend = adakv::kernels::make_guarded_backend();
  const auto c = tiny_config();
  BlockPool pool({16, c.head_dim, adakv::kernels::KvDtype::kBF16}, 200, *backend);
  CompressionConfig ada;
  ada.policy = Policy::kAdaKV;
  ada.budget_ratio = 0.3;
  PagedKvCache cache(pool, c, ada);
  const auto a = random_activations(c, 100, 3);
  auto upload = [&](const std::vector<float>& host) {
    auto buffer = backend->allocate(host.size() * sizeof(float));
    backend->upload(buffer.data(), host.data(), host.size() * sizeof(float));
    return buffer;
  };
  const auto q = upload(a.q), k = upload(a.k), v = upload(a.v);
  auto out = backend->allocate(a.n * c.q_width() * sizeof(float));
  for (size_t l = 0; l < c.n_layers; ++l) {
    cache.append_and_attend(l, q.as<float>(), a.q_stride, k.as<float>(), v.as<float>(), a.kv_stride,
                            a.n, out.as<float>());
  }
  cache.commit(a.n);
  ASSERT_GT(cache.held_blocks(), 0u);
  EXPECT_LT(cache.held_blocks(), c.n_layers * c.n_kv_heads * ((a.n + 15) / 16));
  // The first block allocated is block 0: downloading it works, reading it from the host faults.
  std::vector<uint8_t> block(pool.block_bytes());
  backend->download(block.data(), pool.block(0), block.size());
  EXPECT_NE(std::count(block.begin(), block.end(), uint8_t{0}), std::ptrdiff_t(block.size()));
  EXPECT_DEATH(
      {
        const volatile uint8_t byte = pool.block(0)[0];
        (void)byte;
      },
      "");
}
