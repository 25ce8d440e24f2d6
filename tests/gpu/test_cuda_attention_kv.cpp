// The CUDA backend's attention group (attention_causal, attention_paged) and KV-pool group
// (kv_append, kv_copy_rows, kv_gather, kv_block_write, kv_block_read) against the CPU backend,
// for every KV dtype, on awkward shapes: 1 token and long heads (several key tiles), ragged heads
// of different lengths, lengths that are not multiples of block_tokens, head sizes of 1, 7, 64,
// 128 and beyond a block's threads, GQA ratios 1, 3 and 4, layouts whose E4M3 scales and blocks
// are not word aligned, padded rows. Attention is within kCudaAttentionTolerance of the CPU, the
// same bits on every run and, for attention_paged, the same bits for a sequence alone or in any
// batch; the pool's stores are the CPU's bytes and its reads the CPU's floats, bit for bit, NaN,
// infinities and subnormals included. Every argument the CPU rejects is rejected here too, before
// anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::CudaBackendTest;
using adakv::test::DeviceArray;
using adakv::test::kCudaAttentionTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;

class CudaAttentionCausal : public CudaBackendTest {};
class CudaAttentionPaged : public CudaBackendTest {};
class CudaKvAppend : public CudaBackendTest {};
class CudaKvCopyRows : public CudaBackendTest {};
class CudaKvGather : public CudaBackendTest {};
class CudaKvBlock : public CudaBackendTest {};

const k::KvDtype kDtypes[] = {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

// The head values of `rows` rows (`width` floats each, `stride` apart) and, separately, the
// padding after them: values are compared within the tolerance, the padding must stay as it was.
struct Split {
  std::vector<float> values, padding;
};

Split split_rows(const std::vector<float>& buffer, size_t rows, size_t stride, size_t width) {
  Split s;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t x = 0; x < stride; ++x) {
      (x < width ? s.values : s.padding).push_back(buffer[r * stride + x]);
    }
  }
  return s;
}

// A pool of n_blocks blocks, every byte 0xCD until written.
std::vector<uint8_t> blank_pool(const k::KvBlockLayout& layout, size_t n_blocks) {
  return std::vector<uint8_t>(n_blocks * layout.block_bytes(), 0xCD);
}

// A pool whose every slot holds a random row, stored by the CPU.
std::vector<uint8_t> random_pool(const k::KvBlockLayout& layout, size_t n_blocks, uint32_t seed) {
  auto pool = blank_pool(layout, n_blocks);
  const size_t slots = n_blocks * layout.block_tokens, dim = layout.head_dim;
  const auto kv = random_vector(2 * slots * dim, seed, 2.0f);
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  k::cpu_backend().kv_append(pool.data(), layout, kv.data(), kv.data() + slots * dim, dim, slots, 1,
                             all.data());
  return pool;
}

// Rows that the E4M3 and bf16 stores must get right to the bit: zeros, rows so small that the
// E4M3 scale underflows, huge rows, NaN and infinities, subnormals, E4M3 ties once scaled.
std::vector<float> awkward_rows(size_t n_rows, size_t dim, uint32_t seed) {
  auto rows = random_vector(n_rows * dim, seed, 2.0f);
  for (size_t r = 0; r < n_rows; ++r) {
    float* row = &rows[r * dim];
    switch (r % 9) {
      case 0:
        std::fill(row, row + dim, 0.0f);
        break;
      case 1:
        for (size_t d = 0; d < dim; ++d) row[d] *= 1e-42f;
        break;
      case 2:
        for (size_t d = 0; d < dim; ++d) row[d] *= 1e38f;
        break;
      case 3:
        row[dim / 2] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 4:
        row[dim - 1] = INFINITY;
        break;
      case 5:
        row[0] = -INFINITY;
        break;
      case 6:
        for (size_t d = 0; d < dim; ++d) row[d] = std::numeric_limits<float>::denorm_min() * d;
        break;
      case 7:
        for (size_t d = 0; d < dim; ++d) row[d] = d == 0 ? 448.0f : 0.5f * float(d % 40) + 0.0625f;
        break;
      default:
        break;
    }
  }
  return rows;
}

// ---- attention_causal ---------------------------------------------------------------------------

struct CausalShape {
  size_t T, n_kv, Hq, Hkv, Dh;
};

std::ostream& operator<<(std::ostream& os, const CausalShape& s) {
  return os << "T " << s.T << " n_kv " << s.n_kv << " Hq " << s.Hq << " Hkv " << s.Hkv << " Dh "
            << s.Dh;
}

TEST_F(CudaAttentionCausal, MatchesCpu) {
  // One token over one key, decode rows over long caches, prompts from empty, chunks of a
  // prompt, GQA 1, 3 and 4, head sizes from 1 to 576 (several per thread), 4000 keys.
  const CausalShape shapes[] = {
      {1, 1, 1, 1, 1},    {1, 33, 3, 1, 8},     {7, 17, 3, 3, 7},     {17, 33, 6, 3, 64},
      {33, 33, 3, 1, 16}, {64, 200, 4, 2, 128}, {130, 130, 9, 3, 64}, {1, 1000, 32, 8, 128},
      {5, 5, 12, 4, 64},  {3, 10, 2, 1, 576},   {40, 70, 3, 1, 200},  {100, 4000, 2, 1, 128}};
  uint32_t seed = 1;
  for (const CausalShape& s : shapes) {
    for (float sharpness : {1.0f, 4.0f}) {
      SCOPED_TRACE(testing::Message() << s << " sharpness " << sharpness);
      const size_t q_stride = s.Hq * s.Dh + 3, kv_stride = s.Hkv * s.Dh + 1,
                   out_stride = s.Hq * s.Dh + 2;
      const auto q = random_vector(s.T * q_stride, seed++, 2.0f);
      const auto kc = random_vector(s.n_kv * kv_stride, seed++, 2.0f);
      const auto vc = random_vector(s.n_kv * kv_stride, seed++);
      const float scale = sharpness / std::sqrt(float(s.Dh));
      std::vector<float> want(s.T * out_stride, 777.0f);
      cpu().attention_causal(want.data(), q.data(), kc.data(), vc.data(), s.T, s.n_kv, s.Hq, s.Hkv,
                             s.Dh, q_stride, kv_stride, out_stride, scale);

      DeviceArray<float> dq = to_cuda(q), dk = to_cuda(kc), dv = to_cuda(vc);
      DeviceArray<float> out = to_cuda(std::vector<float>(s.T * out_stride, 777.0f));
      cuda().attention_causal(out.data(), dq.data(), dk.data(), dv.data(), s.T, s.n_kv, s.Hq, s.Hkv,
                              s.Dh, q_stride, kv_stride, out_stride, scale);
      const auto got = out.download();
      const Split g = split_rows(got, s.T, out_stride, s.Hq * s.Dh);
      const Split w = split_rows(want, s.T, out_stride, s.Hq * s.Dh);
      EXPECT_TRUE(matches_cpu(g.values, w.values, kCudaAttentionTolerance));
      EXPECT_TRUE(same_bits(g.padding, w.padding)) << "padding written";

      cuda().attention_causal(out.data(), dq.data(), dk.data(), dv.data(), s.T, s.n_kv, s.Hq, s.Hkv,
                              s.Dh, q_stride, kv_stride, out_stride, scale);
      EXPECT_TRUE(same_bits(out.download(), got)) << "a second run differs";
    }
  }
}

