#include "kernels/cpu/guarded_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace adakv::kernels {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("guarded backend: " + what + ": " + std::strerror(errno));
}

// Maps `bytes` of fd at a 2 MiB-aligned address (so the views agree on every alignment up to
// that): reserve a little more address space, map the file over the aligned part, unmap the
// slack around it.
uint8_t* map_aligned(int fd, size_t bytes, int prot) {
  void* slack =
      mmap(nullptr, bytes + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (slack == MAP_FAILED) fail("reserving address space");
  const auto begin = reinterpret_cast<uintptr_t>(slack);
  const uintptr_t aligned = (begin + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(reinterpret_cast<void*>(aligned), bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(slack, bytes + kHuge);
    fail("mapping the memory file");
  }
  if (aligned > begin) munmap(slack, aligned - begin);
  const uintptr_t end = begin + bytes + kHuge;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  return static_cast<uint8_t*>(p);
}

}  // namespace

GuardedRegion::GuardedRegion(size_t capacity) : capacity_(capacity) {
  fd_ = memfd_create("adakv-guarded", MFD_CLOEXEC);
  if (fd_ < 0) fail("memfd_create");
  try {
    if (ftruncate(fd_, static_cast<off_t>(capacity_)) != 0) fail("sizing the memory file");
    host_ = map_aligned(fd_, capacity_, PROT_NONE);
    view_ = map_aligned(fd_, capacity_, PROT_READ | PROT_WRITE);
  } catch (...) {
    if (host_) munmap(host_, capacity_);
    close(fd_);
    throw;
  }
  // Large pages where the kernel gives them to shared memory; a hint only.
  madvise(view_, capacity_, MADV_HUGEPAGE);
}

GuardedRegion::~GuardedRegion() {
  munmap(view_, capacity_);
  munmap(host_, capacity_);
  close(fd_);
}

void GuardedRegion::release(size_t offset, size_t bytes) {
  // Punching the hole frees the pages in both views (dropping the op view's mapping alone would
  // leave them in the file).
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
            static_cast<off_t>(bytes));
}

void GuardedRegion::open_host() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (open_depth_ == 0 && mprotect(host_, capacity_, PROT_READ | PROT_WRITE) != 0) {
    fail("opening the host view");
  }
  ++open_depth_;
}

void GuardedRegion::close_host() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--open_depth_ > 0) return;
  // Dropping the host view's page table entries (the file keeps the pages) keeps every later
  // open and close as cheap as this one, whatever earlier tasks touched.
  if (madvise(host_, capacity_, MADV_DONTNEED) != 0 || mprotect(host_, capacity_, PROT_NONE) != 0) {
    std::perror("adakv guarded backend: closing the host view");
    std::abort();
  }
}

}  // namespace adakv::kernels
