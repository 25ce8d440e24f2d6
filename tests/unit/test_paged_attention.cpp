// attention_paged against a dense masked double-precision reference: ragged per-head lengths,
// block boundaries, batches mixing 1 and 3 new queries, GQA, shuffled block ids, every dtype.
// The reference reads the K/V back from the blocks (dequantized), so for bf16 and E4M3 the
// tolerance covers float arithmetic only; storage rounding is tested in test_kv_blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "tests/unit/tolerances.h"

namespace k = adakv::kernels;

namespace {

struct SeqSpec {
  size_t n_queries;
  std::vector<uint32_t> lengths;  // [Hkv]
};

struct Case {
  size_t Hq, Hkv, dim, block_tokens;
  float scale;
  std::vector<SeqSpec> seqs;
};

std::vector<float> random_vector(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

constexpr float kPadding = 777.0f;  // fills the gaps between output rows; must survive

// A case's pool, block tables, queries and outputs. PagedSequence points into these vectors
// and into the Case, so a Batch is filled in place and never copied.
struct Batch {
  k::KvBlockLayout layout;
  std::vector<uint8_t> pool;
  std::vector<std::vector<std::vector<int32_t>>> ids;   // [seq][head][block]
  std::vector<std::vector<std::vector<float>>> kd, vd;  // dequantized K/V
  std::vector<std::vector<const int32_t*>> id_ptrs;     // [seq][head]
  std::vector<std::vector<float>> q, out;               // [seq]
  std::vector<k::PagedSequence> seqs;
  size_t q_stride = 0, out_stride = 0;

  Batch() = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void run(const Case& c) {
    k::check(
        k::attention_paged(seqs.data(), seqs.size(), pool.data(), layout, c.Hq, c.Hkv, c.scale),
        "attention_paged");
  }
};

void build_batch(const Case& c, k::KvDtype dtype, uint32_t seed, Batch& batch) {
  std::mt19937 rng(seed);
  batch.layout = {c.block_tokens, c.dim, dtype};
  const k::KvBlockLayout& layout = batch.layout;
  const size_t bt = c.block_tokens, dim = c.dim;

  size_t total_blocks = 0;
  for (const auto& s : c.seqs) {
    for (uint32_t len : s.lengths) total_blocks += (len + bt - 1) / bt;
  }
  // Hand out the pool's ids in a shuffled order (plus unused spares) so that no head's blocks
  // are contiguous or increasing.
  std::vector<int32_t> free_ids(total_blocks + 5);
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  batch.pool.assign(free_ids.size() * layout.block_bytes(), 0xCD);
  size_t next_id = 0;

  const size_t n_seqs = c.seqs.size();
  batch.ids.resize(n_seqs);
  batch.kd.resize(n_seqs);
  batch.vd.resize(n_seqs);
  batch.id_ptrs.resize(n_seqs);
  batch.q.resize(n_seqs);
  batch.out.resize(n_seqs);
  batch.seqs.resize(n_seqs);
  batch.q_stride = c.Hq * dim + 5;
  batch.out_stride = c.Hq * dim + 3;

  for (size_t s = 0; s < n_seqs; ++s) {
    const SeqSpec& spec = c.seqs[s];
    ASSERT_EQ(spec.lengths.size(), c.Hkv);
    batch.ids[s].resize(c.Hkv);
    batch.kd[s].resize(c.Hkv);
    batch.vd[s].resize(c.Hkv);
    for (size_t g = 0; g < c.Hkv; ++g) {
      const size_t len = spec.lengths[g];
      const auto kin = random_vector(len * dim, rng, 1.0f);
      const auto vin = random_vector(len * dim, rng, 1.0f);
      auto& kd = batch.kd[s][g];
      auto& vd = batch.vd[s][g];
      kd.resize(len * dim);
      vd.resize(len * dim);
      for (size_t t0 = 0; t0 < len; t0 += bt) {
        const int32_t id = free_ids[next_id++];
        batch.ids[s][g].push_back(id);
        uint8_t* block = batch.pool.data() + id * layout.block_bytes();
        // Fill the block the way the engine does: the prompt part, then the last token alone
        // (a decode append at a row offset).
        const size_t n = std::min(bt, len - t0);
        const size_t head = (t0 + n == len && n > 1) ? n - 1 : n;
        k::check(k::kv_block_write(block, layout, 0, &kin[t0 * dim], &vin[t0 * dim], head, dim),
                 "kv_block_write");
        if (head < n) {
          k::check(k::kv_block_write(block, layout, head, &kin[(t0 + head) * dim],
                                     &vin[(t0 + head) * dim], 1, dim),
                   "kv_block_write");
        }
        k::check(k::kv_block_read(block, layout, 0, n, &kd[t0 * dim], &vd[t0 * dim]),
                 "kv_block_read");
      }
      batch.id_ptrs[s].push_back(batch.ids[s][g].data());
    }
    batch.q[s] = random_vector(spec.n_queries * batch.q_stride, rng, 1.0f);
    batch.out[s].assign(spec.n_queries * batch.out_stride, kPadding);
    batch.seqs[s] = {batch.id_ptrs[s].data(), spec.lengths.data(), spec.n_queries,
                     batch.q[s].data(),       batch.q_stride,      batch.out[s].data(),
                     batch.out_stride};
  }
}

// Runs attention_paged on a case and compares with a dense masked double reference.
void run_case(const Case& c, k::KvDtype dtype, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << c.Hq << " Hkv " << c.Hkv << " dim " << c.dim
                                  << " block " << c.block_tokens << " dtype " << int(dtype));
  Batch batch;
  build_batch(c, dtype, seed, batch);
  if (testing::Test::HasFatalFailure()) return;
  batch.run(c);
  const size_t n_seqs = c.seqs.size(), dim = c.dim, group = c.Hq / c.Hkv;
  const size_t q_stride = batch.q_stride, out_stride = batch.out_stride;
  const auto& q = batch.q;
  const auto& out = batch.out;
  const auto& kd = batch.kd;
  const auto& vd = batch.vd;

  // Dense masked reference in double over the dequantized K/V.
  std::vector<std::vector<double>> ref(n_seqs);
  double max_ref = 1e-6;
  for (size_t s = 0; s < n_seqs; ++s) {
    const size_t nq = c.seqs[s].n_queries;
    ref[s].assign(nq * c.Hq * dim, 0.0);
    for (size_t i = 0; i < nq; ++i) {
      for (size_t h = 0; h < c.Hq; ++h) {
        const size_t g = h / group;
        const size_t visible = c.seqs[s].lengths[g] - nq + i + 1;
        const float* qi = &q[s][i * q_stride + h * dim];
        std::vector<double> p(visible);
        double m = -INFINITY, sum = 0;
        for (size_t t = 0; t < visible; ++t) {
          double dot = 0;
          for (size_t d = 0; d < dim; ++d) dot += double(qi[d]) * kd[s][g][t * dim + d];
          p[t] = dot * c.scale;
          m = std::max(m, p[t]);
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        double* r = &ref[s][(i * c.Hq + h) * dim];
        for (size_t t = 0; t < visible; ++t) {
          for (size_t d = 0; d < dim; ++d) r[d] += p[t] / sum * vd[s][g][t * dim + d];
        }
        for (size_t d = 0; d < dim; ++d) max_ref = std::max(max_ref, std::fabs(r[d]));
      }
    }
  }

  const double tol = adakv::test::kF32AttentionRel * max_ref;
  for (size_t s = 0; s < n_seqs; ++s) {
    const size_t nq = c.seqs[s].n_queries;
    for (size_t i = 0; i < nq; ++i) {
      for (size_t x = 0; x < out_stride; ++x) {
        const float got = out[s][i * out_stride + x];
        if (x >= c.Hq * dim) {
          ASSERT_EQ(got, kPadding) << "seq " << s << " query " << i << ": padding overwritten";
          continue;
        }
        ASSERT_NEAR(got, ref[s][i * c.Hq * dim + x], tol)
            << "seq " << s << " query " << i << " head " << x / dim << " d " << x % dim;
      }
    }
  }
}

const k::KvDtype kDtypes[] = {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3};

}  // namespace

TEST(PagedAttention, GqaRaggedHeadsAtBlockBoundaries) {
  const Case c{
      9,
      3,
      64,
      16,
      0.125f,
      {{1, {1, 16, 17}}, {3, {32, 33, 3}}, {1, {31, 5, 64}}, {3, {15, 48, 49}}, {1, {2, 1, 33}}}};
  for (k::KvDtype dtype : kDtypes) run_case(c, dtype, 1);
}

TEST(PagedAttention, OneKvHeadPerQueryHead) {
  const Case c{4, 4, 64, 16, 0.125f, {{1, {1, 16, 32, 33}}, {3, {3, 17, 50, 7}}}};
  for (k::KvDtype dtype : kDtypes) run_case(c, dtype, 2);
}

// Heads long enough to be split across threads (split-K); a sharper softmax (larger scale)
// makes the merge of chunk maxima matter.
TEST(PagedAttention, LongHeadsSplitIntoChunks) {
  const Case c{9, 3, 64, 16, 0.5f, {{1, {1000, 257, 600}}, {3, {700, 3, 1500}}}};
  for (k::KvDtype dtype : kDtypes) run_case(c, dtype, 3);
}

TEST(PagedAttention, OddHeadDimAndBlockSize) {
  const Case c{6, 2, 7, 5, 0.4f, {{2, {11, 5}}, {1, {1, 26}}, {3, {3, 300}}}};
  for (k::KvDtype dtype : kDtypes) run_case(c, dtype, 4);
}

// A sequence's output must not depend on the rest of the batch or on the thread count (the
// split into chunks follows each head's length only), so batching never changes a result.
TEST(PagedAttention, OutputIsBitIdenticalAcrossBatchingAndThreads) {
  const Case c{9, 3, 64, 16, 0.3f, {{1, {700, 3, 1500}}, {3, {1100, 40, 513}}, {1, {5, 9, 2}}}};
  Batch batch;
  build_batch(c, k::KvDtype::kBF16, 9, batch);
  batch.run(c);
  const auto together = batch.out;

  const k::PagedSequence* all = batch.seqs.data();
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    std::fill(batch.out[s].begin(), batch.out[s].end(), kPadding);
    k::check(k::attention_paged(all + s, 1, batch.pool.data(), batch.layout, c.Hq, c.Hkv, c.scale),
             "attention_paged");
    EXPECT_EQ(batch.out[s], together[s]) << "sequence " << s << " alone";
  }

