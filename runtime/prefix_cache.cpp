#include "runtime/prefix_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace adakv::runtime {

PrefixCache::PrefixCache(size_t block_tokens) : block_tokens_(block_tokens) {
  if (block_tokens == 0) throw std::invalid_argument("prefix cache: block_tokens must be >= 1");
}

uint64_t PrefixCache::key_of(uint64_t parent, const int32_t* tokens) const {
  // FNV-1a over the parent key and the span's tokens; 0 is reserved for "no parent".
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (size_t i = 0; i < block_tokens_; ++i) mix(static_cast<uint32_t>(tokens[i]));
  return h == 0 ? 1 : h;
}

const PrefixCache::Entry* PrefixCache::find(uint64_t key, uint64_t parent,
                                            const int32_t* tokens) const {
  const auto it = entries_.find(key);
  if (it == entries_.end() || it->second.parent != parent ||
      !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens)) {
    return nullptr;
  }
  return &it->second;
}

std::vector<uint64_t> PrefixCache::match(const std::vector<int32_t>& tokens, size_t max_spans,
                                         uint64_t now) const {
  std::vector<uint64_t> keys;
  uint64_t parent = 0;
  const size_t spans = std::min(max_spans, tokens.size() / block_tokens_);
  for (size_t i = 0; i < spans; ++i) {
    const int32_t* span = tokens.data() + i * block_tokens_;
    const uint64_t key = key_of(parent, span);
    const Entry* e = find(key, parent, span);
    if (!e || e->inserted_at >= now) break;
    keys.push_back(key);
    parent = key;
  }
  return keys;
}

void PrefixCache::ref(const std::vector<uint64_t>& keys) {
  for (uint64_t k : keys) {
    const auto it = entries_.find(k);
    if (it == entries_.end()) throw std::logic_error("prefix cache: ref of an unknown span");
    ++it->second.refs;
  }
}

void PrefixCache::unref(const std::vector<uint64_t>& keys, uint64_t now) {
  for (uint64_t k : keys) {
    const auto it = entries_.find(k);
    if (it == entries_.end() || it->second.refs == 0) {
      throw std::logic_error("prefix cache: unref of a span nobody references");
    }
    --it->second.refs;
    it->second.last_used = now;
  }
}

std::optional<uint64_t> PrefixCache::insert(uint64_t parent, const std::vector<int32_t>& tokens,
                                            size_t index, uint64_t now) {
  if ((index + 1) * block_tokens_ > tokens.size()) {
    throw std::logic_error("prefix cache: span " + std::to_string(index) +
                           " is not a full span of the prompt");
  }
  const int32_t* span = tokens.data() + index * block_tokens_;
  const uint64_t key = key_of(parent, span);
  if (entries_.count(key)) return std::nullopt;  // cached already (or, rarely, a collision)
  Entry e;
  e.parent = parent;
  e.tokens.assign(span, span + block_tokens_);
  e.depth = index;
  e.refs = 1;
  e.last_used = now;
  e.inserted_at = now;
  entries_.emplace(key, std::move(e));
  return key;
}

std::optional<uint64_t> PrefixCache::evict() {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.refs > 0) continue;
    if (victim == entries_.end() || it->second.last_used < victim->second.last_used ||
        (it->second.last_used == victim->second.last_used &&
         (it->second.depth > victim->second.depth ||
          (it->second.depth == victim->second.depth && it->first < victim->first)))) {
      victim = it;
    }
  }
  if (victim == entries_.end()) return std::nullopt;
  const uint64_t key = victim->first;
  entries_.erase(victim);
  return key;
}

size_t PrefixCache::unreferenced_spans() const {
  return std::count_if(entries_.begin(), entries_.end(),
                       [](const auto& e) { return e.second.refs == 0; });
}

}  // namespace adakv::runtime
