// The memory of the guarded backend: one memory file mapped twice. The host view, whose
// addresses the backend hands out, stays PROT_NONE except while a run_on_host() task runs, so
// host code that touches backend memory faults at once; the op view maps the same pages read
// and write for good, and the backend's ops and transfers run on it, translating each pointer
// they are given. No op then pays a system call, and host code on another thread cannot reach
// the memory while an op runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace adakv::kernels {

class GuardedRegion {
 public:
  // Reserves `capacity` bytes of address space in each view (a multiple of 2 MiB); pages are
  // paid for as they are first written. Throws std::runtime_error saying why on failure.
  explicit GuardedRegion(size_t capacity);
  ~GuardedRegion();
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  size_t capacity() const { return capacity_; }
  // The host-view address of `offset`.
  uint8_t* host(size_t offset) const { return host_ + offset; }
  // Whether p lies in the host view.
  bool contains(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), h = reinterpret_cast<uintptr_t>(host_);
    return a >= h && a - h < capacity_;
  }
  // The op-view address of host-view address p (contains(p)).
  template <typename T>
  T* view(T* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<T*>(a - reinterpret_cast<uintptr_t>(host_) +
                                reinterpret_cast<uintptr_t>(view_));
  }
  // Frees the pages of [offset, offset + bytes) (page aligned): they read as zeros afterwards.
  void release(size_t offset, size_t bytes);

  // Opens the host view for reads and writes until the matching close_host(); nestable and
  // callable from any thread (the protection is the process's).
  void open_host();
  void close_host();

 private:
  size_t capacity_;
  int fd_ = -1;
  uint8_t* host_ = nullptr;
  uint8_t* view_ = nullptr;
  std::mutex mutex_;
  int open_depth_ = 0;
};

}  // namespace adakv::kernels
