// The attention kernels at every dispatch level this CPU has (scalar, AVX2, AVX-512; the others
// skip) against plain double-precision references:
//  - attention_paged over f32, bf16 and E4M3 blocks: GQA, ragged heads, 1 and several new
//    queries, head sizes of whole 16-float vectors (64, 80, 96, 48, 128), with an 8-float tail
//    (40: AVX-512 hands it to the AVX2 kernel) and odd ones (7: the portable kernel),
//    block sizes that are and are not multiples of 8; a NaN stored in a block reaches exactly the
//    rows that see it; a sequence's output is bit-identical alone, batched and on any number of
//    threads.
//  - attention_causal: prefill-sized and decode-sized query counts, several head sizes.
// The paged reference reads the K/V back from the blocks, so storage rounding is not measured
// here (test_kv_blocks does that).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "tests/unit/tolerances.h"

namespace k = adakv::kernels;

namespace {

// Runs a test body at one level and restores the previous level afterwards.
class AttentionLevels : public testing::TestWithParam<k::QuantLevel> {
 protected:
  void SetUp() override {
    saved_ = k::quant_level();
    if (!k::set_quant_level(GetParam())) {
      GTEST_SKIP() << "CPU lacks " << k::quant_level_name(GetParam());
    }
  }
  void TearDown() override { k::set_quant_level(saved_); }