TEST_F(CudaAttentionCausal, RejectsWhatTheCpuRejects) {
  DeviceArray<float> x = to_cuda(std::vector<float>(64, 1.0f));
  DeviceArray<float> out = to_cuda(std::vector<float>(64, 777.0f));
  const auto call = [&](size_t T, size_t n_kv, size_t Hq, size_t Hkv, size_t Dh) {
    cuda().attention_causal(out.data(), x.data(), x.data(), x.data(), T, n_kv, Hq, Hkv, Dh, 8, 8, 8,
                            0.5f);
  };
  EXPECT_TRUE(rejects([&] { call(1, 1, 1, 0, 4); }, "attention_causal"));  // no KV heads
  EXPECT_TRUE(rejects([&] { call(1, 1, 3, 2, 4); }, "attention_causal"));  // Hq % Hkv
  EXPECT_TRUE(rejects([&] { call(3, 2, 1, 1, 4); }, "attention_causal"));  // T > n_kv
  EXPECT_TRUE(rejects([&] { call(1, 1, 1, 1, 0); }, "attention_causal"));  // Dh 0
  EXPECT_NO_THROW(call(0, 0, 1, 1, 4));
  EXPECT_NO_THROW(call(0, 5, 2, 1, 4));
  EXPECT_TRUE(same_bits(out.download(), std::vector<float>(64, 777.0f)));
}

// ---- attention_paged ----------------------------------------------------------------------------

struct SeqSpec {
  size_t n_queries;
  std::vector<uint32_t> lengths;  // [Hkv]
};

struct PagedCase {
  size_t block_tokens, head_dim, Hq, Hkv;
  std::vector<SeqSpec> specs;
};

std::ostream& operator<<(std::ostream& os, const PagedCase& c) {
  return os << "block_tokens " << c.block_tokens << " head_dim " << c.head_dim << " Hq " << c.Hq
            << " Hkv " << c.Hkv << " sequences " << c.specs.size();
}

// A paged batch in host memory: every head's blocks (scattered over the pool) written by the
// CPU, queries, and output rows prefilled with 777 (padding included).
struct HostBatch {
  k::KvBlockLayout layout;
  size_t Hq, Hkv;
  std::vector<uint8_t> pool;
  std::vector<std::vector<int32_t>> ids;  // [seq * Hkv + g]
  std::vector<std::vector<uint32_t>> lengths;
  std::vector<std::vector<float>> q, out;
  size_t q_stride, out_stride;

  size_t n_seqs() const { return lengths.size(); }
  size_t n_queries(size_t s) const { return q[s].size() / q_stride; }
};

HostBatch make_batch(k::KvDtype dtype, const PagedCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const k::KvBlockLayout layout{c.block_tokens, c.head_dim, dtype};
  HostBatch b{
      layout, c.Hq, c.Hkv, {}, {}, {}, {}, {}, c.Hq * c.head_dim + 5, c.Hq * c.head_dim + 3};
  const size_t bt = c.block_tokens, dim = c.head_dim;
  size_t n_blocks = 3;  // spares, never read
  for (const auto& s : c.specs)
    for (uint32_t len : s.lengths) n_blocks += (len + bt - 1) / bt;
  std::vector<int32_t> free_ids(n_blocks);
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  b.pool = random_pool(layout, n_blocks, rng());  // the spares hold data too
  size_t next = 0;
  for (const auto& s : c.specs) {
    for (size_t g = 0; g < c.Hkv; ++g) {
      const size_t len = s.lengths[g];
      b.ids.emplace_back();
      const auto kin = random_vector(len * dim, rng(), 1.0f);
      const auto vin = random_vector(len * dim, rng(), 1.0f);
      for (size_t t0 = 0; t0 < len; t0 += bt) {
        const int32_t id = free_ids[next++];
        b.ids.back().push_back(id);
        k::cpu_backend().kv_block_write(b.pool.data() + size_t(id) * layout.block_bytes(), layout,
                                        0, &kin[t0 * dim], &vin[t0 * dim], std::min(bt, len - t0),
                                        dim);
      }
    }
    b.lengths.push_back(s.lengths);
    b.q.push_back(random_vector(s.n_queries * b.q_stride, rng(), 1.0f));
    b.out.push_back(std::vector<float>(s.n_queries * b.out_stride, 777.0f));
  }
  return b;
}

// The CPU's outputs for the whole batch, one vector per sequence.
std::vector<std::vector<float>> cpu_paged(HostBatch b, float scale) {
  std::vector<std::vector<const int32_t*>> tables(b.n_seqs());
  std::vector<k::PagedSequence> seqs;
  for (size_t s = 0; s < b.n_seqs(); ++s) {
    for (size_t g = 0; g < b.Hkv; ++g) tables[s].push_back(b.ids[s * b.Hkv + g].data());
    seqs.push_back({tables[s].data(), b.lengths[s].data(), b.n_queries(s), b.q[s].data(),
                    b.q_stride, b.out[s].data(), b.out_stride});
  }
  k::cpu_backend().attention_paged(seqs.data(), seqs.size(), b.pool.data(), b.layout, b.Hq, b.Hkv,
                                   scale);
  return b.out;
}

