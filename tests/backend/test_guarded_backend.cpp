// The guarded backend's own promises: host code that touches its memory outside its ops faults
// (and inside run_on_host() does not), every op refuses a pointer that is not the backend's and
// names itself and the argument, and its allocator never hands out overlapping memory, reuses
// what is freed and gives large freed blocks' pages back. Also prints what one guarded op and one
// run_on_host() cost.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/backend/backend_fixture.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::DeviceArray;

// Expects std::invalid_argument naming the op and saying that `arg` is not the backend's.
template <typename F>
void expect_refused(F&& call, const std::string& op, const std::string& arg) {
  try {
    call();
    ADD_FAILURE() << op << " accepted a host pointer as " << arg;
  } catch (const std::invalid_argument& e) {
    const std::string want = op + ": " + arg + " is not memory of the guarded backend";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
        << "got '" << e.what() << "', want '" << want << "'";
  }
}

TEST(GuardedBackend, IsMadeByItsKind) {
  EXPECT_EQ(k::make_backend(k::BackendKind::kGuarded)->kind(), k::BackendKind::kGuarded);
  EXPECT_EQ(k::backend_kind_from_string("guarded"), k::BackendKind::kGuarded);
  EXPECT_STREQ(k::to_string(k::BackendKind::kGuarded), "guarded");
}

