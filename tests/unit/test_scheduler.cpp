// The serving loop's scheduler, driven without a model: the test plays the engine's part
// (samples a token where the plan asks for logits, reports kept counts after compression) and
// checks chunking, admission, FCFS order, preemption and the per-rank block accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>

#include "runtime/scheduler.h"

namespace adakv::runtime {
namespace {

model::ModelConfig tiny_model() {
  model::ModelConfig c;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.rope_dim = 8;
  c.ffn_dim = 16;
  c.vocab_size = 64;
  c.context_length = 4096;
  return c;
}

ServingConfig config(size_t blocks, size_t chunk = 100, size_t batched = 1000) {
  ServingConfig c;
  c.kv_pool_blocks = blocks;
  c.block_tokens = 16;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = batched;
  c.prefill_chunk = chunk;
  return c;
}

std::shared_ptr<ScheduledSeq> sequence(uint64_t id, size_t prompt, size_t max_new,
                                       compression::Policy policy = compression::Policy::kFull) {
  auto s = std::make_shared<ScheduledSeq>();
  s->id = id;
  s->prompt.assign(prompt, 7);
  s->max_new = max_new;
  s->compression.policy = policy;
  s->stop_ids = {63};
  return s;
}

// Plays the engine: every step's logits become a token (id = step count), a finished sequence
// ends, a compressed one reports `kept` tokens per head (the prompt for the full policy).
struct Driver {
  explicit Driver(Scheduler& s) : sched(s) {}
  Scheduler& sched;
  std::map<uint64_t, std::shared_ptr<ScheduledSeq>> seqs;
  std::map<uint64_t, size_t> kept;  // tokens per head after compression; absent: the prompt
  size_t context_kept = 20;         // tokens per head a compressed context keeps
  std::vector<StepPlan> plans;
  std::vector<std::vector<EntryKind>> kinds;