// The sequences `which` of a host batch (in that order) in device memory, the descriptors
// included, as the runtime stages them: one array of block ids, of lengths, of queries and of
// outputs, per-head table pointers into the ids, and the PagedSequence array.
struct DeviceBatch {
  k::Backend& backend;
  const HostBatch& host;
  std::vector<size_t> which;
  std::unique_ptr<DeviceArray<uint8_t>> pool;
  std::unique_ptr<DeviceArray<int32_t>> ids;
  std::unique_ptr<DeviceArray<uint32_t>> lengths;
  std::unique_ptr<DeviceArray<float>> q, out;
  std::unique_ptr<DeviceArray<const int32_t*>> tables;
  std::unique_ptr<DeviceArray<k::PagedSequence>> seqs;
  std::vector<int32_t> host_ids;
  std::vector<uint32_t> host_lengths;
  std::vector<size_t> out_at;  // first float of each included sequence's output rows
  std::vector<k::PagedSequence> descriptors;

  DeviceBatch(k::Backend& b, const HostBatch& h, std::vector<size_t> seqs_in)
      : backend(b), host(h), which(std::move(seqs_in)) {
    pool = std::make_unique<DeviceArray<uint8_t>>(b, h.pool);
    std::vector<size_t> ids_at;
    std::vector<float> all_q, all_out;
    std::vector<size_t> q_at;
    for (size_t s : which) {
      for (size_t g = 0; g < h.Hkv; ++g) {
        ids_at.push_back(host_ids.size());
        const auto& head = h.ids[s * h.Hkv + g];
        host_ids.insert(host_ids.end(), head.begin(), head.end());
        host_lengths.push_back(h.lengths[s][g]);
      }
      q_at.push_back(all_q.size());
      all_q.insert(all_q.end(), h.q[s].begin(), h.q[s].end());
      out_at.push_back(all_out.size());
      all_out.insert(all_out.end(), h.out[s].begin(), h.out[s].end());
    }
    host_ids.push_back(0);  // never empty
    ids = std::make_unique<DeviceArray<int32_t>>(b, host_ids);
    lengths = std::make_unique<DeviceArray<uint32_t>>(b, host_lengths);
    q = std::make_unique<DeviceArray<float>>(b, all_q);
    out = std::make_unique<DeviceArray<float>>(b, all_out);
    std::vector<const int32_t*> table_ptrs;
    for (size_t at : ids_at) table_ptrs.push_back(ids->data() + at);
    tables = std::make_unique<DeviceArray<const int32_t*>>(b, table_ptrs);
    for (size_t i = 0; i < which.size(); ++i) {
      descriptors.push_back({tables->data() + i * h.Hkv, lengths->data() + i * h.Hkv,
                             h.n_queries(which[i]), q->data() + q_at[i], h.q_stride,
                             out->data() + out_at[i], h.out_stride});
    }
    seqs = std::make_unique<DeviceArray<k::PagedSequence>>(b, descriptors);
  }

  void run(float scale) {
    backend.attention_paged(seqs->data(), which.size(), pool->data(), host.layout, host.Hq,
                            host.Hkv, scale);
  }
  // The outputs of included sequence i.
  std::vector<float> output(const std::vector<float>& all, size_t i) const {
    const size_t n = host.out[which[i]].size();
    return std::vector<float>(all.begin() + out_at[i], all.begin() + out_at[i] + n);
  }
};

std::vector<size_t> all_of(const HostBatch& b) {
  std::vector<size_t> v(b.n_seqs());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

const PagedCase kPagedCases[] = {
    {16, 64, 1, 1, {{1, {1}}}},
    // GQA 3, lengths on both sides of block boundaries, 1 and 3 new queries.
    {16, 64, 9, 3, {{1, {15, 16, 17}}, {3, {33, 3, 16}}, {1, {1, 32, 49}}}},
    {16, 128, 3, 1, {{3, {17}}, {1, {33}}, {1, {1000}}}},
    // 8 KV heads of very different lengths (Ada-KV budgets), GQA 4.
    {16,
     128,
     32,
     8,
     {{1, {65, 64, 63, 1, 2, 128, 129, 700}}, {4, {4, 5, 6, 7, 100, 200, 300, 400}}}},
    // block_tokens that divide nothing.
    {7, 64, 12, 4, {{5, {5, 40, 77, 200}}, {1, {1, 1, 1, 1}}}},
    // Odd layouts: E4M3 scales and blocks not word aligned, head size below a warp.
    {3, 7, 6, 2, {{2, {2, 9}}, {1, {130, 4}}}},
    // A chunk of a prompt continuing a long cache, next to a decode row.
    {16, 64, 4, 1, {{64, {64}}, {33, {2000}}, {1, {5}}}},
    {16, 64, 2, 2, {{1, {3000, 17}}}},
};

TEST_F(CudaAttentionPaged, MatchesCpu) {
  uint32_t seed = 100;
  for (k::KvDtype dtype : kDtypes) {
    for (const PagedCase& c : kPagedCases) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << c);
      const HostBatch host = make_batch(dtype, c, seed++);
      const float scale = 1.0f / std::sqrt(float(c.head_dim));
      const auto want = cpu_paged(host, scale);
      DeviceBatch dev(cuda(), host, all_of(host));
      dev.run(scale);
      const auto got = dev.out->download();
      for (size_t s = 0; s < host.n_seqs(); ++s) {
        const size_t rows = host.n_queries(s), width = c.Hq * c.head_dim;
        const Split g = split_rows(dev.output(got, s), rows, host.out_stride, width);
        const Split w = split_rows(want[s], rows, host.out_stride, width);
        EXPECT_TRUE(matches_cpu(g.values, w.values, kCudaAttentionTolerance)) << "sequence " << s;
        EXPECT_TRUE(same_bits(g.padding, w.padding)) << "sequence " << s << ": padding written";
      }
      dev.run(scale);
      EXPECT_TRUE(same_bits(dev.out->download(), got)) << "a second run differs";
    }
  }
}

