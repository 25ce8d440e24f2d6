#include "kernels/cpu/guarded_arena.h"

#include <iterator>
#include <new>

namespace adakv::kernels {
namespace {

constexpr size_t kLine = 64, kPage = size_t{4} << 10, kHuge = size_t{2} << 20;

size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

size_t alignment_for(size_t bytes) {
  return bytes >= kHuge ? kHuge : bytes >= 16 * kPage ? kPage : kLine;
}

}  // namespace

OffsetArena::OffsetArena(size_t capacity) : capacity_(capacity) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

size_t OffsetArena::take(size_t bytes) {
  const size_t align = alignment_for(bytes);
  if (bytes > capacity_) throw std::bad_alloc();
  const size_t size = round_up(bytes, align == kHuge ? kPage : align);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const size_t begin = it->first, end = it->first + it->second;
    const size_t at = round_up(begin, align);
    if (at > end || end - at < size) continue;
    // Split the free range into what lies before the block and what lies after it.
    free_.erase(it);
    if (at > begin) free_.emplace(begin, at - begin);
    if (end > at + size) free_.emplace(at + size, end - at - size);
    live_.emplace(at, size);
    return at;
  }
  throw std::bad_alloc();
}

size_t OffsetArena::give(size_t offset) {
  const auto live = live_.find(offset);
  if (live == live_.end()) return 0;
  const size_t size = live->second;
  live_.erase(live);
  size_t begin = offset, end = offset + size;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      free_.erase(prev);
    }
  }
  free_.emplace(begin, end - begin);
  return size;
}

}  // namespace adakv::kernels
