// The scheduler's caches (runtime/scheduler.h): cached prompt spans (prefix caching) and
// cached compressed contexts, their admission, accounting and eviction.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/scheduler.h"

namespace adakv::runtime {

bool Scheduler::prefix_eligible(const ScheduledSeq& s) const {
  const auto& c = s.compression;
  return prefix_ && s.cache_prefix && !s.prompt_logits && s.lookahead == 0 &&
         (c.policy == compression::Policy::kFull || c.keeps_everything(s.prompt.size()));
}

void Scheduler::attach_prefix(ScheduledSeq& s) {
  if (!prefix_eligible(s)) return;
  // At least the prompt's last token is computed: its logits start the output.
  s.prefix = prefix_->match(s.prompt, (s.prompt.size() - 1) / config_.block_tokens, tick_);
  prefix_->ref(s.prefix);
  s.prefilled = s.prefix.size() * config_.block_tokens;
}

void Scheduler::drop_prefix(ScheduledSeq& s) {
  if (prefix_ && !s.prefix.empty()) prefix_->unref(s.prefix, tick_);
  s.prefix.clear();
}

void Scheduler::cache_spans(ScheduledSeq& s, StepPlan& plan) {
  if (!prefix_eligible(s)) return;
  const size_t full = s.prompt.size() / config_.block_tokens;
  uint64_t parent = s.prefix.empty() ? 0 : s.prefix.back();
  for (size_t i = s.prefix.size(); i < full; ++i) {
    const auto key = prefix_->insert(parent, s.prompt, i, tick_);
    if (!key) break;  // another prompt cached it first: the rest stays this sequence's own
    plan.prefix_insert.push_back(PrefixLink{s.id, *key, i});
    s.prefix.push_back(*key);
    parent = *key;
  }
}

bool Scheduler::evict_span(StepPlan& plan, std::vector<size_t>& used) {
  if (!prefix_) return false;
  const auto key = prefix_->evict();
  if (!key) return false;
  plan.prefix_evict.push_back(*key);
  for (size_t r = 0; r < used.size(); ++r) used[r] -= span_blocks(r);
  return true;
}

size_t Scheduler::cached_blocks(size_t rank, bool unreferenced_only) const {
  size_t n = 0;
  if (prefix_) {
    n = (unreferenced_only ? prefix_->unreferenced_spans() : prefix_->spans()) * span_blocks(rank);
  }
  // The contexts' own blocks, and their shared ones where no request holds them too.
  for (const auto& c : contexts_) {
    const bool alone = c.seq->shared->holders == 1;
    if (unreferenced_only && !alone) continue;
    n += blocks(rank, *c.seq) + (alone ? shared_blocks(rank, *c.seq->shared) : 0);
  }
  return n;
}

PrefixCacheStats Scheduler::prefix_stats() const {
  PrefixCacheStats st = prefix_ ? prefix_->stats() : PrefixCacheStats{};
  st.queried_tokens += context_stats_.queried_tokens;
  st.hit_tokens += context_stats_.hit_tokens;
  return st;
}

bool Scheduler::serves(const ScheduledSeq& context, const ScheduledSeq& s) const {
  const auto& p = context.prompt;
  const size_t c = s.context_tokens;
  return c > 0 && context.compression == s.compression && p.size() <= c &&
         c - p.size() <= config_.context_tail && std::equal(p.begin(), p.end(), s.prompt.begin());
}

bool Scheduler::evict_context(StepPlan& plan, std::vector<size_t>& used) {
  auto victim = contexts_.end();
  for (auto it = contexts_.begin(); it != contexts_.end(); ++it) {
    if (it->seq->shared->holders > 1) continue;  // a request forked from it still holds it
    // A context a waiting request will fork from goes too: kept for it, it could hold the pool
    // from the requests admitted before it for ever (they are preempted and readmitted ahead of
    // it); evicted, it is compressed again once the decodes that needed the room end.
    if (victim == contexts_.end() || it->last_used < victim->last_used) victim = it;
  }
  if (victim == contexts_.end()) return false;
  for (size_t r = 0; r < used.size(); ++r) used[r] -= freed_by(r, *victim->seq);
  drop_share(*victim->seq);
  plan.release.push_back(victim->seq->id);
  contexts_.erase(victim);
  return true;
}

void Scheduler::context_compressed(uint64_t id, const std::vector<std::vector<size_t>>& kept) {
  const auto it =
      std::find_if(resident_.begin(), resident_.end(), [id](const auto& p) { return p->id == id; });
  if (it == resident_.end() || !(*it)->is_context) {
    throw std::logic_error("context_compressed: " + std::to_string(id) +
                           " is no resident context sequence");
  }
  auto seq = *it;
  resident_.erase(it);
  set_kept(*seq, kept);
  seq->shared = std::make_shared<SharedPrompt>(SharedPrompt{seq->kept, 1, {}});
  contexts_.push_back(CachedContext{std::move(seq), tick_});
}

bool Scheduler::context_repeats(uint64_t id) const {
  const auto it =
      std::find_if(resident_.begin(), resident_.end(), [id](const auto& p) { return p->id == id; });
  return it != resident_.end() && !(*it)->repeat.empty();
}

Scheduler::Admission Scheduler::admit_with_context(ScheduledSeq& s, StepPlan& plan,
                                                   std::vector<EntryKind>& kinds,
                                                   std::vector<size_t>& used,
                                                   const std::vector<size_t>& extra,
                                                   size_t& prefill_tokens) {
  const size_t c = s.context_tokens, P = used.size();
  auto starts_s = [&](const std::vector<int32_t>& p) {
    return p.size() <= c && std::equal(p.begin(), p.end(), s.prompt.begin());
  };
  // The longest cached context that s's context starts with, within the tail.
  CachedContext* best = nullptr;
  for (auto& e : contexts_) {
    if (!serves(*e.seq, s)) continue;
    if (!best || e.seq->prompt.size() > best->seq->prompt.size()) best = &e;
  }
  if (!best) {
    // Its context is being compressed already (for another request, or for it before a
    // preemption): it waits for it, which goes first when it waits in the queue too.
    auto building = [&](const std::shared_ptr<ScheduledSeq>& q) {
      return q->is_context && q->compression == s.compression && q->prompt.size() == c &&
             starts_s(q->prompt);
    };
    if (std::any_of(resident_.begin(), resident_.end(), building)) return Admission::kWait;
    auto ctx = std::find_if(waiting_.begin(), waiting_.end(), building);
    std::shared_ptr<ScheduledSeq> seq;
    if (ctx != waiting_.end()) {
      seq = *ctx;
      waiting_.erase(ctx);
    } else {
      seq = std::make_shared<ScheduledSeq>();
      seq->id = next_context_id_++;
      seq->prompt.assign(s.prompt.begin(), s.prompt.begin() + c);
      seq->compression = s.compression;
      seq->is_context = true;
      if (!s.repeat_instruction.empty()) {
        seq->repeat = compression::repeat_pieces(s.repeat_instruction, seq->prompt, s.repeat_piece);
        seq->lookahead = seq->repeat.longest;
      }
      s.made_context = s.made_context || s.preemptions == 0;
    }
    waiting_.push_front(std::move(seq));
    return Admission::kFrontChanged;
  }
  ScheduledSeq& ctx = *best->seq;
  const size_t n_ctx = ctx.prompt.size(), suffix = s.prompt.size() - n_ctx;
  if (prefill_tokens > 0 && prefill_tokens + suffix > config_.max_num_batched_tokens) {
    return Admission::kWait;
  }
  s.kept = ctx.kept;
  s.shared = ctx.shared;
  ++s.shared->holders;
  s.suffix = suffix;
  s.appended = 0;
  std::vector<size_t> own(P), need = extra;
  for (size_t r = 0; r < P; ++r) {
    own[r] = blocks(r, s);
    need[r] += own[r];
  }
  while (!fits(used, need) && evict_cached(plan, used)) {
  }
  if (!fits(used, need)) {
    drop_share(s);
    s.kept.clear();
    s.suffix = 0;
    return Admission::kWait;
  }
  for (size_t r = 0; r < P; ++r) used[r] += own[r];
  best->last_used = tick_;
  best->served = true;
  context_stats_.queried_tokens += c;
  // The request that had its context compressed found nothing cached.
  const bool made = s.made_context && s.preemptions == 0;
  context_stats_.hit_tokens += made ? 0 : n_ctx;
  if (s.preemptions == 0) s.cached_tokens = made ? 0 : n_ctx;
  resident_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  s.phase = SeqPhase::kRunning;
  s.admitted_at = ++admissions_;
  s.prefilled = s.prompt.size();
  SequenceFork fork;
  fork.id = s.id;
  fork.source = ctx.id;
  fork.share = true;
  plan.fork.push_back(fork);
  // Its question (and the context past the cached one) in one entry, as prompt rows.
  StepEntry e{s.id, {s.prompt.begin() + n_ctx, s.prompt.end()}, s.output.empty()};
  plan.entries.push_back(std::move(e));
  kinds.push_back(EntryKind::kLastPrefillChunk);
  prefill_tokens += suffix;
  return Admission::kAdmitted;
}

}  // namespace adakv::runtime