// A sequence's output is the same bits alone, in a batch and wherever it sits in the batch.
TEST_F(CudaAttentionPaged, BatchInvariant) {
  const PagedCase c{16, 128, 8, 2, {{1, {700, 33}}, {3, {17, 300}}, {1, {1, 1}}, {2, {64, 2000}}}};
  uint32_t seed = 300;
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const HostBatch host = make_batch(dtype, c, seed++);
    const float scale = 0.09f;
    DeviceBatch batch(cuda(), host, {0, 1, 2, 3});
    batch.run(scale);
    const auto all = batch.out->download();
    DeviceBatch reversed(cuda(), host, {3, 2, 1, 0});
    reversed.run(scale);
    const auto all_reversed = reversed.out->download();
    for (size_t s = 0; s < host.n_seqs(); ++s) {
      DeviceBatch alone(cuda(), host, {s});
      alone.run(scale);
      const auto own = alone.out->download();
      EXPECT_TRUE(same_bits(batch.output(all, s), own)) << "sequence " << s;
      EXPECT_TRUE(same_bits(reversed.output(all_reversed, host.n_seqs() - 1 - s), own))
          << "sequence " << s << " reversed";
    }
  }
}

TEST_F(CudaAttentionPaged, RejectsWhatTheCpuRejects) {
  const PagedCase c{4, 8, 6, 2, {{1, {5, 1}}, {3, {3, 9}}}};
  const HostBatch host = make_batch(k::KvDtype::kBF16, c, 400);
  const float scale = 0.3f;
  const auto untouched = [](DeviceBatch& dev) {
    std::vector<float> init;
    for (size_t s : dev.which) {
      init.insert(init.end(), dev.host.out[s].begin(), dev.host.out[s].end());
    }
    return same_bits(dev.out->download(), init);
  };

  // host_ids, as DeviceBatch lays them out: seq 0 head 0 (5 tokens: ids 0, 1), head 1 (1 token:
  // 2), seq 1 head 0 (3 tokens: 3), head 1 (9 tokens: 4, 5, 6), then a spare entry (7).
  // Each case breaks one descriptor, length or block id of a fresh device batch; the op must
  // reject it without writing an output.
  const std::vector<std::pair<const char*, void (*)(DeviceBatch&)>> breaks = {
      {"no queries", [](DeviceBatch& d) { d.descriptors[1].n_queries = 0; }},
      {"more queries than head 0 holds", [](DeviceBatch& d) { d.descriptors[1].n_queries = 4; }},
      {"more queries than head 1 holds", [](DeviceBatch& d) { d.descriptors[0].n_queries = 2; }},
      {"short head", [](DeviceBatch& d) { d.host_lengths[2] = 2; }},
      {"negative id in the last block read", [](DeviceBatch& d) { d.host_ids[6] = -1; }},
      {"negative first id", [](DeviceBatch& d) { d.host_ids[0] = -3; }},
      {"overlapping query rows", [](DeviceBatch& d) { d.descriptors[1].q_stride = 6 * 8 - 1; }},
      {"overlapping output rows", [](DeviceBatch& d) { d.descriptors[1].out_stride = 1; }},
      {"no queries pointer", [](DeviceBatch& d) { d.descriptors[0].q = nullptr; }},
      {"no output pointer", [](DeviceBatch& d) { d.descriptors[1].out = nullptr; }},
      {"no lengths", [](DeviceBatch& d) { d.descriptors[0].lengths = nullptr; }},
      {"no block tables", [](DeviceBatch& d) { d.descriptors[1].block_ids = nullptr; }},
  };
  for (const auto& [what, apply] : breaks) {
    SCOPED_TRACE(what);
    DeviceBatch dev(cuda(), host, all_of(host));
    apply(dev);
    dev.seqs->upload(dev.descriptors);
    dev.ids->upload(dev.host_ids);
    dev.lengths->upload(dev.host_lengths);
    EXPECT_TRUE(rejects([&] { dev.run(scale); }, "attention_paged"));
    EXPECT_TRUE(untouched(dev));
  }
  {
    // A head table entry that is null.
    DeviceBatch dev(cuda(), host, all_of(host));
    DeviceArray<const int32_t*> tables = to_cuda(std::vector<const int32_t*>{
        dev.ids->data(), dev.ids->data() + 2, dev.ids->data() + 3, nullptr});
    dev.descriptors[0].block_ids = tables.data();
    dev.descriptors[1].block_ids = tables.data() + 2;
    dev.seqs->upload(dev.descriptors);
    EXPECT_TRUE(rejects([&] { dev.run(scale); }, "attention_paged"));
    EXPECT_TRUE(untouched(dev));
  }
  {
    // One query reads any stride; a negative id past a head's last block is never read.
    DeviceBatch dev(cuda(), host, all_of(host));
    dev.descriptors[0].q_stride = 1;
    dev.descriptors[0].out_stride = 1;
    dev.seqs->upload(dev.descriptors);
    dev.host_ids[7] = -1;
    dev.ids->upload(dev.host_ids);
    EXPECT_NO_THROW(dev.run(scale));
  }

  // The host-side arguments.
  DeviceBatch dev(cuda(), host, all_of(host));
  const auto call = [&](const k::PagedSequence* seqs, size_t n, const uint8_t* pool,
                        k::KvBlockLayout layout, size_t Hq, size_t Hkv) {
    cuda().attention_paged(seqs, n, pool, layout, Hq, Hkv, scale);
  };
  const k::KvBlockLayout layout = host.layout;
  const uint8_t* pool = dev.pool->data();
  const k::PagedSequence* seqs = dev.seqs->data();
  EXPECT_TRUE(rejects([&] { call(seqs, 2, pool, layout, 6, 0); }, "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(seqs, 2, pool, layout, 6, 4); }, "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(seqs, 2, pool, {0, 8, layout.dtype}, 6, 2); }, "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(seqs, 2, pool, {4, 0, layout.dtype}, 6, 2); }, "attention_paged"));
  EXPECT_TRUE(rejects(
      [&] {
        call(seqs, 2, pool, {4, 8, k::KvDtype(3)}, 6, 2);
      },
      "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(nullptr, 2, pool, layout, 6, 2); }, "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(seqs, 2, nullptr, layout, 6, 2); }, "attention_paged"));
  EXPECT_TRUE(rejects([&] { call(nullptr, 0, nullptr, layout, 6, 0); }, "attention_paged"));
  EXPECT_NO_THROW(call(nullptr, 0, nullptr, layout, 6, 2));
  EXPECT_TRUE(untouched(dev));
}