TEST(GuardedBackend, OpsRefuseHostPointers) {
  auto owned = k::make_guarded_backend();
  k::Backend& b = *owned;
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kF32};
  DeviceArray<float> x(b, std::vector<float>(64, 1.0f)), y(b, std::vector<float>(64, 0.0f));
  DeviceArray<int32_t> ids(b, std::vector<int32_t>{0, 1});
  DeviceArray<uint8_t> pool(b, std::vector<uint8_t>(2 * layout.block_bytes(), 0));
  std::vector<float> host(64, 1.0f);
  std::vector<int32_t> host_ids = {0, 1};
  std::vector<uint8_t> host_bytes(2 * layout.block_bytes(), 0);

  expect_refused([&] { b.upload(host.data(), host.data(), 4); }, "upload", "dst");
  expect_refused([&] { b.download(host.data(), host.data(), 4); }, "download", "src");
  expect_refused([&] { b.copy(x.data(), host.data(), 4); }, "copy", "src");
  expect_refused([&] { b.copy(host.data(), x.data(), 4); }, "copy", "dst");
  expect_refused([&] { b.fill(host.data(), 0, 4); }, "fill", "dst");
  expect_refused([&] { b.gather_rows(y.data(), 4, x.data(), 4, 4, host_ids.data(), 2); },
                 "gather_rows", "rows");
  expect_refused([&] { b.rmsnorm(y.data(), x.data(), host.data(), 1, 8, 1e-5f); }, "rmsnorm", "w");
  expect_refused(
      [&] {
        b.matmul_quant(y.data(), x.data(), host.data(), k::WeightFormat::kF32, 1, 1, 8,
                       k::MatmulOptions{});
      },
      "matmul_quant", "w");
  expect_refused(
      [&] {
        b.embed_rows(y.data(), host.data(), k::WeightFormat::kF32, k::WeightLayout::kRows,
                     ids.data(), 2, 4, 8);
      },
      "embed_rows", "table");
  expect_refused(
      [&] {
        b.embed_rows(y.data(), x.data(), k::WeightFormat::kF32, k::WeightLayout::kRows,
                     host_ids.data(), 2, 4, 8);
      },
      "embed_rows", "ids");
  expect_refused(
      [&] {
        b.embed_shard_rows(y.data(), x.data(), k::WeightFormat::kF32, k::WeightLayout::kRows,
                           host_ids.data(), 2, 0, 4, 4, 8);
      },
      "embed_shard_rows", "ids");
  expect_refused(
      [&] { b.rope_adjacent(x.data(), host_ids.data(), 2, 1, 8, 8, k::rope_frequencies(1e4f, 8)); },
      "rope_adjacent", "positions");
  expect_refused([&] { b.swiglu(host.data(), x.data(), 1, 8); }, "swiglu", "out");
  expect_refused([&] { b.add(y.data(), host.data(), x.data(), 8); }, "add", "a");
  expect_refused([&] { b.add_bias(y.data(), host.data(), 2, 4, 4); }, "add_bias", "bias");
  expect_refused([&] { b.add_bias(host.data(), x.data(), 2, 4, 4); }, "add_bias", "y");
  expect_refused([&] { b.interleave_shards(y.data(), host.data(), 2, 2, 2); }, "interleave_shards",
                 "gathered");
  expect_refused(
      [&] {
        b.attention_causal(y.data(), x.data(), host.data(), x.data(), 1, 1, 1, 1, 8, 8, 8, 8, 1.0f);
      },
      "attention_causal", "k");
  expect_refused(
      [&] { b.kv_append(pool.data(), layout, x.data(), x.data(), 4, 2, 1, host_ids.data()); },
      "kv_append", "slots");
  expect_refused(
      [&] { b.kv_append(host_bytes.data(), layout, x.data(), x.data(), 4, 2, 1, ids.data()); },
      "kv_append", "pool");
  expect_refused([&] { b.kv_copy_rows(pool.data(), layout, ids.data(), host_ids.data(), 2); },
                 "kv_copy_rows", "dst");
  expect_refused([&] { b.kv_gather(y.data(), host.data(), 4, pool.data(), layout, ids.data(), 2); },
                 "kv_gather", "v");
  expect_refused([&] { b.kv_block_write(pool.data(), layout, 0, host.data(), x.data(), 1, 4); },
                 "kv_block_write", "k");
  expect_refused([&] { b.kv_block_read(pool.data(), layout, 0, 1, y.data(), host.data()); },
                 "kv_block_read", "v");
  expect_refused(
      [&] {
        b.window_attention_mass(y.data(), x.data(), 8, x.data(), 8, 2, 1, 1, 1, 8, 1.0f,
                                host.data());
      },
      "window_attention_mass", "peak");

  // attention_paged: every pointer inside the sequences too.
  const std::vector<uint32_t> lengths = {2};
  DeviceArray<uint32_t> dlengths(b, lengths);
  DeviceArray<int32_t> block0(b, std::vector<int32_t>{0});
  auto run_paged = [&](const int32_t* table_entry, const uint32_t* len, float* out) {
    DeviceArray<const int32_t*> table(b, std::vector<const int32_t*>{table_entry});
    DeviceArray<k::PagedSequence> seqs(
        b, std::vector<k::PagedSequence>{{table.data(), len, 1, x.data(), 4, out, 4}});
    b.attention_paged(seqs.data(), 1, pool.data(), layout, 1, 1, 1.0f);
  };
  EXPECT_NO_THROW(run_paged(block0.data(), dlengths.data(), y.data()));
  expect_refused([&] { run_paged(host_ids.data(), dlengths.data(), y.data()); }, "attention_paged",
                 "seqs[].block_ids[h]");
  expect_refused([&] { run_paged(block0.data(), lengths.data(), y.data()); }, "attention_paged",
                 "seqs[].lengths");
  expect_refused([&] { run_paged(block0.data(), dlengths.data(), host.data()); }, "attention_paged",
                 "seqs[].out");
  const k::PagedSequence host_seq{nullptr, lengths.data(), 1, host.data(), 4, host.data(), 4};
  expect_refused([&] { b.attention_paged(&host_seq, 1, pool.data(), layout, 1, 1, 1.0f); },
                 "attention_paged", "seqs");
}

// The host read of a KV block outside the backend's ops is a SIGSEGV at the read; inside
// run_on_host() it is an ordinary read.
TEST(GuardedBackendDeathTest, HostReadOfABlockFaultsOutsideRunOnHost) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto b = k::make_guarded_backend();
  const k::KvBlockLayout layout{16, 64, k::KvDtype::kBF16};
  std::vector<uint8_t> bytes(layout.block_bytes());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  DeviceArray<uint8_t> block(*b, bytes);
  const volatile uint8_t* p = block.data() + 100;
  auto read = [p] { std::printf("%d\n", int(*p)); };
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(read(), "SEGV");  // the sanitizer reports the signal and exits
#else
  EXPECT_EXIT(read(), testing::KilledBySignal(SIGSEGV), "");