 private:
  k::QuantLevel saved_ = k::QuantLevel::kScalar;
};

std::vector<float> random_vector(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A batch of sequences over one shuffled pool. kd/vd: the K/V as the blocks hold them
// (dequantized), [seq][head][token][dim].
struct PagedBatch {
  size_t Hq, Hkv, dim;
  k::KvBlockLayout layout;
  std::vector<uint8_t> pool;
  std::vector<std::vector<std::vector<int32_t>>> ids;
  std::vector<std::vector<const int32_t*>> id_ptrs;
  std::vector<std::vector<uint32_t>> lengths;
  std::vector<std::vector<std::vector<float>>> kd, vd;
  std::vector<std::vector<float>> q, out;
  std::vector<k::PagedSequence> seqs;
  size_t q_stride, out_stride;

  PagedBatch(size_t Hq_, size_t Hkv_, size_t dim_, size_t block_tokens, k::KvDtype dtype,
             const std::vector<std::pair<size_t, std::vector<uint32_t>>>& specs, uint32_t seed)
      : Hq(Hq_), Hkv(Hkv_), dim(dim_), layout{block_tokens, dim_, dtype} {
    std::mt19937 rng(seed);
    const size_t bt = block_tokens;
    size_t total = 0;
    for (const auto& s : specs) {
      for (uint32_t len : s.second) total += (len + bt - 1) / bt;
    }
    std::vector<int32_t> free_ids(total + 3);
    std::iota(free_ids.begin(), free_ids.end(), 0);
    std::shuffle(free_ids.begin(), free_ids.end(), rng);
    // Unwritten rows hold NaN bit patterns for every dtype: a kernel must never read them.
    pool.assign(free_ids.size() * layout.block_bytes(), 0xFF);
    size_t next = 0;
    q_stride = Hq * dim + 3;
    out_stride = Hq * dim + 1;
    const size_t n = specs.size();
    ids.resize(n);
    id_ptrs.resize(n);
    kd.resize(n);
    vd.resize(n);
    for (size_t s = 0; s < n; ++s) {
      lengths.push_back(specs[s].second);
      for (size_t g = 0; g < Hkv; ++g) {
        const size_t len = lengths[s][g];
        const auto kin = random_vector(len * dim, rng, 1.0f);
        const auto vin = random_vector(len * dim, rng, 1.0f);
        std::vector<float> kg(len * dim), vg(len * dim);
        ids[s].emplace_back();
        for (size_t t0 = 0; t0 < len; t0 += bt) {
          const int32_t id = free_ids[next++];
          ids[s][g].push_back(id);
          uint8_t* block = pool.data() + id * layout.block_bytes();
          const size_t rows = std::min(bt, len - t0);
          k::check(k::kv_block_write(block, layout, 0, &kin[t0 * dim], &vin[t0 * dim], rows, dim),
                   "kv_block_write");
          k::check(k::kv_block_read(block, layout, 0, rows, &kg[t0 * dim], &vg[t0 * dim]),
                   "kv_block_read");
        }
        kd[s].push_back(std::move(kg));
        vd[s].push_back(std::move(vg));
      }
      for (const auto& v : ids[s]) id_ptrs[s].push_back(v.data());
      q.push_back(random_vector(specs[s].first * q_stride, rng, 1.0f));
      out.emplace_back(specs[s].first * out_stride, 0.0f);
    }
    for (size_t s = 0; s < n; ++s) {
      seqs.push_back({id_ptrs[s].data(), lengths[s].data(), specs[s].first, q[s].data(), q_stride,
                      out[s].data(), out_stride});
    }
  }
  PagedBatch(const PagedBatch&) = delete;
  PagedBatch& operator=(const PagedBatch&) = delete;

  void run(float scale, size_t first = 0, size_t count = SIZE_MAX) {
    count = std::min(count, seqs.size() - first);
    k::check(k::attention_paged(seqs.data() + first, count, pool.data(), layout, Hq, Hkv, scale),
             "attention_paged");
  }

  // Double-precision dense reference of output row (s, query i, head h).
  std::vector<double> reference(size_t s, size_t i, size_t h, float scale) const {
    const size_t g = h / (Hq / Hkv);
    const size_t nq = seqs[s].n_queries;
    const size_t visible = lengths[s][g] - nq + i + 1;
    const float* qi = &q[s][i * q_stride + h * dim];
    std::vector<double> p(visible);
    double m = -INFINITY, sum = 0;
    for (size_t t = 0; t < visible; ++t) {
      double dot = 0;
      for (size_t d = 0; d < dim; ++d) dot += double(qi[d]) * kd[s][g][t * dim + d];
      p[t] = dot * scale;
      m = std::max(m, p[t]);
    }
    for (auto& x : p) sum += (x = std::exp(x - m));
    std::vector<double> r(dim, 0.0);
    for (size_t t = 0; t < visible; ++t) {
      for (size_t d = 0; d < dim; ++d) r[d] += p[t] / sum * vd[s][g][t * dim + d];
    }
    return r;
  }

  void expect_matches_reference(float scale) const {
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (size_t i = 0; i < seqs[s].n_queries; ++i) {
        for (size_t h = 0; h < Hq; ++h) {
          const auto r = reference(s, i, h, scale);
          double max_ref = 1e-6;
          for (double x : r) max_ref = std::max(max_ref, std::fabs(x));
          const double tol = adakv::test::kF32AttentionRel * max_ref;
          for (size_t d = 0; d < dim; ++d) {
            ASSERT_NEAR(out[s][i * out_stride + h * dim + d], r[d], tol)
                << "seq " << s << " query " << i << " head " << h << " d " << d;
          }
        }
      }
    }
  }
};

const k::KvDtype kDtypes[] = {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

}  // namespace

TEST_P(AttentionLevels, PagedMatchesDoubleReference) {
  struct Shape {
    size_t Hq, Hkv, dim, block_tokens;
  };
  // GQA groups of 3 and 4 and none; head sizes of whole 16-float vectors (64-float P x V tiles
  // and 1, 2 or 3 vectors more), an 8-float tail and none that fits a vector; blocks of 16, and
  // of 5 and 12 (not multiples of 8).
  const Shape shapes[] = {{9, 3, 64, 16}, {8, 2, 80, 16}, {4, 4, 96, 5},  {6, 3, 48, 16},
                          {6, 2, 40, 12}, {6, 2, 7, 16},  {2, 1, 128, 16}};
  // (new queries, per-head lengths): decode, a prefill chunk, ragged heads with lengths on
  // and off block boundaries, one head long enough to be split into several chunks.
  const std::vector<std::pair<size_t, std::vector<uint32_t>>> specs4 = {
      {1, {1, 16, 17, 700}}, {5, {5, 33, 64, 1100}}, {3, {40, 3, 21, 6}}};
  uint32_t seed = 1;
  for (const Shape& sh : shapes) {
    std::vector<std::pair<size_t, std::vector<uint32_t>>> specs;
    for (const auto& [nq, lens] : specs4) {
      specs.push_back({nq, std::vector<uint32_t>(lens.begin(), lens.begin() + sh.Hkv)});
    }
    for (k::KvDtype dtype : kDtypes) {
      SCOPED_TRACE(testing::Message() << "Hq " << sh.Hq << " Hkv " << sh.Hkv << " dim " << sh.dim
                                      << " block " << sh.block_tokens << " " << dtype_name(dtype));
      PagedBatch batch(sh.Hq, sh.Hkv, sh.dim, sh.block_tokens, dtype, specs, seed++);
      const float scale = 1.5f / std::sqrt(float(sh.dim));
      batch.run(scale);
      batch.expect_matches_reference(scale);
    }
  }
}

// A sequence's output does not depend on the rest of the batch or on the thread count.
TEST_P(AttentionLevels, PagedIsBitIdenticalAcrossBatchingAndThreads) {
  const std::vector<std::pair<size_t, std::vector<uint32_t>>> specs = {
      {1, {700, 3, 1500}}, {4, {1100, 40, 513}}, {1, {5, 9, 2}}, {2, {2000, 17, 64}}};
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    PagedBatch batch(9, 3, 64, 16, dtype, specs, 7);
    const float scale = 0.3f;
    batch.run(scale);
    const auto together = batch.out;
    for (size_t s = 0; s < specs.size(); ++s) {
      std::fill(batch.out[s].begin(), batch.out[s].end(), 0.0f);
      batch.run(scale, s, 1);
      EXPECT_EQ(batch.out[s], together[s]) << "sequence " << s << " alone";
    }
    const int threads = k::num_threads();
    for (int n : {1, 2, 3}) {
      k::set_num_threads(n);
      for (auto& o : batch.out) std::fill(o.begin(), o.end(), 0.0f);
      batch.run(scale);
      EXPECT_EQ(batch.out, together) << n << " threads";
    }
    k::set_num_threads(threads);
  }
}