// ---- kv_append ----------------------------------------------------------------------------------

// kv_append of n_tokens x n_heads rows (padded by 5 floats) to `slots` on both backends: the
// pools must be the same bytes.
void expect_append_matches(k::Backend& cuda, const k::KvBlockLayout& layout, size_t n_tokens,
                           size_t n_heads, const std::vector<int32_t>& slots, size_t n_blocks,
                           const std::vector<float>& k_rows, const std::vector<float>& v_rows,
                           size_t stride) {
  auto want = blank_pool(layout, n_blocks);
  k::cpu_backend().kv_append(want.data(), layout, k_rows.data(), v_rows.data(), stride, n_tokens,
                             n_heads, slots.data());
  DeviceArray<uint8_t> pool(cuda, blank_pool(layout, n_blocks));
  DeviceArray<float> dk(cuda, k_rows), dv(cuda, v_rows);
  DeviceArray<int32_t> ds(cuda, slots);
  cuda.kv_append(pool.data(), layout, dk.data(), dv.data(), stride, n_tokens, n_heads, ds.data());
  EXPECT_EQ(pool.download(), want);
}

TEST_F(CudaKvAppend, MatchesCpu) {
  std::mt19937 rng(10);
  for (k::KvDtype dtype : kDtypes) {
    for (size_t head_dim : {1, 7, 64, 128}) {
      for (size_t bt : {3, 16}) {
        const k::KvBlockLayout layout{bt, head_dim, dtype};
        for (size_t n_heads : {1, 3, 8}) {
          for (size_t n_tokens : {1, 7, 33}) {
            SCOPED_TRACE(testing::Message()
                         << dtype_name(dtype) << " head_dim " << head_dim << " block_tokens " << bt
                         << " heads " << n_heads << " tokens " << n_tokens);
            // Distinct random slots, about one in eight skipped (-1).
            const size_t n_blocks = (n_tokens * n_heads * 2) / bt + 2;
            std::vector<int32_t> all(n_blocks * bt);
            std::iota(all.begin(), all.end(), 0);
            std::shuffle(all.begin(), all.end(), rng);
            std::vector<int32_t> slots(all.begin(), all.begin() + n_tokens * n_heads);
            for (auto& s : slots) {
              if (rng() % 8 == 0) s = -1;
            }
            const size_t stride = n_heads * head_dim + 5;
            const auto k_rows = random_vector(n_tokens * stride, rng(), 2.0f);
            const auto v_rows = random_vector(n_tokens * stride, rng(), 2.0f);
            expect_append_matches(cuda(), layout, n_tokens, n_heads, slots, n_blocks, k_rows,
                                  v_rows, stride);
          }
        }
      }
    }
  }
}

// A 3000-token prompt of 3 heads, the heads' blocks interleaved as the cache lays them out.
TEST_F(CudaKvAppend, LongPrompt) {
  const size_t n_tokens = 3000, n_heads = 3, bt = 16;
  std::vector<int32_t> slots(n_tokens * n_heads);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      slots[t * n_heads + h] = int32_t(((t / bt) * n_heads + h) * bt + t % bt);
    }
  }
  const size_t n_blocks = (n_tokens + bt - 1) / bt * n_heads;
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const k::KvBlockLayout layout{bt, 128, dtype};
    const size_t stride = n_heads * 128;
    expect_append_matches(cuda(), layout, n_tokens, n_heads, slots, n_blocks,
                          random_vector(n_tokens * stride, 20),
                          random_vector(n_tokens * stride, 21), stride);
  }
}

TEST_F(CudaKvAppend, AwkwardValuesAreTheCpusBytes) {
  for (k::KvDtype dtype : kDtypes) {
    for (size_t head_dim : {7, 64}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " head_dim " << head_dim);
      const k::KvBlockLayout layout{16, head_dim, dtype};
      const size_t n_tokens = 18, n_heads = 2, stride = n_heads * head_dim;
      std::vector<int32_t> slots(n_tokens * n_heads);
      std::iota(slots.begin(), slots.end(), 3);
      expect_append_matches(cuda(), layout, n_tokens, n_heads, slots, 4,
                            awkward_rows(n_tokens * n_heads, head_dim, 30),
                            awkward_rows(n_tokens * n_heads, head_dim, 31), stride);
    }
  }
}

