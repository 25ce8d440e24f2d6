// The Backend interface and its CPU implementation: memory (buffers, the workspace's reuse),
// the ops it adds over ops.h (embedding rows, the vocab-parallel interleave), errors, and the
// choice of a backend by name.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/backend.h"
#include "random_data.h"

namespace {

namespace k = adakv::kernels;

TEST(Backend, BuffersAndTheWorkspaceReuseMemory) {
  k::Backend& cpu = k::cpu_backend();
  k::Buffer b = cpu.allocate(1000);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 1000u);
  k::Buffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 1000u);

  k::Workspace ws(cpu);
  float* a = ws.floats(0, 100);
  float* c = ws.floats(1, 10);
  EXPECT_NE(a, c);
  EXPECT_EQ(ws.floats(0, 50), a) << "a smaller request reuses the slot";
  EXPECT_EQ(ws.floats(0, 100), a);
  a[99] = 1.0f;  // the whole size asked is usable
}

TEST(Backend, InterleaveShardsRestoresTheVocabularyOrder) {
  // 3 shards of [2 rows][4 cols], rank-major: value = shard * 100 + row * 10 + col.
  std::vector<float> gathered(3 * 2 * 4), logits(2 * 12);
  for (size_t s = 0; s < 3; ++s)
    for (size_t t = 0; t < 2; ++t)
      for (size_t c = 0; c < 4; ++c) gathered[(s * 2 + t) * 4 + c] = float(s * 100 + t * 10 + c);
  k::cpu_backend().interleave_shards(logits.data(), gathered.data(), 3, 2, 4);
  for (size_t t = 0; t < 2; ++t)
    for (size_t v = 0; v < 12; ++v)
      EXPECT_EQ(logits[t * 12 + v], float(v / 4 * 100 + t * 10 + v % 4));
}

TEST(Backend, EmbedRowsDecodesTheLookedUpRows) {
  const size_t rows = 5, dim = 64;
  const auto table = adakv::test::random_vector(rows * dim, 9);
  const int32_t ids[] = {4, 0, 4};
  std::vector<float> out(3 * dim);
  k::cpu_backend().embed_rows(out.data(), table.data(), k::WeightFormat::kF32,
                              k::WeightLayout::kRows, ids, 3, rows, dim);
  for (size_t t = 0; t < 3; ++t)
    for (size_t i = 0; i < dim; ++i) EXPECT_EQ(out[t * dim + i], table[ids[t] * dim + i]);
  const int32_t bad[] = {5};
  EXPECT_THROW(k::cpu_backend().embed_rows(out.data(), table.data(), k::WeightFormat::kF32,
                                           k::WeightLayout::kRows, bad, 1, rows, dim),
               std::invalid_argument);
}

TEST(Backend, EmbedShardRowsSumToTheWholeLookup) {
  const size_t vocab = 6, dim = 32;
  const auto table = adakv::test::random_vector(vocab * dim, 11);
  const int32_t ids[] = {5, 0, 2, 3};
  std::vector<float> sum(4 * dim, 0.0f), out(4 * dim);
  for (size_t shard = 0; shard < 3; ++shard) {
    k::cpu_backend().embed_shard_rows(out.data(), table.data() + shard * 2 * dim,
                                      k::WeightFormat::kF32, k::WeightLayout::kRows, ids, 4,
                                      shard * 2, 2, vocab, dim);
    for (size_t t = 0; t < 4; ++t) {
      const bool mine = size_t(ids[t]) / 2 == shard;
      for (size_t i = 0; i < dim; ++i) {
        EXPECT_EQ(out[t * dim + i], mine ? table[ids[t] * dim + i] : 0.0f);
        sum[t * dim + i] += out[t * dim + i];
      }
    }
  }
  for (size_t t = 0; t < 4; ++t)
    for (size_t i = 0; i < dim; ++i) EXPECT_EQ(sum[t * dim + i], table[ids[t] * dim + i]);
  const int32_t bad[] = {6};
  EXPECT_THROW(k::cpu_backend().embed_shard_rows(out.data(), table.data(), k::WeightFormat::kF32,
                                                 k::WeightLayout::kRows, bad, 1, 0, 2, vocab, dim),
               std::invalid_argument);
}

TEST(Backend, OpsNameThemselvesOnBadArguments) {
  try {
    float x[2] = {1, 2}, w[2] = {1, 1};
    k::cpu_backend().rmsnorm(x, x, w, 1, 0, 1e-5f);
    FAIL() << "rmsnorm accepted rows of 0 elements";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rmsnorm"), std::string::npos) << e.what();
  }
}

TEST(Backend, ChosenByName) {
  EXPECT_EQ(k::backend_kind_from_string("cpu"), k::BackendKind::kCpu);
  EXPECT_EQ(k::backend_kind_from_string("cuda"), k::BackendKind::kCuda);
  EXPECT_THROW(k::backend_kind_from_string("tpu"), std::invalid_argument);
  EXPECT_EQ(k::make_backend(k::BackendKind::kCpu)->kind(), k::BackendKind::kCpu);
  // A CUDA build on a machine with a GPU makes it; anywhere else the error says why not.
  try {
    EXPECT_EQ(k::make_backend(k::BackendKind::kCuda)->kind(), k::BackendKind::kCuda);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backend"), std::string::npos) << e.what();
  }
}

}  // namespace
