// The prefix cache's index: spans found only after their whole prefix, collisions refused by
// their tokens, references that keep spans from eviction, and the eviction order (least
// recently used first, the deepest of a chain first).
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

#include "runtime/prefix_cache.h"

namespace adakv::runtime {
namespace {

std::vector<int32_t> tokens(size_t n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Caches every full span of `t` (referenced once each) and returns their keys.
std::vector<uint64_t> cache_all(PrefixCache& c, const std::vector<int32_t>& t, uint64_t now) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < t.size() / c.block_tokens(); ++i) {
    const auto key = c.insert(keys.empty() ? 0 : keys.back(), t, i, now);
    EXPECT_TRUE(key.has_value()) << "span " << i;
    keys.push_back(*key);
  }
  return keys;
}

TEST(PrefixCache, FindsTheLeadingSpansOfAPromptWithTheSameBeginning) {
  PrefixCache c(4);
  const auto t = tokens(14);  // 3 full spans and 2 tokens
  const auto keys = cache_all(c, t, 1);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(c.spans(), 3u);
  // The same beginning, another continuation inside span 2.
  auto other = t;
  other[9] = 999;
  EXPECT_EQ(c.match(other, 10, 2), (std::vector<uint64_t>{keys[0], keys[1]}));
  EXPECT_EQ(c.match(t, 10, 2), keys);
  EXPECT_EQ(c.match(t, 1, 2), std::vector<uint64_t>{keys[0]});  // capped by the caller
  // A span is found only after the whole prefix before it: span 1's tokens at the start are
  // not span 1.
  const std::vector<int32_t> shifted(t.begin() + 4, t.end());
  EXPECT_TRUE(c.match(shifted, 10, 2).empty());
  // Spans inserted by the plan being written are not in the blocks yet.
  EXPECT_TRUE(c.match(t, 10, 1).empty());
  // Caching the same span again is refused (the first copy stays).
  EXPECT_FALSE(c.insert(0, t, 0, 2).has_value());
}

TEST(PrefixCache, ReferencedSpansAreNeverEvicted) {
  PrefixCache c(4);
  const auto keys = cache_all(c, tokens(8), 1);
  EXPECT_EQ(c.unreferenced_spans(), 0u);
  EXPECT_FALSE(c.evict().has_value());
  c.unref({keys[1]}, 2);
  EXPECT_EQ(c.unreferenced_spans(), 1u);
  EXPECT_EQ(c.evict(), keys[1]);
  EXPECT_FALSE(c.evict().has_value());
  EXPECT_EQ(c.spans(), 1u);
  EXPECT_THROW(c.unref({keys[1]}, 3), std::logic_error);  // gone
  EXPECT_THROW(c.ref({keys[1]}), std::logic_error);
}

TEST(PrefixCache, EvictsTheLeastRecentlyUsedAndTheDeepestFirst) {
  PrefixCache c(2);
  const auto a = cache_all(c, tokens(6, 0), 1);    // 3 spans
  const auto b = cache_all(c, tokens(4, 100), 1);  // 2 spans
  c.unref(a, 5);
  c.unref(b, 3);  // released earlier: goes first
  EXPECT_EQ(c.evict(), b[1]);
  EXPECT_EQ(c.evict(), b[0]);
  EXPECT_EQ(c.evict(), a[2]);
  c.ref({a[0]});  // a new holder of the first span
  EXPECT_EQ(c.evict(), a[1]);
  EXPECT_FALSE(c.evict().has_value());
  EXPECT_EQ(c.match(tokens(6, 0), 3, 9), std::vector<uint64_t>{a[0]});
}

TEST(PrefixCache, CountsQueriedAndHitTokens) {
  PrefixCache c(4);
  c.count(100, 64);
  c.count(10, 0);
  EXPECT_EQ(c.stats().queried_tokens, 110u);
  EXPECT_EQ(c.stats().hit_tokens, 64u);
  EXPECT_THROW(c.insert(0, tokens(3), 0, 1), std::logic_error);  // not a full span
}

}  // namespace
}  // namespace adakv::runtime