#endif
  uint8_t seen = 0;
  b->run_on_host([&] { seen = *p; });
  EXPECT_EQ(seen, bytes[100]);
  // Nested, and after a task that threw, the memory is closed again.
  b->run_on_host([&] { b->run_on_host([&] { seen = p[1]; }); });
  EXPECT_EQ(seen, bytes[101]);
  EXPECT_THROW(b->run_on_host([] { throw std::runtime_error("task failed"); }), std::runtime_error);
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(read(), "SEGV");
#else
  EXPECT_EXIT(read(), testing::KilledBySignal(SIGSEGV), "");
#endif
}

TEST(GuardedBackend, AllocatorNeverOverlapsAndReusesFreedMemory) {
  auto b = k::make_guarded_backend();
  std::mt19937 rng(1);
  const size_t sizes[] = {1, 7, 64, 769, 4096, 70000, 1 << 20, 3 << 20, 5 << 20};
  std::map<uintptr_t, k::Buffer> live;  // by address
  const void* first = nullptr;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      live.erase(it);
      continue;
    }
    const size_t n = sizes[rng() % std::size(sizes)] + rng() % 100;
    k::Buffer buf = b->allocate(n);
    ASSERT_NE(buf.data(), nullptr);
    if (!first) first = buf.data();
    const auto a = reinterpret_cast<uintptr_t>(buf.data());
    ASSERT_EQ(a % 64, 0u);
    if (n >= (64 << 10)) {
      ASSERT_EQ(a % 4096, 0u) << n;
    }
    if (n >= (2 << 20)) {
      ASSERT_EQ(a % (2 << 20), 0u) << n;
    }
    const auto next = live.lower_bound(a);
    if (next != live.end()) {
      ASSERT_LE(a + n, next->first) << "overlaps the next block";
    }
    if (next != live.begin()) {
      const auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second.bytes(), a) << "overlaps the previous block";
    }
    live.emplace(a, std::move(buf));
  }
  live.clear();
  // Everything freed coalesces: the first fit is the first block's place again.
  EXPECT_EQ(b->allocate(100).data(), first);
  EXPECT_EQ(b->allocate(0).data(), nullptr);
}

// Resident pages of shared memory of this process, in KiB.
long rss_shmem_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = -1;
  while (status >> key) {
    if (key == "RssShmem:") {
      status >> value;
      break;
    }
    status.ignore(256, '\n');
  }
  return value;
}

TEST(GuardedBackend, FreeingALargeBlockGivesItsPagesBack) {
  auto b = k::make_guarded_backend();
  const long before = rss_shmem_kib();
  if (before < 0) GTEST_SKIP() << "no RssShmem in /proc/self/status";
  const size_t bytes = 64 << 20;
  {
    k::Buffer big = b->allocate(bytes);
    b->fill(big.data(), 0x5A, bytes);
    EXPECT_GE(rss_shmem_kib() - before, long(bytes >> 10) * 9 / 10);
  }
  EXPECT_LE(rss_shmem_kib() - before, 4096);
  // And the memory reads as new: a fresh allocation there holds what is uploaded, nothing else.
  k::Buffer again = b->allocate(bytes);
  std::vector<uint8_t> one(1, 0);
  b->download(one.data(), again.as<uint8_t>() + bytes / 2, 1);
  EXPECT_EQ(one[0], 0);
}

// Not a check: what guarding costs, beside 300 MiB of written backend memory.
TEST(GuardedBackend, PrintsWhatTheGuardCosts) {
  auto guarded = k::make_guarded_backend();
  auto cpu = k::make_backend(k::BackendKind::kCpu);
  const size_t populated = size_t{300} << 20;
  k::Buffer memory = guarded->allocate(populated);
  guarded->fill(memory.data(), 1, populated);
  auto time_us = [](int n, auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
               .count() /
           n;
  };
  for (k::Backend* b : {cpu.get(), guarded.get()}) {
    DeviceArray<float> x(*b, std::vector<float>(16, 1.0f));
    const double op = time_us(20000, [&] { b->add(x.data(), x.data(), x.data(), 16); });
    std::printf("  %-7s add of 16 floats: %.2f us\n", k::to_string(b->kind()), op);
  }
  float* p = memory.as<float>();
  const double empty = time_us(2000, [&] { guarded->run_on_host([] {}); });
  volatile float sink = 0;
  const double page = time_us(2000, [&] { guarded->run_on_host([&] { sink = sink + p[1024]; }); });
  std::printf("  guarded run_on_host open + close: %.1f us empty, %.1f us reading one page\n",
              empty, page);
}

}  // namespace