// A NaN stored in a key or a value (the E4M3 NaN code, a bf16 or f32 NaN) makes NaN exactly the
// outputs of the query rows that see that token; every other row, including rows of the same
// head that stop one token short of it, stays exact.
TEST_P(AttentionLevels, PagedNanReachesOnlyTheRowsThatSeeIt) {
  for (k::KvDtype dtype : kDtypes) {
    for (int in_value = 0; in_value < 2; ++in_value) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << (in_value ? " value" : " key"));
      // Head 0 holds 40 tokens; 3 new queries see 38, 39 and 40 of them. The NaN goes in
      // token 38.
      PagedBatch batch(4, 2, 64, 16, dtype, {{3, {40, 20}}}, 11);
      const size_t bt = 16, token = 38, dim = 64;
      uint8_t* block = batch.pool.data() + batch.ids[0][0][token / bt] * batch.layout.block_bytes();
      std::vector<float> kr(dim), vr(dim);
      k::check(k::kv_block_read(block, batch.layout, token % bt, 1, kr.data(), vr.data()), "read");
      (in_value ? vr : kr)[5] = std::numeric_limits<float>::quiet_NaN();
      k::check(k::kv_block_write(block, batch.layout, token % bt, kr.data(), vr.data(), 1, dim),
               "write");
      batch.run(0.2f);
      for (size_t i = 0; i < 3; ++i) {
        for (size_t h = 0; h < 4; ++h) {
          const bool sees = h < 2 && i >= 1;  // heads 0 and 1 read KV head 0
          const float* o = &batch.out[0][i * batch.out_stride + h * dim];
          const auto r = batch.reference(0, i, h, 0.2f);
          for (size_t d = 0; d < dim; ++d) {
            // A NaN value reaches only its own dimension; a NaN key reaches them all.
            if (sees && (!in_value || d == 5)) {
              ASSERT_TRUE(std::isnan(o[d])) << "query " << i << " head " << h << " d " << d;
            } else if (!sees) {
              ASSERT_NEAR(o[d], r[d], 1e-4) << "query " << i << " head " << h << " d " << d;
            }
          }
        }
      }
    }
  }
}