  const int threads = k::num_threads();
  for (int n : {1, 3}) {
    k::set_num_threads(n);
    for (auto& o : batch.out) std::fill(o.begin(), o.end(), kPadding);
    batch.run(c);
    EXPECT_EQ(batch.out, together) << n << " threads";
  }
  k::set_num_threads(threads);
}

TEST(PagedAttention, RejectsBadArguments) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kF32};
  std::vector<uint8_t> pool(layout.block_bytes());
  const int32_t ids[] = {0};
  const int32_t bad_ids[] = {-1};
  const int32_t* table[] = {ids};
  const int32_t* bad_table[] = {bad_ids};
  const uint32_t len2[] = {2};
  std::vector<float> q(3 * 4), out(3 * 4);
  k::PagedSequence seq{table, len2, 3, q.data(), 4, out.data(), 4};  // 3 queries > 2 tokens
  EXPECT_EQ(k::attention_paged(&seq, 1, pool.data(), layout, 1, 1, 1.0f),
            k::Status::kInvalidArgument);
  seq.n_queries = 0;
  EXPECT_EQ(k::attention_paged(&seq, 1, pool.data(), layout, 1, 1, 1.0f),
            k::Status::kInvalidArgument);
  seq.n_queries = 2;
  EXPECT_EQ(k::attention_paged(&seq, 1, pool.data(), layout, 3, 2, 1.0f),
            k::Status::kInvalidArgument);  // Hq not a multiple of Hkv
  seq.block_ids = bad_table;
  EXPECT_EQ(k::attention_paged(&seq, 1, pool.data(), layout, 1, 1, 1.0f),
            k::Status::kInvalidArgument);
  seq.block_ids = table;
  EXPECT_EQ(k::attention_paged(&seq, 1, pool.data(), layout, 1, 1, 1.0f), k::Status::kOk);
  EXPECT_EQ(k::attention_paged(nullptr, 0, pool.data(), layout, 1, 1, 1.0f), k::Status::kOk);
}