TEST_F(CudaKvAppend, RejectsWhatTheCpuRejects) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kE4M3};
  const auto blank = blank_pool(layout, 2);
  DeviceArray<uint8_t> pool = to_cuda(blank);
  DeviceArray<float> rows = to_cuda(std::vector<float>(16, 1.0f));
  DeviceArray<int32_t> bad = to_cuda(std::vector<int32_t>{0, -2}),
                       good = to_cuda(std::vector<int32_t>{0, 1}),
                       skip = to_cuda(std::vector<int32_t>{-1, -1});
  const auto call = [&](const k::KvBlockLayout& l, uint8_t* p, const float* k, const float* v,
                        size_t stride, size_t n_tokens, size_t n_heads, const int32_t* s) {
    cuda().kv_append(p, l, k, v, stride, n_tokens, n_heads, s);
  };
  float* r = rows.data();
  uint8_t* p = pool.data();
  EXPECT_TRUE(rejects([&] { call(layout, p, r, r, 4, 2, 1, bad.data()); }, "kv_append"));
  EXPECT_TRUE(rejects([&] { call(layout, nullptr, r, r, 4, 2, 1, good.data()); }, "kv_append"));
  EXPECT_TRUE(rejects([&] { call(layout, p, nullptr, r, 4, 2, 1, good.data()); }, "kv_append"));
  EXPECT_TRUE(rejects([&] { call(layout, p, r, nullptr, 4, 2, 1, good.data()); }, "kv_append"));
  EXPECT_TRUE(rejects([&] { call(layout, p, r, r, 4, 2, 1, nullptr); }, "kv_append"));
  EXPECT_TRUE(rejects([&] { call(layout, p, r, r, 3, 2, 1, good.data()); }, "kv_append"));
  EXPECT_TRUE(rejects(
      [&] {
        call({0, 4, layout.dtype}, p, r, r, 4, 2, 1, good.data());
      },
      "kv_append"));
  EXPECT_TRUE(rejects(
      [&] {
        call({16, 0, layout.dtype}, p, r, r, 4, 2, 1, good.data());
      },
      "kv_append"));
  EXPECT_TRUE(rejects(
      [&] {
        call({16, 4, k::KvDtype(3)}, p, r, r, 4, 2, 1, good.data());
      },
      "kv_append"));
  // An invalid layout is rejected even with nothing to store; nothing to store is fine else.
  EXPECT_TRUE(rejects(
      [&] {
        call({0, 4, layout.dtype}, p, r, r, 4, 0, 1, good.data());
      },
      "kv_append"));
  EXPECT_NO_THROW(call(layout, nullptr, nullptr, nullptr, 0, 0, 3, nullptr));
  EXPECT_NO_THROW(call(layout, p, r, r, 4, 2, 0, nullptr));
  // One token: any stride. -1 stores nothing.
  EXPECT_NO_THROW(call(layout, p, r, r, 0, 1, 2, skip.data()));
  EXPECT_NO_THROW(call(layout, p, r, r, 4, 2, 1, skip.data()));
  EXPECT_EQ(pool.download(), blank);
}

// ---- kv_copy_rows -------------------------------------------------------------------------------

void expect_copy_matches(k::Backend& cuda, const k::KvBlockLayout& layout,
                         const std::vector<uint8_t>& initial, const std::vector<int32_t>& src,
                         const std::vector<int32_t>& dst) {
  auto want = initial;
  k::cpu_backend().kv_copy_rows(want.data(), layout, src.data(), dst.data(), src.size());
  DeviceArray<uint8_t> pool(cuda, initial);
  DeviceArray<int32_t> dsrc(cuda, src), ddst(cuda, dst);
  cuda.kv_copy_rows(pool.data(), layout, dsrc.data(), ddst.data(), src.size());
  EXPECT_EQ(pool.download(), want);
}

TEST_F(CudaKvCopyRows, MatchesCpu) {
  std::mt19937 rng(30);
  for (k::KvDtype dtype : kDtypes) {
    for (auto [bt, head_dim] : {std::pair<size_t, size_t>{16, 7}, {16, 64}, {3, 7}, {1, 128}}) {
      const k::KvBlockLayout layout{bt, head_dim, dtype};
      const size_t n_blocks = 320 / bt, n_slots = n_blocks * bt;
      for (size_t n : {1, 7, 40, 300}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " block_tokens " << bt
                                        << " head_dim " << head_dim << " moves " << n);
        // Distinct destinations; sources from every slot, so some are destinations of other
        // moves and some are read several times.
        std::vector<int32_t> dst(n_slots);
        std::iota(dst.begin(), dst.end(), 0);
        std::shuffle(dst.begin(), dst.end(), rng);
        dst.resize(n);
        std::vector<int32_t> src(n);
        for (auto& s : src) s = int32_t(rng() % n_slots);
        expect_copy_matches(cuda(), layout, random_pool(layout, n_blocks, rng()), src, dst);
      }
    }
  }
}

// Compaction of one head in place: kept positions move down over block boundaries, the moves
// given last first, then a swap and a 3-cycle: only a snapshot gets these right.
TEST_F(CudaKvCopyRows, CompactsInPlace) {
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const k::KvBlockLayout layout{16, 64, dtype};
    const std::vector<int32_t> blocks = {4, 1, 3};
    const auto slot_of = [&](size_t pos) { return blocks[pos / 16] * 16 + int32_t(pos % 16); };
    std::vector<int32_t> src, dst;
    std::vector<size_t> kept;
    for (size_t p = 0; p < 40; ++p) {
      if (p % 4 == 1 || p % 4 == 2) kept.push_back(p);
    }
    for (size_t i = kept.size(); i-- > 0;) {
      src.push_back(slot_of(kept[i]));
      dst.push_back(slot_of(i));
    }
    for (auto [a, b] :
         {std::pair<size_t, size_t>{30, 31}, {31, 30}, {40, 41}, {41, 42}, {42, 40}}) {
      src.push_back(slot_of(a));
      dst.push_back(slot_of(b));
    }
    // A move onto itself.
    src.push_back(slot_of(45));
    dst.push_back(slot_of(45));
    expect_copy_matches(cuda(), layout, random_pool(layout, 5, 40 + uint32_t(dtype)), src, dst);
  }
}

TEST_F(CudaKvCopyRows, RejectsWhatTheCpuRejects) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kBF16};
  const auto initial = random_pool(layout, 2, 50);
  DeviceArray<uint8_t> pool = to_cuda(initial);
  DeviceArray<int32_t> bad = to_cuda(std::vector<int32_t>{0, -1}),
                       good = to_cuda(std::vector<int32_t>{1, 0});
  uint8_t* p = pool.data();
  const int32_t* g = good.data();
  const int32_t* b = bad.data();
  EXPECT_TRUE(rejects([&] { cuda().kv_copy_rows(p, layout, g, b, 2); }, "kv_copy_rows"));
  EXPECT_TRUE(rejects([&] { cuda().kv_copy_rows(p, layout, b, g, 2); }, "kv_copy_rows"));
  EXPECT_TRUE(rejects([&] { cuda().kv_copy_rows(nullptr, layout, g, g, 2); }, "kv_copy_rows"));
  EXPECT_TRUE(rejects([&] { cuda().kv_copy_rows(p, layout, nullptr, g, 2); }, "kv_copy_rows"));
  EXPECT_TRUE(rejects([&] { cuda().kv_copy_rows(p, layout, g, nullptr, 2); }, "kv_copy_rows"));
  EXPECT_TRUE(rejects(
      [&] {
        cuda().kv_copy_rows(p, {16, 0, layout.dtype}, g, g, 2);
      },
      "kv_copy_rows"));
  EXPECT_TRUE(rejects(
      [&] {
        cuda().kv_copy_rows(p, {0, 4, layout.dtype}, g, g, 0);
      },
      "kv_copy_rows"));
  EXPECT_NO_THROW(cuda().kv_copy_rows(nullptr, layout, nullptr, nullptr, 0));
  EXPECT_EQ(pool.download(), initial);
}