TEST_P(AttentionLevels, CausalMatchesDoubleReference) {
  struct Case {
    size_t T, n_kv, Hq, Hkv, Dh;
  };
  const Case cases[] = {{1, 300, 9, 3, 64}, {5, 769, 2, 1, 32},   {40, 100, 4, 2, 80},
                        {33, 33, 8, 2, 96}, {130, 200, 9, 3, 64}, {17, 40, 3, 3, 7},
                        {64, 64, 2, 1, 128}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.T << " n_kv " << c.n_kv << " Hq " << c.Hq
                                    << " Hkv " << c.Hkv << " Dh " << c.Dh);
    std::mt19937 rng(static_cast<uint32_t>(c.T * 7 + c.Dh));
    const size_t q_stride = c.Hq * c.Dh + 2, kv_stride = c.Hkv * c.Dh + 1;
    const size_t out_stride = c.Hq * c.Dh + 3;
    const auto q = random_vector(c.T * q_stride, rng, 1.0f);
    const auto kc = random_vector(c.n_kv * kv_stride, rng, 1.0f);
    const auto vc = random_vector(c.n_kv * kv_stride, rng, 1.0f);
    const float scale = 1.5f / std::sqrt(float(c.Dh));
    std::vector<float> out(c.T * out_stride, 0.0f);
    k::check(k::attention_causal(out.data(), q.data(), kc.data(), vc.data(), c.T, c.n_kv, c.Hq,
                                 c.Hkv, c.Dh, q_stride, kv_stride, out_stride, scale),
             "attention_causal");
    const size_t group = c.Hq / c.Hkv;
    for (size_t t = 0; t < c.T; ++t) {
      for (size_t h = 0; h < c.Hq; ++h) {
        const size_t g = h / group, visible = c.n_kv - c.T + t + 1;
        std::vector<double> p(visible);
        double m = -INFINITY, sum = 0;
        for (size_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (size_t d = 0; d < c.Dh; ++d) {
            dot += double(q[t * q_stride + h * c.Dh + d]) * kc[j * kv_stride + g * c.Dh + d];
          }
          p[j] = dot * scale;
          m = std::max(m, p[j]);
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        std::vector<double> r(c.Dh, 0.0);
        double max_ref = 1e-6;
        for (size_t d = 0; d < c.Dh; ++d) {
          for (size_t j = 0; j < visible; ++j)
            r[d] += p[j] / sum * vc[j * kv_stride + g * c.Dh + d];
          max_ref = std::max(max_ref, std::fabs(r[d]));
        }
        for (size_t d = 0; d < c.Dh; ++d) {
          ASSERT_NEAR(out[t * out_stride + h * c.Dh + d], r[d],
                      adakv::test::kF32AttentionRel * max_ref)
              << "query " << t << " head " << h << " d " << d;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionLevels,
                         testing::Values(k::QuantLevel::kScalar, k::QuantLevel::kAvx2,
                                         k::QuantLevel::kAvx512),
                         [](const testing::TestParamInfo<k::QuantLevel>& info) {
                           return std::string(k::quant_level_name(info.param));
                         });
