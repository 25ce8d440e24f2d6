// The guarded backend's allocator of address ranges: first fit over the free ranges of one
// region, coalescing on free. It hands out offsets only; the memory is the region's.
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>

namespace adakv::kernels {

class OffsetArena {
 public:
  explicit OffsetArena(size_t capacity);

  // The offset of a free range of at least `bytes` (> 0), aligned to 64 bytes, to 4 KiB from
  // 64 KiB and to 2 MiB from 2 MiB up (so large blocks are whole pages, which free() can give
  // back). Throws std::bad_alloc when no free range fits.
  size_t take(size_t bytes);
  // Returns the range taken at `offset` to the free ranges; its size (as rounded by take()), or
  // 0 when `offset` is not the start of a live range (nothing changes then).
  size_t give(size_t offset);

  size_t live_ranges() const { return live_.size(); }

 private:
  size_t capacity_;
  std::map<size_t, size_t> free_;            // offset -> size, disjoint, never adjacent
  std::unordered_map<size_t, size_t> live_;  // offset -> size
};

}  // namespace adakv::kernels
