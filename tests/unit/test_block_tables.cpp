// The pool's flat block tables: slots are reused, growth keeps every row, writes move only
// what changed, and the row pointers and lengths in backend memory say what attention reads.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "kernels/backend.h"
#include "runtime/kv/block_tables.h"

namespace adakv::runtime {
namespace {

// Head g of (slot, layer) as the backend holds it: its first `n` ids and its length.
struct Row {
  std::vector<int32_t> ids;
  uint32_t length;
};

Row read(kernels::Backend& backend, const BlockTables& t, size_t slot, size_t layer, size_t g,
         size_t n) {
  const int32_t* row = nullptr;
  backend.download(&row, t.rows(slot, layer) + g, sizeof row);
  Row r{std::vector<int32_t>(n), 0};
  if (n > 0) backend.download(r.ids.data(), row, n * sizeof(int32_t));
  backend.download(&r.length, t.lengths(slot, layer) + g, sizeof(uint32_t));
  return r;
}

class BlockTablesTest : public ::testing::TestWithParam<kernels::BackendKind> {
 protected:
  std::unique_ptr<kernels::Backend> backend_ = kernels::make_backend(GetParam());
};

TEST_P(BlockTablesTest, RowsHoldWhatWasWrittenThroughGrowth) {
  BlockTables t(*backend_);
  const size_t L = 3, H = 2;
  std::vector<size_t> slots;
  // More slots than the first allocation, and heads longer than its capacity.
  for (size_t s = 0; s < 9; ++s) slots.push_back(t.acquire(L, H));
  std::vector<std::vector<std::vector<int32_t>>> want(9, std::vector<std::vector<int32_t>>(L * H));
  for (size_t step = 0; step < 40; ++step) {
    for (size_t s : slots) {
      for (size_t l = 0; l < L; ++l) {
        std::vector<const std::vector<int32_t>*> blocks(H);
        std::vector<size_t> synced(H);
        std::vector<uint32_t> lengths(H);
        for (size_t g = 0; g < H; ++g) {
          auto& ids = want[s][l * H + g];
          synced[g] = ids.size();
          // Ragged heads: head g grows every (g + 1)th step.
          if (step % (g + 1) == 0) ids.push_back(int32_t(1000 * s + 100 * l + 10 * g + step));
          blocks[g] = &ids;
          lengths[g] = uint32_t(ids.size() * 16 - g);
        }
        t.write_layer(s, l, blocks, synced, lengths);
        for (size_t g = 0; g < H; ++g) EXPECT_EQ(synced[g], want[s][l * H + g].size());
      }
    }
  }
  EXPECT_GE(t.capacity(), 40u);
  for (size_t s : slots) {
    for (size_t l = 0; l < L; ++l) {
      for (size_t g = 0; g < H; ++g) {
        const auto& ids = want[s][l * H + g];
        const Row r = read(*backend_, t, s, l, g, ids.size());
        EXPECT_EQ(r.ids, ids) << "slot " << s << " layer " << l << " head " << g;
        EXPECT_EQ(r.length, ids.size() * 16 - g);
      }
    }
  }
}

TEST_P(BlockTablesTest, AReleasedSlotIsReusedWithItsLengthsAtZero) {
  BlockTables t(*backend_);
  const size_t a = t.acquire(1, 1), b = t.acquire(1, 1);
  EXPECT_NE(a, b);
  std::vector<int32_t> ids = {7, 8};
  std::vector<size_t> synced = {0};
  t.write_layer(a, 0, {&ids}, synced, {30});
  EXPECT_EQ(read(*backend_, t, a, 0, 0, 2).length, 30u);
  t.release(a);
  EXPECT_EQ(t.slots_in_use(), 1u);
  EXPECT_EQ(t.acquire(1, 1), a);
  EXPECT_EQ(read(*backend_, t, a, 0, 0, 0).length, 0u);
  EXPECT_THROW(t.release(5), std::logic_error);
}

TEST_P(BlockTablesTest, EverySlotHasTheFirstSlotsShape) {
  BlockTables t(*backend_);
  t.acquire(30, 3);
  try {
    t.acquire(30, 2);
    FAIL() << "a slot of another shape was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("30 x 3"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BlockTablesTest,
                         ::testing::Values(kernels::BackendKind::kCpu,
                                           kernels::BackendKind::kGuarded),
                         [](const auto& info) {
                           return info.param == kernels::BackendKind::kCpu ? "cpu" : "guarded";
                         });

}  // namespace
}  // namespace adakv::runtime
