#include "runtime/scheduler.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "comm/parallel_layout.h"

namespace adakv::runtime {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Scheduler::Scheduler(const ServingConfig& config, const model::ModelConfig& model, size_t tp_size,
                     model::LmHeadMode lm_head, size_t pp_size)
    : config_(config),
      n_layers_(model.n_layers),
      n_kv_heads_(model.n_kv_heads),
      depth_(std::max<size_t>(pp_size, 1)) {
  config_.validate();
  // Ranks in the job's order (comm/parallel_layout.h): TP fastest, then the stage.
  for (size_t stage = 0; stage < pp_size; ++stage) {
    const auto range = comm::stage_layers(static_cast<int>(n_layers_), static_cast<int>(pp_size),
                                          static_cast<int>(stage));
    for (size_t r = 0; r < tp_size; ++r) {
      const auto shard = model::ShardLayout::make(model, r, tp_size, lm_head);
      std::vector<size_t> heads;
      for (size_t h = 0; h < shard.n_kv_heads; ++h) heads.push_back(shard.kv_head_begin + h);
      rank_heads_.push_back(std::move(heads));
      rank_layers_.push_back({size_t(range.begin), size_t(range.end)});
    }
  }
  if (config_.prefix_caching) prefix_ = std::make_unique<PrefixCache>(config_.block_tokens);
}

bool Scheduler::fits(const std::vector<size_t>& used, const std::vector<size_t>& extra) const {
  for (size_t r = 0; r < used.size(); ++r) {
    if (used[r] + extra[r] > config_.kv_pool_blocks) return false;
  }
  return true;
}

size_t Scheduler::layers(size_t rank) const {
  return rank_layers_[rank].second - rank_layers_[rank].first;
}

void Scheduler::check_fits_alone(const ScheduledSeq& s) const {
  // Alone in the pool, uncompressed, to its last token: then the oldest sequence can always
  // go on, and preemption never cycles.
  size_t tokens = s.prompt.size() + std::max(s.max_new, s.lookahead);
  // Its context sequence holds the context and its repeat until they are scored.
  if (!s.repeat_instruction.empty()) {
    tokens = std::max(tokens, s.context_tokens + s.repeat_instruction.size() +
                                  std::min(s.repeat_piece, s.context_tokens));
  }
  size_t worst = 0;
  for (size_t r = 0; r < rank_heads_.size(); ++r) {
    worst =
        std::max(worst, layers(r) * rank_heads_[r].size() * ceil_div(tokens, config_.block_tokens));
  }
  if (worst > config_.kv_pool_blocks) {
    throw std::invalid_argument(
        "the request needs up to " + std::to_string(worst) + " KV blocks (" +
        std::to_string(s.prompt.size()) + " prompt tokens plus " + std::to_string(s.max_new) +
        " to generate, uncompressed); the KV pool holds " + std::to_string(config_.kv_pool_blocks) +
        ": raise --kv-pool-mb or lower max_tokens");
  }
}

void Scheduler::add(std::shared_ptr<ScheduledSeq> seq) {
  check_fits_alone(*seq);
  seq->phase = SeqPhase::kWaiting;
  waiting_.push_back(std::move(seq));
}

void Scheduler::add_sample(std::shared_ptr<ScheduledSeq> seq) {
  if (seq->sample_of == 0) throw std::logic_error("add_sample: the sample names no source");
  check_fits_alone(*seq);
  seq->phase = SeqPhase::kWaiting;
  samples_.push_back(std::move(seq));
}

bool Scheduler::has_work() const {
  return !waiting_.empty() || !samples_.empty() || !resident_.empty() || !to_report_.empty() ||
         !to_release_.empty();
}

size_t Scheduler::blocks(size_t rank, const ScheduledSeq& s) const {
  const auto& heads = rank_heads_[rank];
  const size_t bt = config_.block_tokens;
  // Its cached spans are the cache's (a prefix is only ever a prompt kept whole).
  const size_t spans = s.prefix.size();
  if (s.kept.empty()) return layers(rank) * (reserved_per_layer(rank, s) - heads.size() * spans);
  size_t n = 0;
  for (size_t l = rank_layers_[rank].first; l < rank_layers_[rank].second; ++l) {
    for (size_t h : heads) {
      const size_t kept = s.kept[l * n_kv_heads_ + h];
      n += ceil_div(kept + s.suffix + s.appended, bt) - (s.shared ? kept / bt : 0) - spans;
    }
  }
  return n;
}

size_t Scheduler::shared_blocks(size_t rank, const SharedPrompt& p) const {
  size_t n = 0;
  for (size_t l = rank_layers_[rank].first; l < rank_layers_[rank].second; ++l) {
    for (size_t h : rank_heads_[rank]) {
      n += p.kept[l * n_kv_heads_ + h] / config_.block_tokens - p.prefix.size();
    }
  }
  return n;
}

size_t Scheduler::shared_blocks(size_t rank) const {
  std::vector<const SharedPrompt*> seen;
  size_t n = 0;
  auto count = [&](const ScheduledSeq& s) {
    const SharedPrompt* p = s.shared.get();
    if (!p || std::find(seen.begin(), seen.end(), p) != seen.end()) return;
    seen.push_back(p);
    n += shared_blocks(rank, *p);
  };
  for (const auto& s : resident_) count(*s);
  for (const auto& c : contexts_) count(*c.seq);
  return n;
}

size_t Scheduler::freed_by(size_t rank, const ScheduledSeq& s) const {
  const bool last = s.shared && s.shared->holders == 1;
  return blocks(rank, s) + (last ? shared_blocks(rank, *s.shared) : 0);
}

void Scheduler::drop_share(ScheduledSeq& s) {
  if (!s.shared) return;
  if (--s.shared->holders == 0 && prefix_ && !s.shared->prefix.empty()) {
    prefix_->unref(s.shared->prefix, tick_);
    s.shared->prefix.clear();
  }
  s.shared.reset();
}

size_t Scheduler::reserved_per_layer(size_t rank, const ScheduledSeq& s) const {
  const size_t bt = config_.block_tokens, n = s.prompt.size(), H = rank_heads_[rank].size();
  const size_t whole = H * ceil_div(n + s.lookahead, bt);
  const auto& c = s.compression;
  // Chunks before the last, and look-ahead, hold the whole prompt; so do scope global and the
  // pyramid policies, whose layers' totals differ.
  if (s.lookahead > 0 || (n > config_.prefill_chunk && !layered(s)) ||
      c.scope == compression::Scope::kGlobal || c.keeps_everything(n) || n <= c.window) {
    return whole;
  }
  // One forward, scope layer: each layer writes only its kept rows. SnapKV and streaming keep
  // at most B tokens per head; Ada-KV's heads of a layer share H * B (plus one token of rounding
  // per head), which bounds this rank's blocks only when it holds every head of the layer.
  const size_t B = c.budget_per_head(n);
  switch (c.policy) {
    case compression::Policy::kSnapKV:
    case compression::Policy::kStreaming:
      return std::min(whole, H * ceil_div(B, bt));
    case compression::Policy::kAdaKV:
      if (H != n_kv_heads_ || c.rule != compression::Rule::kTopK) return whole;
      return std::min(whole, ceil_div(H * (B + 1), bt) + H);
    default:
      return whole;
  }
}

size_t Scheduler::growth(size_t rank, const ScheduledSeq& s) const {
  if (s.kept.empty()) return 0;  // within its reservation
  size_t n = 0;
  for (size_t l = rank_layers_[rank].first; l < rank_layers_[rank].second; ++l) {
    for (size_t h : rank_heads_[rank]) {
      n += (s.kept[l * n_kv_heads_ + h] + s.suffix + s.appended) % config_.block_tokens == 0;
    }
  }
  return n;
}

size_t Scheduler::used_blocks(size_t rank) const {
  size_t n = shared_blocks(rank) + (prefix_ ? prefix_->spans() * span_blocks(rank) : 0);
  for (const auto& s : resident_) n += blocks(rank, *s);
  for (const auto& c : contexts_) n += blocks(rank, *c.seq);
  return n;
}

size_t Scheduler::uncompressed_blocks(size_t rank) const {
  const size_t per_head = layers(rank) * rank_heads_[rank].size();
  size_t n = 0;
  for (const auto& s : resident_) {
    if (!s->kept.empty())
      n += per_head * ceil_div(s->prompt.size() + s->appended, config_.block_tokens);
  }
  return n;
}

size_t Scheduler::compressed_blocks(size_t rank) const {
  size_t n = shared_blocks(rank);  // a shared prompt is compressed
  for (const auto& s : resident_) {
    if (!s->kept.empty()) n += blocks(rank, *s);
  }
  return n;
}

bool Scheduler::accounts_exactly() const {
  if (!to_release_.empty()) return false;
  return std::all_of(resident_.begin(), resident_.end(),
                     [](const auto& s) { return !s->kept.empty(); });
}

size_t Scheduler::chunk_end(const ScheduledSeq& s, size_t start) const {
  const size_t n = s.prompt.size(), C = config_.prefill_chunk, W = s.compression.window;
  if (n <= C) return n;
  size_t end = std::min(start + C, n);
  // The last chunk holds the whole observation window: its queries score the prompt.
  if (end < n && n - end < W) end = n - W > start ? n - W : n;
  return end;
}

bool Scheduler::layered(const ScheduledSeq& s) const {
  const auto& c = s.compression;
  const size_t n = s.prompt.size();
  return s.lookahead == 0 && n > config_.prefill_chunk && c.scope == compression::Scope::kLayer &&
         !c.keeps_everything(n) && n > c.window;
}

size_t Scheduler::layers_within(const ScheduledSeq& s, size_t tokens) const {
  const size_t fit = std::max<size_t>(1, tokens * n_layers_ / s.prompt.size());
  return std::min(fit, n_layers_ - s.layers_done);
}

size_t Scheduler::layers_cost(const ScheduledSeq& s, size_t layers) const {
  return ceil_div(s.prompt.size() * layers, n_layers_);
}

void Scheduler::preempt(ScheduledSeq& s, StepPlan& plan) {
  const auto it = std::find_if(resident_.begin(), resident_.end(),
                               [&](const auto& p) { return p.get() == &s; });
  auto keep = *it;
  resident_.erase(it);
  s.phase = SeqPhase::kWaiting;
  s.prefilled = s.layers_done = s.lookahead_done = s.appended = s.suffix = 0;
  s.lookahead_next = -1;
  s.kept.clear();
  drop_share(s);
  drop_prefix(s);
  ++s.preemptions;
  ++stats_.preemptions;
  plan.release.push_back(s.id);
  waiting_.push_front(std::move(keep));
}

void Scheduler::set_kept(ScheduledSeq& s, const std::vector<std::vector<size_t>>& kept) {
  s.kept.assign(n_layers_ * n_kv_heads_, 0);
  for (size_t l = 0; l < n_layers_; ++l) {
    for (size_t h = 0; h < n_kv_heads_; ++h) {
      s.kept[l * n_kv_heads_ + h] = static_cast<uint32_t>(kept.at(l).at(h));
    }
  }
}

bool Scheduler::finish(uint64_t id, bool report) {
  auto is = [id](const auto& p) { return p->id == id; };
  const auto pending = std::find_if(samples_.begin(), samples_.end(), is);
  if (pending != samples_.end()) {
    (*pending)->phase = SeqPhase::kFinished;
    samples_.erase(pending);
    return false;
  }
  // Its samples still waiting to fork from it prefill their prompt alone.
  for (auto it = samples_.begin(); it != samples_.end();) {
    if ((*it)->sample_of != id) {
      ++it;
      continue;
    }
    waiting_.push_back(std::move(*it));
    it = samples_.erase(it);
  }
  const auto w = std::find_if(waiting_.begin(), waiting_.end(), is);
  if (w != waiting_.end()) {
    (*w)->phase = SeqPhase::kFinished;
    waiting_.erase(w);
    return false;
  }
  const auto r = std::find_if(resident_.begin(), resident_.end(), is);
  if (r == resident_.end()) return false;
  (*r)->phase = SeqPhase::kFinished;
  drop_share(**r);
  drop_prefix(**r);
  resident_.erase(r);
  if (report) to_report_.push_back(id);
  to_release_.push_back(id);
  return report;
}

void Scheduler::fork_samples(StepPlan& plan, std::vector<size_t>& used) {
  const size_t P = rank_heads_.size(), bt = config_.block_tokens;
  for (auto it = samples_.begin(); it != samples_.end();) {
    ScheduledSeq& c = **it;
    const auto src = std::find_if(resident_.begin(), resident_.end(),
                                  [&](const auto& p) { return p->id == c.sample_of; });
    if (src != resident_.end() && (*src)->appended > 0) {
      // The source decodes past its prompt (the fork did not fit in time): prefill alone.
      waiting_.push_back(std::move(*it));
      it = samples_.erase(it);
      continue;
    }
    const bool ready = src != resident_.end() && (*src)->phase == SeqPhase::kRunning &&
                       !(*src)->kept.empty() && !c.output.empty();
    if (!ready || resident_.size() >= config_.max_num_seqs) {
      ++it;
      continue;
    }
    ScheduledSeq& source = **src;
    // The fork's own blocks: a copy of each partial last block.
    std::vector<size_t> need(P, 0);
    bool fits = true;
    for (size_t r = 0; r < P; ++r) {
      for (size_t l = rank_layers_[r].first; l < rank_layers_[r].second; ++l) {
        for (size_t h : rank_heads_[r]) need[r] += source.kept[l * n_kv_heads_ + h] % bt != 0;
      }
      fits = fits && used[r] + need[r] <= config_.kv_pool_blocks;
    }
    if (!fits) {
      ++it;
      continue;
    }
    for (size_t r = 0; r < P; ++r) used[r] += need[r];
    if (!source.shared) {
      // The source's cached spans pass to the shared prompt with their cache reference: they
      // stay referenced until its last sample leaves, whenever the source ends.
      source.shared = std::make_shared<SharedPrompt>(SharedPrompt{source.kept, 1, {}});
      source.shared->prefix = std::move(source.prefix);
      source.prefix.clear();
    }
    c.shared = source.shared;
    ++c.shared->holders;
    c.kept = source.kept;
    c.prefilled = c.prompt.size();
    c.appended = 0;
    c.phase = SeqPhase::kRunning;
    c.admitted_at = ++admissions_;
    SequenceFork fork;
    fork.id = c.id;
    fork.source = source.id;
    fork.share = true;
    plan.fork.push_back(fork);
    resident_.push_back(std::move(*it));
    it = samples_.erase(it);
  }
}

StepPlan Scheduler::schedule(std::vector<EntryKind>& kinds) {
  StepPlan plan;
  kinds.clear();
  ++stats_.steps;
  ++tick_;
  plan.report = std::move(to_report_);
  plan.release = std::move(to_release_);
  to_report_.clear();
  to_release_.clear();
  const size_t P = rank_heads_.size();
  if (!config_.prefix_caching) {
    for (auto it = contexts_.begin(); it != contexts_.end();) {
      if (!it->served || it->seq->shared->holders > 1) {
        ++it;
        continue;
      }
      drop_share(*it->seq);
      plan.release.push_back(it->seq->id);
      it = contexts_.erase(it);
    }
  }

  // Look-ahead over: compress before this step's forward (decodes resume next step, once the
  // kept counts are known).
  for (const auto& s : resident_) {
    const size_t steps = s->repeat.empty() ? s->lookahead : s->repeat.tokens.size();
    if (s->phase == SeqPhase::kLookahead && s->in_flight == 0 &&
        (s->lookahead_done == steps ||
         std::binary_search(s->stop_ids.begin(), s->stop_ids.end(), s->lookahead_next))) {
      plan.end_lookahead.push_back(s->id);
      s->phase = SeqPhase::kRunning;
    }
  }

  // Blocks held at the start of the step on each rank; `extra` adds what this step's decodes open.
  std::vector<size_t> used(P);
  for (size_t r = 0; r < P; ++r) used[r] = used_blocks(r);

  // Samples whose source was compressed in the last step fork from it before this forward.
  fork_samples(plan, used);

  // 1. One token for every sequence that decodes, oldest first, up to this plan's share of
  // them; preempt the newest on shortage.
  size_t decoding = 0;
  for (const auto& s : resident_) {
    decoding += (s->phase == SeqPhase::kLookahead && s->repeat.empty()) ||
                (s->phase == SeqPhase::kRunning && !s->kept.empty());
  }
  const size_t share = ceil_div(decoding, depth_);
  std::vector<size_t> extra(P, 0), g(P);
  bool preempted = false;
  size_t decodes_planned = 0;
  for (size_t i = 0; i < resident_.size() && decodes_planned < share; ++i) {
    ScheduledSeq& s = *resident_[i];
    const bool lookahead = s.phase == SeqPhase::kLookahead && s.repeat.empty();
    const bool decodes =
        s.phase == SeqPhase::kRunning && !s.kept.empty() && s.appended < s.output.size();
    if ((!lookahead && !decodes) || s.in_flight > 0) continue;
    for (size_t r = 0; r < P; ++r) g[r] = extra[r] + growth(r, s);
    bool gone = false, wait = false;
    while (!fits(used, g)) {
      if (evict_cached(plan, used)) continue;  // cached spans nobody uses go before any sequence
      // The newest goes. When it is in flight, s and the rest wait for it to land rather than
      // an older sequence losing its progress in its place (which would let the newest
      // sequences evict the older ones over and over).
      ScheduledSeq& victim = *resident_.back();
      if (victim.in_flight > 0) {
        wait = true;
        break;
      }
      gone = &victim == &s;
      for (size_t r = 0; r < P; ++r) used[r] -= freed_by(r, victim);
      preempt(victim, plan);
      preempted = true;
      if (gone) break;
    }
    if (wait) preempted = true;  // nothing is admitted while decodes are short of blocks
    if (gone || wait) break;
    extra = g;
    ++decodes_planned;
    StepEntry e{s.id, {}, true};
    if (lookahead) {
      e.tokens = {s.lookahead_next};
      ++s.lookahead_done;
      kinds.push_back(EntryKind::kLookahead);
    } else {
      e.tokens = {s.output[s.appended]};
      e.logits = s.appended + 1 == s.output.size();
      ++s.appended;
      kinds.push_back(EntryKind::kDecode);
    }
    plan.entries.push_back(std::move(e));
  }

  // 2. Prompt chunks within the token budget (at least one chunk per step, so prompts always
  // progress), continuing admitted prompts first, then admitting waiting ones FCFS.
  const size_t budget = config_.max_num_batched_tokens > plan.entries.size()
                            ? config_.max_num_batched_tokens - plan.entries.size()
                            : 0;
  size_t prefill_tokens = 0;
  // The layered prompt's entry, appended last (model::KvBatch::layer_begin).
  std::optional<StepEntry> layered_entry;
  EntryKind layered_kind = EntryKind::kPrefillChunk;
  auto schedule_layers = [&](ScheduledSeq& s) {
    if (layered_entry) return false;  // one per forward
    const size_t k = layers_within(s, budget > prefill_tokens ? budget - prefill_tokens : 0);
    const size_t cost = layers_cost(s, k);
    if (prefill_tokens > 0 && prefill_tokens + cost > budget) return false;
    StepEntry e{s.id, s.prompt, false};
    e.layer_begin = static_cast<uint32_t>(s.layers_done);
    s.layers_done += k;
    e.layer_end = static_cast<uint32_t>(s.layers_done);
    const bool last = s.layers_done == n_layers_;
    e.logits = last && s.output.empty() && !s.is_context;
    e.scored_text = e.logits && s.prompt_logits;
    layered_entry = std::move(e);
    layered_kind = last ? EntryKind::kLastPrefillChunk : EntryKind::kPrefillChunk;
    prefill_tokens += cost;
    if (last) {
      s.prefilled = s.prompt.size();
      s.phase = SeqPhase::kRunning;
    }
    return true;
  };
  auto schedule_chunk = [&](ScheduledSeq& s) {
    if (layered(s)) return schedule_layers(s);
    const size_t end = chunk_end(s, s.prefilled), n = end - s.prefilled;
    if (prefill_tokens > 0 && prefill_tokens + n > budget) return false;
    const bool last = end == s.prompt.size();
    StepEntry e{s.id, {s.prompt.begin() + s.prefilled, s.prompt.begin() + end}, false};
    e.logits = last && (s.output.empty() || s.lookahead > 0) && !s.is_context;
    if (s.prompt_logits && s.output.empty()) e.logits = e.scored_text = true;
    plan.entries.push_back(std::move(e));
    kinds.push_back(last ? EntryKind::kLastPrefillChunk : EntryKind::kPrefillChunk);
    s.prefilled = end;
    prefill_tokens += n;
    if (last) {
      s.phase = s.lookahead > 0 ? SeqPhase::kLookahead : SeqPhase::kRunning;
      cache_spans(s, plan);
    }
    return true;
  };
  // A context's repeat (reconstruct scoring), in chunks as a prompt's: rows observed, not kept.
  // A piece that starts where another ended rolls that one back first.
  auto schedule_repeat = [&](ScheduledSeq& s) {
    const auto& ends = s.repeat.ends;
    const size_t done = s.lookahead_done;
    const size_t piece_end = *std::upper_bound(ends.begin(), ends.end(), done);
    const size_t n =
        std::min({piece_end - done, config_.prefill_chunk, config_.max_num_batched_tokens});
    if (prefill_tokens > 0 && prefill_tokens + n > budget) return false;
    if (std::binary_search(ends.begin(), ends.end(), done)) plan.rewind_lookahead.push_back(s.id);
    const auto from = s.repeat.tokens.begin() + long(done);
    plan.entries.push_back(StepEntry{s.id, {from, from + long(n)}, false});
    kinds.push_back(EntryKind::kLookahead);
    s.lookahead_done += n;
    prefill_tokens += n;
    return true;
  };
  // A layered prompt is resident and not through every layer yet: the next one waits.
  bool layering = std::any_of(resident_.begin(), resident_.end(), [&](const auto& s) {
    return s->phase == SeqPhase::kPrefilling && layered(*s);
  });
  for (const auto& s : resident_) {
    if (s->phase == SeqPhase::kLookahead && !s->repeat.empty()) {
      if (s->in_flight > 0 || s->lookahead_done == s->repeat.tokens.size()) continue;
      if (!schedule_repeat(*s)) break;
      continue;
    }
    if (s->phase != SeqPhase::kPrefilling) continue;
    // A prompt's next layers need the residual its layers in flight leave; its logprobs are
    // taken chunk by chunk, in order.
    if (s->in_flight > 0 && (layered(*s) || s->prompt_logits)) continue;
    if (!schedule_chunk(*s)) break;
  }
  while (!preempted && !waiting_.empty() && resident_.size() < config_.max_num_seqs) {
    ScheduledSeq& s = *waiting_.front();
    if (s.context_tokens > 0 && !s.is_context) {
      const Admission a = admit_with_context(s, plan, kinds, used, extra, prefill_tokens);
      if (a == Admission::kWait) break;
      continue;
    }
    if (layered(s) && layering) break;  // one at a time, FCFS
    attach_prefix(s);
    auto refuse = [&] {
      drop_prefix(s);
      s.prefilled = 0;
    };
    const size_t first = layered(s) ? layers_cost(s, 1) : chunk_end(s, s.prefilled) - s.prefilled;
    if (prefill_tokens > 0 && prefill_tokens + first > budget) {
      refuse();
      break;
    }
    std::vector<size_t> reserve(P), need = extra;
    for (size_t r = 0; r < P; ++r) {
      reserve[r] = blocks(r, s);  // kept is empty: the reservation
      need[r] += reserve[r];
    }
    while (!fits(used, need) && evict_cached(plan, used)) {
    }
    if (!fits(used, need)) {
      refuse();
      break;
    }
    for (size_t r = 0; r < P; ++r) used[r] += reserve[r];
    if (prefix_eligible(s)) {
      prefix_->count(s.prompt.size(), s.prefilled);
      if (s.preemptions == 0) s.cached_tokens = s.prefilled;
    }
    resident_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    s.phase = SeqPhase::kPrefilling;
    s.admitted_at = ++admissions_;
    SequenceStart start;
    start.id = s.id;
    start.prompt_tokens = static_cast<uint32_t>(s.prompt.size());
    start.lookahead = static_cast<uint32_t>(s.lookahead);
    start.compression = s.compression;
    start.repeat_piece = static_cast<uint32_t>(s.repeat.piece_tokens);
    start.repeat_offset = static_cast<uint32_t>(s.repeat.text_offset);
    plan.start.push_back(start);
    for (size_t i = 0; i < s.prefix.size(); ++i) {
      plan.prefix_attach.push_back(PrefixLink{s.id, s.prefix[i], i});
    }
    layering = layering || layered(s);
    schedule_chunk(s);
  }
  if (layered_entry) {
    plan.entries.push_back(std::move(*layered_entry));
    kinds.push_back(layered_kind);
  }
  for (const auto& s : resident_) {
    const bool in_plan = std::any_of(plan.entries.begin(), plan.entries.end(),
                                     [&](const StepEntry& e) { return e.id == s->id; });
    s->in_flight += in_plan;
  }
  return plan;
}

void Scheduler::landed(const StepPlan& plan) {
  for (const auto& s : resident_) {
    const bool in_plan = std::any_of(plan.entries.begin(), plan.entries.end(),
                                     [&](const StepEntry& e) { return e.id == s->id; });
    if (in_plan && s->in_flight > 0) --s->in_flight;
  }
}

}  // namespace adakv::runtime