// ---- kv_gather ----------------------------------------------------------------------------------

TEST_F(CudaKvGather, MatchesCpu) {
  std::mt19937 rng(60);
  for (k::KvDtype dtype : kDtypes) {
    for (auto [bt, head_dim] : {std::pair<size_t, size_t>{16, 7}, {16, 64}, {16, 128}, {3, 7}}) {
      const k::KvBlockLayout layout{bt, head_dim, dtype};
      const size_t n_blocks = 64 / bt + 1, stride = head_dim + 3;
      const auto host_pool = random_pool(layout, n_blocks, rng());
      DeviceArray<uint8_t> pool = to_cuda(host_pool);
      for (size_t n : {1, 7, 769}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " block_tokens " << bt
                                        << " head_dim " << head_dim << " rows " << n);
        std::vector<int32_t> slots(n);
        for (auto& s : slots) s = int32_t(rng() % (n_blocks * bt));  // repeats included
        std::vector<float> wk(n * stride, -1.0f), wv(n * stride, -1.0f);
        cpu().kv_gather(wk.data(), wv.data(), stride, host_pool.data(), layout, slots.data(), n);
        DeviceArray<int32_t> ds = to_cuda(slots);
        DeviceArray<float> k_out = to_cuda(std::vector<float>(n * stride, -1.0f));
        DeviceArray<float> v_out = to_cuda(std::vector<float>(n * stride, -1.0f));
        cuda().kv_gather(k_out.data(), v_out.data(), stride, pool.data(), layout, ds.data(), n);
        EXPECT_TRUE(same_bits(k_out.download(), wk));
        EXPECT_TRUE(same_bits(v_out.download(), wv));
        // Keys alone.
        DeviceArray<float> k_only = to_cuda(std::vector<float>(n * stride, -1.0f));
        cuda().kv_gather(k_only.data(), nullptr, stride, pool.data(), layout, ds.data(), n);
        EXPECT_TRUE(same_bits(k_only.download(), wk));
      }
    }
  }
}

// Rows holding NaN, infinities, subnormals and zeros read back as the CPU reads them.
TEST_F(CudaKvGather, AwkwardValuesAreTheCpusFloats) {
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const k::KvBlockLayout layout{16, 64, dtype};
    const size_t n = 36;
    const auto kr = awkward_rows(n, 64, 70), vr = awkward_rows(n, 64, 71);
    std::vector<int32_t> slots(n);
    std::iota(slots.begin(), slots.end(), 5);
    auto host_pool = blank_pool(layout, 3);
    cpu().kv_append(host_pool.data(), layout, kr.data(), vr.data(), 64, n, 1, slots.data());
    std::vector<float> wk(n * 64), wv(n * 64);
    cpu().kv_gather(wk.data(), wv.data(), 64, host_pool.data(), layout, slots.data(), n);
    DeviceArray<uint8_t> pool = to_cuda(host_pool);
    DeviceArray<int32_t> ds = to_cuda(slots);
    DeviceArray<float> k_out(cuda(), n * 64), v_out(cuda(), n * 64);
    cuda().kv_gather(k_out.data(), v_out.data(), 64, pool.data(), layout, ds.data(), n);
    EXPECT_TRUE(same_bits(k_out.download(), wk));
    EXPECT_TRUE(same_bits(v_out.download(), wv));
  }
}

TEST_F(CudaKvGather, RejectsWhatTheCpuRejects) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kF32};
  DeviceArray<uint8_t> pool = to_cuda(random_pool(layout, 2, 80));
  const std::vector<float> init(8, -1.0f);
  DeviceArray<float> out = to_cuda(init);
  DeviceArray<int32_t> bad = to_cuda(std::vector<int32_t>{0, -2}),
                       skip = to_cuda(std::vector<int32_t>{-1, 0}),
                       good = to_cuda(std::vector<int32_t>{0, 1});
  float* o = out.data();
  const uint8_t* p = pool.data();
  const auto call = [&](float* k, size_t stride, const uint8_t* pl, k::KvBlockLayout l,
                        const int32_t* s,
                        size_t n) { cuda().kv_gather(k, nullptr, stride, pl, l, s, n); };
  EXPECT_TRUE(rejects([&] { call(o, 4, p, layout, bad.data(), 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 4, p, layout, skip.data(), 2); }, "kv_gather"));  // -1 too
  EXPECT_TRUE(rejects([&] { call(nullptr, 4, p, layout, good.data(), 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 4, nullptr, layout, good.data(), 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 4, p, layout, nullptr, 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 3, p, layout, good.data(), 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 4, p, {16, 4, k::KvDtype(7)}, good.data(), 2); }, "kv_gather"));
  EXPECT_TRUE(rejects([&] { call(o, 4, p, {0, 4, layout.dtype}, good.data(), 0); }, "kv_gather"));
  EXPECT_NO_THROW(call(nullptr, 0, nullptr, layout, nullptr, 0));
  EXPECT_TRUE(same_bits(out.download(), init));
  EXPECT_NO_THROW(call(o, 0, p, layout, good.data(), 1));  // one row: any stride
}

// ---- kv_block_write and kv_block_read -----------------------------------------------------------

