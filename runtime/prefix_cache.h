// Rank 0's index of the KV blocks that prompts leave behind for later prompts with the same
// beginning (vLLM's automatic prefix caching, on adakv's per-head pool).
//
// A cached span is tokens [i * block_tokens, (i + 1) * block_tokens) of a prompt, held
// uncompressed as one pool block per layer and KV head on every rank (each rank's worker keeps
// the block ids: PrefixBlocks). Its key chains the key of the span before it with its tokens,
// so a span is found only after the whole prefix before it; each entry also keeps its tokens
// and parent, so a hash collision can never hand a prompt another prompt's rows.
//
// Sequences reference the spans they start with (refs). A span nobody references stays cached
// until the pool needs its room: the least recently used goes first, and of spans used at the
// same time the deepest, so that a chain is cut from its end.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace adakv::runtime {

struct PrefixCacheStats {
  uint64_t queried_tokens = 0;  // prompt tokens looked up (vLLM's prefix_cache_queries)
  uint64_t hit_tokens = 0;      // of those, found cached (prefix_cache_hits)
};

class PrefixCache {
 public:
  explicit PrefixCache(size_t block_tokens);

  // Keys of the cached leading spans of `tokens`, at most `max_spans` of them, inserted before
  // `now` (a span inserted by the plan being written is in the blocks only after its forward).
  // References nothing (ref() does) and counts nothing (count() does, once the lookup is used).
  std::vector<uint64_t> match(const std::vector<int32_t>& tokens, size_t max_spans,
                              uint64_t now) const;
  void count(size_t queried_tokens, size_t hit_tokens) {
    stats_.queried_tokens += queried_tokens;
    stats_.hit_tokens += hit_tokens;
  }
  void ref(const std::vector<uint64_t>& keys);
  // Drops one reference to each; `now` orders the unreferenced for eviction.
  void unref(const std::vector<uint64_t>& keys, uint64_t now);
  // Caches span `index` of `tokens` (its block_tokens tokens) after the span `parent` (0 for the
  // first span), referenced once by its inserter. Returns its key, or nothing when that span is
  // cached already (by another sequence with the same prefix).
  std::optional<uint64_t> insert(uint64_t parent, const std::vector<int32_t>& tokens, size_t index,
                                 uint64_t now);
  // Forgets the unreferenced span to evict first, and returns its key; nothing when every
  // cached span is referenced.
  std::optional<uint64_t> evict();

  size_t spans() const { return entries_.size(); }
  size_t unreferenced_spans() const;
  size_t block_tokens() const { return block_tokens_; }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    size_t depth = 0;  // span index in its prompt
    size_t refs = 0;
    uint64_t last_used = 0;
    uint64_t inserted_at = 0;
  };
  uint64_t key_of(uint64_t parent, const int32_t* tokens) const;
  // The cached entry of span `index` of `tokens` after `parent`, or null.
  const Entry* find(uint64_t key, uint64_t parent, const int32_t* tokens) const;

  size_t block_tokens_;
  std::unordered_map<uint64_t, Entry> entries_;
  PrefixCacheStats stats_;
};

}  // namespace adakv::runtime