  void add(std::shared_ptr<ScheduledSeq> s) {
    seqs[s->id] = s;
    sched.add(s);
  }
  // Another sample of `source`'s request: its first token is drawn with the source's.
  void add_sample(std::shared_ptr<ScheduledSeq> s, uint64_t source) {
    s->sample_of = source;
    seqs[s->id] = s;
    sched.add_sample(s);
  }
  void draw(ScheduledSeq& s) {
    s.output.push_back(int32_t(s.output.size()));
    if (s.output.size() >= s.max_new) sched.finish(s.id, true);
  }
  // The next plan, launched (its sequences are in flight until it lands).
  size_t launch() {
    std::vector<EntryKind> k;
    plans.push_back(sched.schedule(k));
    kinds.push_back(std::move(k));
    return plans.size() - 1;
  }
  // Plan p's results: compressions, then tokens where it asked for logits.
  void land(size_t p) {
    const StepPlan& plan = plans[p];
    const std::vector<EntryKind>& k = kinds[p];
    sched.landed(plan);
    for (size_t i = 0; i < plan.entries.size(); ++i) {
      if (sched.is_context(plan.entries[i].id)) {
        if (k[i] == EntryKind::kLastPrefillChunk) {
          sched.context_compressed(
              plan.entries[i].id,
              std::vector<std::vector<size_t>>(2, std::vector<size_t>(2, context_kept)));
        }
        continue;
      }
      ScheduledSeq& s = *seqs.at(plan.entries[i].id);
      if (k[i] == EntryKind::kLastPrefillChunk) {
        const size_t n = kept.count(s.id) ? kept.at(s.id) : s.prompt.size();
        sched.set_kept(s, std::vector<std::vector<size_t>>(2, std::vector<size_t>(2, n)));
      }
      if (!plan.entries[i].logits) continue;
      if (k[i] == EntryKind::kLastPrefillChunk && !s.output.empty()) continue;
      if (k[i] == EntryKind::kLastPrefillChunk) {
        for (auto& [id, other] : seqs) {
          if (other->sample_of == s.id && other->output.empty() &&
              other->phase == SeqPhase::kWaiting) {
            draw(*other);
          }
        }
      }
      draw(s);
    }
  }
  void step() { land(launch()); }
  // Plays the engine under pipeline stages: plans launch until `depth` are in flight (or one
  // has nothing to run), then the oldest lands. check(p, in_flight) sees each plan p as it
  // launches, beside the plans already in flight.
  template <class Check>
  void run_in_flight(size_t depth, Check&& check) {
    std::deque<size_t> in_flight;
    for (size_t guard = 0; guard < 10000; ++guard) {
      while (in_flight.size() < depth && sched.has_work()) {
        const size_t p = launch();
        check(p, in_flight);
        in_flight.push_back(p);
        if (plans[p].entries.empty()) break;
      }
      if (in_flight.empty()) break;
      land(in_flight.front());
      in_flight.pop_front();
    }
    ASSERT_FALSE(sched.has_work()) << "the scheduler never finished";
  }
  void run(size_t max_steps = 10000) {
    for (size_t i = 0; i < max_steps && sched.has_work(); ++i) step();
    ASSERT_FALSE(sched.has_work()) << "the scheduler never finished";
  }
};

TEST(Scheduler, ChunksLongPromptsSoTheLastChunkHoldsTheWindow) {
  Scheduler sched(config(1000, 100), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  // Scope global scores every layer together: prefilled in chunks of tokens.
  auto s = sequence(1, 220, 1, compression::Policy::kAdaKV);  // window 32
  s->compression.scope = compression::Scope::kGlobal;
  d.add(s);
  d.run();
  std::vector<size_t> chunks;
  for (const auto& p : d.plans) {
    for (const auto& e : p.entries) chunks.push_back(e.tokens.size());
  }
  // 100, then 88 (not 100: the remaining 20 would not hold the window), then the last 32.
  EXPECT_EQ(chunks, (std::vector<size_t>{100, 88, 32}));
  EXPECT_EQ(d.kinds[2][0], EntryKind::kLastPrefillChunk);
  EXPECT_TRUE(d.plans[2].entries[0].logits);
  EXPECT_FALSE(d.plans[0].entries[0].logits);
}

TEST(Scheduler, PrefillsACompressingLongPromptLayerByLayerOneAtATime) {
  // 200 tokens per step: with a 50-token prompt beside it, or a decode, a 220-token prompt
  // gets one of the 2 layers (110 tokens' worth) per step.
  Scheduler sched(config(1000, 100, 200), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 50, 4));
  d.add(sequence(2, 220, 2, compression::Policy::kAdaKV));
  d.add(sequence(3, 220, 2, compression::Policy::kSnapKV));
  d.step();
  // The short prompt, then the first layer of the long one, last; the next long prompt waits.
  ASSERT_EQ(d.plans[0].entries.size(), 2u);
  EXPECT_EQ(d.plans[0].start.size(), 2u);
  const StepEntry& first = d.plans[0].entries[1];
  EXPECT_EQ(first.id, 2u);
  EXPECT_EQ(first.tokens.size(), 220u);
  EXPECT_EQ(first.layer_begin, 0u);
  EXPECT_EQ(first.layer_end, 1u);
  EXPECT_FALSE(first.logits);
  EXPECT_EQ(d.kinds[0][1], EntryKind::kPrefillChunk);
  d.step();
  ASSERT_EQ(d.plans[1].entries.size(), 2u);
  EXPECT_TRUE(d.plans[1].start.empty());
  EXPECT_EQ(d.kinds[1][0], EntryKind::kDecode);
  const StepEntry& second = d.plans[1].entries[1];
  EXPECT_EQ(second.id, 2u);
  EXPECT_EQ(second.layer_begin, 1u);
  EXPECT_EQ(second.layer_end, 2u);
  EXPECT_TRUE(second.logits);
  EXPECT_EQ(d.kinds[1][1], EntryKind::kLastPrefillChunk);
  d.step();
  ASSERT_EQ(d.plans[2].start.size(), 1u);
  EXPECT_EQ(d.plans[2].start[0].id, 3u);
  EXPECT_EQ(d.plans[2].entries.back().id, 3u);
  EXPECT_EQ(d.plans[2].entries.back().layer_begin, 0u);
  d.run();
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_EQ(d.seqs[id]->output.size(), d.seqs[id]->max_new);
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

TEST(Scheduler, APreemptedLayeredPromptStartsAgainAtTheFirstLayer) {
  // A 528-token full-cache prompt in one chunk (33 blocks per head, 132 in all) and a 640-token
  // Ada-KV 20% one, one layer per step, reserving 2 * (17 + 2) blocks: 170 fill the pool, so
  // the first decode, which opens a block per head, preempts the layered prompt between its
  // layers.
  Scheduler sched(config(170, 600), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 528, 20));
  d.add(sequence(2, 640, 2, compression::Policy::kAdaKV));
  d.kept[2] = 128;
  d.step();
  ASSERT_EQ(d.plans[0].entries.size(), 2u);
  EXPECT_EQ(d.plans[0].entries[1].layer_end, 1u);
  EXPECT_EQ(sched.used_blocks(0), 170u);
  d.step();
  EXPECT_EQ(d.plans[1].release, (std::vector<uint64_t>{2}));
  EXPECT_EQ(sched.stats().preemptions, 1u);
  EXPECT_EQ(d.seqs[2]->layers_done, 0u);
  d.run();
  size_t restart = 0;
  for (size_t i = 2; i < d.plans.size(); ++i) {
    for (const auto& st : d.plans[i].start) {
      if (st.id == 2) restart = i;
    }
  }
  ASSERT_GT(restart, 0u);
  EXPECT_EQ(d.plans[restart].entries.back().id, 2u);
  EXPECT_EQ(d.plans[restart].entries.back().layer_begin, 0u);
  EXPECT_EQ(d.seqs[1]->output.size(), 20u);
  EXPECT_EQ(d.seqs[2]->output.size(), 2u);
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

TEST(Scheduler, AShortPromptIsOneChunk) {
  Scheduler sched(config(1000, 100), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 90, 3));
  d.step();
  ASSERT_EQ(d.plans[0].start.size(), 1u);
  EXPECT_EQ(d.plans[0].start[0].prompt_tokens, 90u);
  ASSERT_EQ(d.plans[0].entries.size(), 1u);
  EXPECT_EQ(d.plans[0].entries[0].tokens.size(), 90u);
  d.run();
  // Two decodes after the prefill's token, then the report and release of the finished one.
  EXPECT_EQ(d.plans.size(), 4u);
  EXPECT_EQ(d.plans.back().report, (std::vector<uint64_t>{1}));
  EXPECT_EQ(d.plans.back().release, (std::vector<uint64_t>{1}));
}

TEST(Scheduler, AdmitsWhatThePoolHoldsFirstComeFirstServed) {
  // 2 layers x 2 KV heads; a 64-token prompt takes 4 blocks per head: 16 blocks.
  Scheduler sched(config(45, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  for (uint64_t id = 1; id <= 3; ++id) d.add(sequence(id, 64, 2));
  d.step();
  ASSERT_EQ(d.plans[0].start.size(), 2u);
  EXPECT_EQ(d.plans[0].start[0].id, 1u);
  EXPECT_EQ(d.plans[0].start[1].id, 2u);
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_EQ(sched.used_blocks(0), 32u);
  d.run();
  EXPECT_EQ(sched.used_blocks(0), 0u);
  EXPECT_EQ(sched.stats().preemptions, 0u);
}

TEST(Scheduler, CompressedSequencesFreeRoomForMore) {
  // Ada-KV keeps 16 of 64 prompt tokens per head: 1 block per head instead of 4.
  Scheduler sched(config(45, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  for (uint64_t id = 1; id <= 4; ++id) {
    d.kept[id] = 16;
    d.add(sequence(id, 64, 40, compression::Policy::kAdaKV));
  }
  size_t peak = 0;
  for (int i = 0; i < 6; ++i) {
    d.step();
    peak = std::max(peak, sched.num_running());
  }
  EXPECT_EQ(peak, 4u);  // the full cache would hold 2
  d.run();
}

TEST(Scheduler, PreemptsTheNewestAndReplaysItsTokens) {
  // Two sequences of 24 prompt tokens take 2 blocks per head each (16 of 20); the 33rd token
  // needs a third block per head, which the pool cannot give both: the newest is preempted
  // after it generated 9 tokens.
  Scheduler sched(config(20, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 24, 30));
  d.add(sequence(2, 24, 30));
  d.run();
  EXPECT_GE(sched.stats().preemptions, 1u);
  EXPECT_GE(d.seqs[2]->preemptions, 1u);
  EXPECT_EQ(d.seqs[1]->preemptions, 0u);  // the oldest always goes on
  for (const auto& [id, s] : d.seqs) {
    ASSERT_EQ(s->output.size(), 30u) << "sequence " << id;
    for (size_t i = 0; i < 30; ++i) EXPECT_EQ(s->output[i], int32_t(i));
  }
  // The preempted sequence was released, readmitted with its whole prompt, then fed its
  // earlier tokens again one per step (no logits wanted until the last of them).
  bool released = false, replayed = false;
  for (size_t p = 0; p < d.plans.size(); ++p) {
    for (uint64_t id : d.plans[p].release) released |= id == 2;
    for (size_t i = 0; released && i < d.plans[p].entries.size(); ++i) {
      const auto& e = d.plans[p].entries[i];
      if (e.id == 2 && d.kinds[p][i] == EntryKind::kDecode && !e.logits) replayed = true;
    }
  }
  EXPECT_TRUE(released);
  EXPECT_TRUE(replayed);
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

TEST(Scheduler, AccountsEachRanksOwnHeads) {
  Scheduler sched(config(100, 512), tiny_model(), 2, model::LmHeadMode::kReplicated);
  auto s = sequence(1, 64, 5, compression::Policy::kAdaKV);
  sched.add(s);
  std::vector<EntryKind> kinds;
  sched.schedule(kinds);
  // Uncompressed: 2 layers x 1 head x 4 blocks on each rank.
  EXPECT_EQ(sched.used_blocks(0), 8u);
  EXPECT_EQ(sched.used_blocks(1), 8u);
  // Head 0 keeps 50 tokens, head 1 keeps 14: 4 blocks vs 1 per layer.
  sched.set_kept(*s, {{50, 14}, {50, 14}});
  EXPECT_EQ(sched.used_blocks(0), 8u);
  EXPECT_EQ(sched.used_blocks(1), 2u);
}

TEST(Scheduler, AccountsEachStagesOwnLayers) {
  // TP 2 x PP 2 over 2 layers: ranks 0 and 1 (stage 0) hold layer 0, ranks 2 and 3 layer 1.
  Scheduler sched(config(100, 512), tiny_model(), 2, model::LmHeadMode::kReplicated, 2);
  auto s = sequence(1, 64, 5, compression::Policy::kAdaKV);
  sched.add(s);
  std::vector<EntryKind> kinds;
  sched.schedule(kinds);
  // Uncompressed: 1 layer x 1 head x 4 blocks on each rank.
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(sched.used_blocks(r), 4u) << r;
  // Layer 0 keeps 50 and 14 tokens, layer 1 keeps 14 and 50.
  sched.set_kept(*s, {{50, 14}, {14, 50}});
  EXPECT_EQ(sched.used_blocks(0), 4u);
  EXPECT_EQ(sched.used_blocks(1), 1u);
  EXPECT_EQ(sched.used_blocks(2), 1u);
  EXPECT_EQ(sched.used_blocks(3), 4u);
}

TEST(Scheduler, ReservesThePeakThePrefillReaches) {
  // 640 tokens, Ada-KV 10% (64 per head): one forward writes only the kept rows, so a layer's
  // two heads reserve their shared 2 * 65 tokens (+ a block each for rounding), not 40 blocks.
  auto ada = sequence(1, 640, 4, compression::Policy::kAdaKV);
  ada->compression.budget_ratio = 0.1;
  Scheduler one(config(1000, 1024), tiny_model(), 1, model::LmHeadMode::kReplicated);
  one.add(ada);
  std::vector<EntryKind> kinds;
  one.schedule(kinds);
  EXPECT_EQ(one.used_blocks(0), 2u * (9 + 2));
  // Longer than a chunk, it is prefilled layer by layer: no more.
  auto layered = sequence(2, 640, 4, compression::Policy::kAdaKV);
  layered->compression.budget_ratio = 0.1;
  Scheduler small_chunks(config(1000, 256), tiny_model(), 1, model::LmHeadMode::kReplicated);
  small_chunks.add(layered);
  small_chunks.schedule(kinds);
  EXPECT_EQ(small_chunks.used_blocks(0), 2u * (9 + 2));
  // Prefilled in chunks of tokens (scope global), or waiting for look-ahead, it holds the whole
  // prompt for a while.
  auto chunked = sequence(6, 640, 4, compression::Policy::kAdaKV);
  chunked->compression.budget_ratio = 0.1;
  chunked->compression.scope = compression::Scope::kGlobal;
  Scheduler global(config(1000, 256), tiny_model(), 1, model::LmHeadMode::kReplicated);
  global.add(chunked);
  global.schedule(kinds);
  EXPECT_EQ(global.used_blocks(0), 2u * 2 * 40);
  auto ahead = sequence(3, 640, 4, compression::Policy::kAdaKV);
  ahead->compression.budget_ratio = 0.1;
  ahead->lookahead = 16;
  Scheduler lookahead(config(1000, 1024), tiny_model(), 1, model::LmHeadMode::kReplicated);
  lookahead.add(ahead);
  lookahead.schedule(kinds);
  EXPECT_EQ(lookahead.used_blocks(0), 2u * 2 * 41);
  // Two ranks of one head each: a head may take most of its layer's budget, so the whole.
  auto split = sequence(4, 640, 4, compression::Policy::kAdaKV);
  split->compression.budget_ratio = 0.1;
  Scheduler tp(config(1000, 1024), tiny_model(), 2, model::LmHeadMode::kReplicated);
  tp.add(split);
  tp.schedule(kinds);
  EXPECT_EQ(tp.used_blocks(1), 2u * 40);
  // SnapKV: every head keeps exactly the budget.
  auto snap = sequence(5, 640, 4, compression::Policy::kSnapKV);
  snap->compression.budget_ratio = 0.1;
  Scheduler s(config(1000, 1024), tiny_model(), 2, model::LmHeadMode::kReplicated);
  s.add(snap);
  s.schedule(kinds);
  EXPECT_EQ(s.used_blocks(1), 2u * 4);
}

TEST(Scheduler, SamplesForkFromTheCompressedPromptAndCountItOnce) {
  Scheduler sched(config(1000, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  // Ada-KV keeps 20 tokens per head: one full block, shared, and a partial one, copied.
  d.kept[1] = 20;
  d.add(sequence(1, 64, 6, compression::Policy::kAdaKV));
  for (uint64_t id = 2; id <= 4; ++id) {
    d.add_sample(sequence(id, 64, 6, compression::Policy::kAdaKV), 1);
  }
  d.step();  // the prompt, once; every sample's first token from its logits
  EXPECT_EQ(d.plans[0].entries.size(), 1u);
  EXPECT_EQ(sched.num_running(), 1u);
  EXPECT_EQ(sched.num_waiting(), 3u);
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_EQ(d.seqs[id]->output.size(), 1u);
  d.step();  // the forks, then one decode each
  ASSERT_EQ(d.plans[1].fork.size(), 3u);
  for (const auto& f : d.plans[1].fork) {
    EXPECT_TRUE(f.share);
    EXPECT_EQ(f.source, 1u);
  }
  EXPECT_EQ(d.plans[1].entries.size(), 4u);
  EXPECT_EQ(sched.num_running(), 4u);
  // 2 layers x 2 heads: 4 shared full blocks, and 4 partial blocks per sample (21 tokens
  // each now), where 4 separate sequences would hold 4 x 8.
  EXPECT_EQ(sched.used_blocks(0), 4u + 4 * 4);
  EXPECT_EQ(sched.compressed_blocks(0), 4u + 4 * 4);
  d.run();
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_EQ(d.seqs[id]->output.size(), 6u);
  EXPECT_EQ(sched.used_blocks(0), 0u);
  size_t prompts = 0;
  for (const auto& p : d.plans) {
    for (const auto& e : p.entries) prompts += e.tokens.size() > 1;
  }
  EXPECT_EQ(prompts, 1u);
}

TEST(Scheduler, SamplesWhoseSourceEndedFirstPrefillAlone) {
  Scheduler sched(config(1000, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 40, 1, compression::Policy::kAdaKV));  // ends at its first token
  d.add_sample(sequence(2, 40, 3, compression::Policy::kAdaKV), 1);
  d.run();
  EXPECT_EQ(d.seqs[2]->output.size(), 3u);
  size_t prompts = 0;
  for (const auto& p : d.plans) {
    EXPECT_TRUE(p.fork.empty());
    for (const auto& e : p.entries) prompts += e.tokens.size() > 1;
  }
  EXPECT_EQ(prompts, 2u);
}

// The cached spans the plans attached to sequence `id`, and the prompt tokens its prefill
// chunks computed (entries of more than one token).
std::pair<size_t, size_t> attached_and_computed(const Driver& d, uint64_t id) {
  size_t attached = 0, computed = 0;
  for (const auto& p : d.plans) {
    for (const auto& link : p.prefix_attach) attached += link.id == id;
    for (const auto& e : p.entries) {
      if (e.id == id && e.tokens.size() > 1) computed += e.tokens.size();
    }
  }
  return {attached, computed};
}

// A sample that prefills alone starts from the spans its request's first sample left, as any
// prompt kept whole does: here its source ended at its first token, before the fork.
TEST(Scheduler, ASampleThatPrefillsAloneTakesTheSpansItsSourceLeft) {
  Scheduler sched(config(1000, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  auto source = sequence(1, 100, 1);
  auto sample = sequence(2, 100, 3);
  source->cache_prefix = sample->cache_prefix = true;
  d.add(source);
  d.add_sample(sample, 1);
  d.run();
  ASSERT_EQ(d.seqs[2]->output.size(), 3u);
  for (const auto& p : d.plans) EXPECT_TRUE(p.fork.empty());
  const auto [attached, computed] = attached_and_computed(d, 2);
  EXPECT_EQ(attached, 6u);  // (100 - 1) / 16 spans; the last token is computed
  EXPECT_EQ(computed, 4u);
  EXPECT_EQ(d.seqs[2]->cached_tokens, 96u);
  EXPECT_EQ(sched.prefix_stats().hit_tokens, 96u);
  EXPECT_EQ(sched.prefix_stats().queried_tokens, 200u);
  // Nothing still referenced, and the spans held once.
  EXPECT_EQ(sched.cached_blocks(0, true), 24u);
  EXPECT_EQ(sched.cached_blocks(0, false), 24u);
  EXPECT_EQ(sched.used_blocks(0), 24u);
}

// A preempted sample takes back the spans its request's shared prompt still holds (the first
// 16 tokens), so it computes the rest of the prompt only.
TEST(Scheduler, APreemptedSampleTakesTheSpansTheSharedPromptHolds) {
  Scheduler sched(config(24, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  for (uint64_t id = 1; id <= 3; ++id) {
    auto s = sequence(id, 24, 12);
    s->cache_prefix = true;
    if (id == 1) {
      d.add(s);
    } else {
      d.add_sample(s, 1);
    }
  }
  d.run();
  ASSERT_GE(d.seqs[3]->preemptions, 1u);
  const auto [attached, computed] = attached_and_computed(d, 3);
  EXPECT_EQ(attached, d.seqs[3]->preemptions);
  EXPECT_EQ(computed, 8u * d.seqs[3]->preemptions);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(d.seqs[id]->output.size(), 12u);
    for (size_t i = 0; i < 12; ++i) EXPECT_EQ(d.seqs[id]->output[i], int32_t(i));
  }
  EXPECT_EQ(sched.cached_blocks(0, true), sched.cached_blocks(0, false));
  EXPECT_EQ(sched.used_blocks(0), sched.cached_blocks(0, false));
}

TEST(Scheduler, APreemptedSampleLeavesTheSharedPromptToTheOthers) {
  // 24 tokens per head: 4 shared blocks and 4 partial ones per sample (16 in all). At their
  // 32nd token each opens 4 more: 28 do not fit 24, so the newest is preempted (its 4 own
  // blocks back, the shared ones stay) and prefills alone once there is room.
  Scheduler sched(config(24, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 24, 12));
  d.add_sample(sequence(2, 24, 12), 1);
  d.add_sample(sequence(3, 24, 12), 1);
  d.run();
  EXPECT_EQ(d.plans[1].fork.size(), 2u);
  EXPECT_GE(d.seqs[3]->preemptions, 1u);
  EXPECT_EQ(d.seqs[2]->preemptions, 0u);
  EXPECT_EQ(d.seqs[1]->preemptions, 0u);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(d.seqs[id]->output.size(), 12u);
    for (size_t i = 0; i < 12; ++i) EXPECT_EQ(d.seqs[id]->output[i], int32_t(i));
  }
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

TEST(Scheduler, RefusesARequestThePoolCanNeverHold) {
  Scheduler sched(config(10, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  try {
    sched.add(sequence(1, 64, 16));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(sched.has_work());
}

TEST(Scheduler, KeepsPrefillWithinTheTokenBudget) {
  Scheduler sched(config(1000, 64, 100), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  for (uint64_t id = 1; id <= 3; ++id) d.add(sequence(id, 60, 2));
  d.step();
  // 60 + 60 > 100: one prompt per step.
  EXPECT_EQ(d.plans[0].entries.size(), 1u);
  d.step();
  EXPECT_EQ(d.plans[1].tokens(), 61u);  // a decode and the next prompt
  d.run();
}

TEST(Scheduler, AbortOfAWaitingSequenceNeedsNoRelease) {
  Scheduler sched(config(25, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  d.add(sequence(1, 64, 2));
  d.add(sequence(2, 64, 2));
  d.step();
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_FALSE(sched.finish(2, true));
  EXPECT_EQ(sched.num_waiting(), 0u);
  d.run();
}

// Pipeline stages: two plans in flight at once (the engine lands the older before it launches a
// third). A plan never holds a sequence that waits for another plan's result, the decoders split
// evenly between the two, a long prompt's chunks go out back to back, and every sequence still
// gets all its tokens in order.
TEST(Scheduler, PipelineStagesKeepTwoEvenPlansInFlight) {
  Scheduler sched(config(1000, 64), tiny_model(), 1, model::LmHeadMode::kReplicated, 2);
  Driver d(sched);
  for (uint64_t id = 1; id <= 4; ++id) d.add(sequence(id, 20, 12));
  d.add(sequence(5, 300, 3));  // five chunks of 64 tokens
  std::vector<size_t> decode_sizes;
  d.run_in_flight(2, [&](size_t p, const std::deque<size_t>& in_flight) {
    // No sequence of this plan waits in another plan in flight, unless for its next chunk.
    for (size_t i = 0; i < d.plans[p].entries.size(); ++i) {
      const uint64_t id = d.plans[p].entries[i].id;
      for (size_t q : in_flight) {
        for (size_t j = 0; j < d.plans[q].entries.size(); ++j) {
          if (d.plans[q].entries[j].id != id) continue;
          EXPECT_EQ(d.kinds[q][j], EntryKind::kPrefillChunk) << "plan " << p << " id " << id;
        }
      }
    }
    size_t decodes = 0;
    for (EntryKind k : d.kinds[p]) decodes += k == EntryKind::kDecode;
    if (decodes == d.plans[p].entries.size() && decodes > 0) decode_sizes.push_back(decodes);
  });
  for (const auto& [id, s] : d.seqs) {
    ASSERT_EQ(s->output.size(), s->max_new) << "sequence " << id;
    for (size_t i = 0; i < s->max_new; ++i) EXPECT_EQ(s->output[i], int32_t(i));
  }
  // At most five decoders, two plans: never more than three in one.
  ASSERT_FALSE(decode_sizes.empty());
  EXPECT_LE(*std::max_element(decode_sizes.begin(), decode_sizes.end()), 3u);
  EXPECT_GE(*std::max_element(decode_sizes.begin(), decode_sizes.end()), 2u);
  // The long prompt's first two chunks were in flight together: plans p and p + 1 both hold one.
  size_t back_to_back = 0;
  for (size_t p = 0; p + 1 < d.plans.size(); ++p) {
    auto has5 = [&](size_t q) {
      for (const auto& e : d.plans[q].entries) {
        if (e.id == 5) return true;
      }
      return false;
    };
    back_to_back += has5(p) && has5(p + 1);
  }
  EXPECT_GE(back_to_back, 3u);
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

// A sequence in flight is never preempted: when the newest is in flight, the others wait for
// it to land rather than an older one being preempted in its place.
TEST(Scheduler, PreemptsNoSequenceInFlight) {
  // As PreemptsTheNewestAndReplaysItsTokens, with two plans in flight; each stage's ranks hold
  // one of the two layers, so each pool is half as large.
  Scheduler sched(config(10, 512), tiny_model(), 1, model::LmHeadMode::kReplicated, 2);
  Driver d(sched);
  d.add(sequence(1, 24, 30));
  d.add(sequence(2, 24, 30));
  d.run_in_flight(2, [&](size_t p, const std::deque<size_t>& in_flight) {
    for (uint64_t id : d.plans[p].release) {
      for (size_t q : in_flight) {
        for (const auto& e : d.plans[q].entries) {
          EXPECT_NE(e.id, id) << "plan " << p << " preempts a sequence of plan " << q;
        }
      }
    }
  });
  EXPECT_GE(sched.stats().preemptions, 1u);
  // The newest is preempted, or waited for while in flight: the oldest always goes on.
  EXPECT_EQ(d.seqs[1]->preemptions, 0u);
  for (const auto& [id, s] : d.seqs) {
    ASSERT_EQ(s->output.size(), 30u) << "sequence " << id;
    for (size_t i = 0; i < 30; ++i) EXPECT_EQ(s->output[i], int32_t(i));
  }
  EXPECT_EQ(sched.used_blocks(0), 0u);
  EXPECT_EQ(sched.used_blocks(1), 0u);
}

// Three sequences over two plans in flight, a pool for two at their end: only the newest is
// ever preempted (when it is in flight, the others wait for it), never the middle one in its
// place, so no sequence evicts an older one.
TEST(Scheduler, UnderStagesOnlyTheNewestIsPreempted) {
  Scheduler sched(config(16, 512), tiny_model(), 1, model::LmHeadMode::kReplicated, 2);
  Driver d(sched);
  for (uint64_t id = 1; id <= 3; ++id) d.add(sequence(id, 24, 30));
  d.run_in_flight(2, [](size_t, const std::deque<size_t>&) {});
  EXPECT_GE(d.seqs[3]->preemptions, 1u);
  EXPECT_EQ(d.seqs[1]->preemptions, 0u);
  EXPECT_EQ(d.seqs[2]->preemptions, 0u);
  for (const auto& [id, s] : d.seqs) {
    ASSERT_EQ(s->output.size(), 30u) << "sequence " << id;
    for (size_t i = 0; i < 30; ++i) EXPECT_EQ(s->output[i], int32_t(i));
  }
}

}  // namespace
}  // namespace adakv::runtime

namespace adakv::runtime {
namespace {

// Prefix caching: a prompt kept whole leaves its full spans cached; the same beginning later
// attaches them and computes only the rest; cached spans nobody uses make room before anything
// is preempted.
TEST(Scheduler, CachedSpansAreAttachedAndEvictedBeforeAnyPreemption) {
  Scheduler sched(config(40, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  auto cached = [](uint64_t id, size_t n, int32_t token) {
    auto s = sequence(id, n, 4);
    s->prompt.assign(n, token);
    s->cache_prefix = true;
    return s;
  };
  d.add(cached(1, 100, 7));
  d.run();
  // Its 6 full spans stay, one block per layer and head each, referenced by nobody.
  EXPECT_EQ(sched.cached_blocks(0, false), 24u);
  EXPECT_EQ(sched.cached_blocks(0, true), 24u);
  EXPECT_EQ(sched.used_blocks(0), 24u);
  d.add(cached(2, 100, 7));
  d.step();
  const StepPlan& p = d.plans.back();
  ASSERT_EQ(p.prefix_attach.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(p.prefix_attach[i].index, i);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].tokens.size(), 4u);  // the rest of the prompt (the last token at least)
  EXPECT_EQ(d.seqs[2]->cached_tokens, 96u);
  EXPECT_EQ(sched.cached_blocks(0, true), 0u);  // referenced now
  EXPECT_EQ(sched.used_blocks(0), 24u + 4);     // its own: the last block of each head
  d.run();
  // Another prompt that needs the whole pool: the cached spans go, nothing is preempted.
  d.add(cached(3, 150, 9));
  d.run();
  size_t evicted = 0;
  for (const auto& plan : d.plans) evicted += plan.prefix_evict.size();
  EXPECT_EQ(evicted, 6u);
  EXPECT_EQ(sched.stats().preemptions, 0u);
  EXPECT_EQ(sched.prefix_stats().hit_tokens, 96u);
  EXPECT_EQ(sched.prefix_stats().queried_tokens, 350u);
  EXPECT_EQ(sched.cached_blocks(0, true), 36u);  // the new prompt's 9 spans
}

// Compressed contexts: the context is compressed once by a sequence of its own; requests fork
// from it and append the rest of their prompt; a context that adds a short tail reuses it.
TEST(Scheduler, RequestsForkFromACachedCompressedContext) {
  ServingConfig c = config(1000, 512);
  c.context_tail = 16;
  Scheduler sched(c, tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  auto ask = [](uint64_t id, size_t context, size_t question) {
    auto s = sequence(id, context + question, 3, compression::Policy::kAdaKV);
    s->context_tokens = context;
    return s;
  };
  d.add(ask(1, 64, 5));
  d.add(ask(2, 64, 7));
  d.run();
  size_t contexts = 0, forks = 0;
  for (const auto& plan : d.plans) {
    for (const auto& e : plan.entries) contexts += sched.is_context(e.id);
    for (const auto& f : plan.fork) {
      EXPECT_TRUE(f.share);
      EXPECT_TRUE(sched.is_context(f.source));
      ++forks;
    }
  }
  EXPECT_EQ(contexts, 1u);  // the 64 context tokens once, in one entry
  EXPECT_EQ(forks, 2u);
  EXPECT_EQ(d.seqs[1]->cached_tokens, 0u);  // it had the context compressed
  EXPECT_EQ(d.seqs[2]->cached_tokens, 64u);
  EXPECT_EQ(sched.cached_contexts(), 1u);
  // 20 tokens per head kept: a full block and a partial one of each of the 4 heads.
  EXPECT_EQ(sched.cached_blocks(0, true), 8u);
  EXPECT_EQ(sched.used_blocks(0), 8u);
  // A context 10 tokens longer reuses it; one 20 longer (past the tail of 16) is compressed.
  d.add(ask(3, 74, 5));
  d.run();
  EXPECT_EQ(d.seqs[3]->cached_tokens, 64u);
  d.add(ask(4, 84, 5));
  d.run();
  EXPECT_EQ(d.seqs[4]->cached_tokens, 0u);
  EXPECT_EQ(sched.cached_contexts(), 2u);
  EXPECT_EQ(sched.used_blocks(0), sched.cached_blocks(0, true));
}

// A cached context gives its room to a running sequence even when the request waiting behind
// it wants the context: kept for that request, it would hold the pool from the sequence ahead
// of it, preempted and readmitted for ever. The request has its context compressed again.
TEST(Scheduler, ACachedContextMakesRoomForTheSequencesAheadOfItsRequest) {
  Scheduler sched(config(28, 512), tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  auto ask = [](uint64_t id, size_t question) {
    auto s = sequence(id, 64 + question, 3, compression::Policy::kAdaKV);
    s->context_tokens = 64;
    return s;
  };
  d.add(ask(1, 5));
  d.run();
  ASSERT_EQ(sched.cached_contexts(), 1u);  // 8 blocks: 20 tokens in each of 4 heads
  d.add(sequence(2, 48, 40));              // grows to 88 tokens: 24 blocks of the 28
  d.add(ask(3, 30));                       // waits: its 12 blocks do not fit beside them
  d.run(2000);
  EXPECT_EQ(d.seqs[2]->output.size(), 40u);
  EXPECT_EQ(d.seqs[3]->output.size(), 3u);
  EXPECT_EQ(d.seqs[3]->cached_tokens, 0u);  // its context was compressed again
  EXPECT_EQ(sched.used_blocks(0), sched.cached_blocks(0, true));
}

// Without prefix caching a context serves the requests that wait for it, then goes.
TEST(Scheduler, WithoutCachingAContextGoesOnceUnused) {
  ServingConfig c = config(1000, 512);
  c.prefix_caching = false;
  Scheduler sched(c, tiny_model(), 1, model::LmHeadMode::kReplicated);
  Driver d(sched);
  for (uint64_t id = 1; id <= 2; ++id) {
    auto s = sequence(id, 70, 3, compression::Policy::kAdaKV);
    s->context_tokens = 64;
    d.add(s);
  }
  d.run();
  d.step();                                  // the release of the unused context
  EXPECT_EQ(d.seqs[2]->cached_tokens, 64u);  // it waited for the first one's context
  EXPECT_EQ(sched.cached_contexts(), 0u);
  EXPECT_EQ(sched.used_blocks(0), 0u);
}

}  // namespace
}  // namespace adakv::runtime