TEST_F(CudaKvBlock, WriteAndReadMatchCpu) {
  uint32_t seed = 90;
  for (k::KvDtype dtype : kDtypes) {
    for (size_t bt : {1, 3, 16}) {
      for (size_t head_dim : {1, 7, 64, 128}) {
        const k::KvBlockLayout layout{bt, head_dim, dtype};
        for (auto [row0, n] : {std::pair<size_t, size_t>{0, 1},
                               {0, bt},
                               {bt / 2, bt - bt / 2},
                               {bt - 1, 1},
                               {bt, 0}}) {
          SCOPED_TRACE(testing::Message()
                       << dtype_name(dtype) << " block_tokens " << bt << " head_dim " << head_dim
                       << " rows " << row0 << "+" << n);
          const size_t stride = head_dim + 3;
          const auto kv = random_vector(2 * std::max<size_t>(n, 1) * stride, seed++, 3.0f);
          const float* kr = kv.data();
          const float* vr = kv.data() + std::max<size_t>(n, 1) * stride;
          auto want = blank_pool(layout, 1);
          cpu().kv_block_write(want.data(), layout, row0, kr, vr, n, stride);
          DeviceArray<uint8_t> block = to_cuda(blank_pool(layout, 1));
          DeviceArray<float> dkv = to_cuda(kv);
          cuda().kv_block_write(block.data(), layout, row0, dkv.data(), dkv.data() + (vr - kr), n,
                                stride);
          EXPECT_EQ(block.download(), want);

          std::vector<float> wk(n * head_dim + 1, -1.0f), wv(n * head_dim + 1, -1.0f);
          cpu().kv_block_read(want.data(), layout, row0, n, wk.data(), wv.data());
          DeviceArray<float> rk = to_cuda(std::vector<float>(wk.size(), -1.0f));
          DeviceArray<float> rv = to_cuda(std::vector<float>(wv.size(), -1.0f));
          cuda().kv_block_read(block.data(), layout, row0, n, rk.data(), rv.data());
          EXPECT_TRUE(same_bits(rk.download(), wk));
          EXPECT_TRUE(same_bits(rv.download(), wv));
        }
      }
    }
  }
}

// Blocks at byte addresses of every alignment (the ops promise nothing about them), rows of
// awkward values.
TEST_F(CudaKvBlock, UnalignedBlocksAndAwkwardValues) {
  for (k::KvDtype dtype : kDtypes) {
    for (size_t offset : {0, 1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " block at +" << offset);
      const k::KvBlockLayout layout{9, 64, dtype};
      const size_t n = 9;
      const auto kr = awkward_rows(n, 64, 100), vr = awkward_rows(n, 64, 101);
      std::vector<uint8_t> want(layout.block_bytes() + 4, 0xCD);
      cpu().kv_block_write(want.data() + offset, layout, 0, kr.data(), vr.data(), n, 64);
      DeviceArray<uint8_t> bytes = to_cuda(std::vector<uint8_t>(want.size(), 0xCD));
      DeviceArray<float> dk = to_cuda(kr), dv = to_cuda(vr);
      cuda().kv_block_write(bytes.data() + offset, layout, 0, dk.data(), dv.data(), n, 64);
      EXPECT_EQ(bytes.download(), want);

      std::vector<float> wk(n * 64), wv(n * 64);
      cpu().kv_block_read(want.data() + offset, layout, 0, n, wk.data(), wv.data());
      DeviceArray<float> rk(cuda(), n * 64), rv(cuda(), n * 64);
      cuda().kv_block_read(bytes.data() + offset, layout, 0, n, rk.data(), rv.data());
      EXPECT_TRUE(same_bits(rk.download(), wk));
      EXPECT_TRUE(same_bits(rv.download(), wv));
    }
  }
}

TEST_F(CudaKvBlock, RejectsWhatTheCpuRejects) {
  const k::KvBlockLayout layout{4, 8, k::KvDtype::kE4M3};
  const auto blank = blank_pool(layout, 1);
  DeviceArray<uint8_t> block = to_cuda(blank);
  const std::vector<float> init(64, -1.0f);
  DeviceArray<float> rows = to_cuda(init);
  uint8_t* b = block.data();
  float* r = rows.data();
  const auto write = [&](k::KvBlockLayout l, uint8_t* blk, size_t row0, const float* k,
                         const float* v, size_t n,
                         size_t stride) { cuda().kv_block_write(blk, l, row0, k, v, n, stride); };
  EXPECT_TRUE(rejects([&] { write(layout, b, 5, r, r, 0, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write(layout, b, 2, r, r, 3, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write(layout, nullptr, 0, r, r, 1, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write(layout, b, 0, nullptr, r, 1, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write(layout, b, 0, r, nullptr, 1, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write(layout, b, 0, r, r, 2, 7); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write({0, 8, layout.dtype}, b, 0, r, r, 0, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write({4, 0, layout.dtype}, b, 0, r, r, 1, 8); }, "kv_block_write"));
  EXPECT_TRUE(rejects([&] { write({4, 8, k::KvDtype(3)}, b, 0, r, r, 1, 8); }, "kv_block_write"));
  EXPECT_NO_THROW(write(layout, nullptr, 4, nullptr, nullptr, 0, 0));
  EXPECT_EQ(block.download(), blank);
  EXPECT_NO_THROW(write(layout, b, 3, r, r, 1, 0));  // one row: any stride

  const auto read = [&](k::KvBlockLayout l, const uint8_t* blk, size_t row0, size_t n, float* k,
                        float* v) { cuda().kv_block_read(blk, l, row0, n, k, v); };
  EXPECT_TRUE(rejects([&] { read(layout, b, 5, 0, r, r); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read(layout, b, 1, 4, r, r); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read(layout, nullptr, 0, 1, r, r); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read(layout, b, 0, 1, nullptr, r); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read(layout, b, 0, 1, r, nullptr); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read({4, 8, k::KvDtype(3)}, b, 0, 1, r, r); }, "kv_block_read"));
  EXPECT_TRUE(rejects([&] { read({0, 8, layout.dtype}, b, 0, 0, r, r); }, "kv_block_read"));
  EXPECT_NO_THROW(read(layout, nullptr, 0, 0, nullptr, nullptr));
  EXPECT_TRUE(same_bits(rows.download(), init));
}

}  // namespace
