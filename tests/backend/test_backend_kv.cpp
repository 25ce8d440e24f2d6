// The KV pool's ops on every backend (backend_fixture.h): block writes and reads, appends by
// slot, row copies (a snapshot, for compaction in place), gathers, and paged attention over
// ragged heads, for every KV dtype. Stored bytes are compared bit for bit with what the host's
// kv_block_write stores; attention with a double reference over the dequantized rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tests/backend/backend_fixture.h"
#include "tests/unit/random_data.h"
#include "tests/unit/tolerances.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::BackendTest;
using adakv::test::DeviceArray;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;

const k::KvDtype kDtypes[] = {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

// A host image of a pool of n_blocks blocks, every byte 0xCD until written.
std::vector<uint8_t> blank_pool(const k::KvBlockLayout& layout, size_t n_blocks) {
  return std::vector<uint8_t>(n_blocks * layout.block_bytes(), 0xCD);
}

// The host's write of one row to a slot: the reference of every store.
void host_write(std::vector<uint8_t>& pool, const k::KvBlockLayout& layout, int32_t slot,
                const float* k, const float* v) {
  uint8_t* block = pool.data() + size_t(slot) / layout.block_tokens * layout.block_bytes();
  k::check(k::kv_block_write(block, layout, size_t(slot) % layout.block_tokens, k, v, 1,
                             layout.head_dim),
           "kv_block_write");
}

// The host's read of one slot as float32.
void host_read(const std::vector<uint8_t>& pool, const k::KvBlockLayout& layout, int32_t slot,
               float* k, float* v) {
  const uint8_t* block = pool.data() + size_t(slot) / layout.block_tokens * layout.block_bytes();
  k::check(k::kv_block_read(block, layout, size_t(slot) % layout.block_tokens, 1, k, v),
           "kv_block_read");
}

// The bytes of one slot (K row, V row, E4M3 scales).
std::vector<uint8_t> slot_bytes(const std::vector<uint8_t>& pool, const k::KvBlockLayout& layout,
                                int32_t slot) {
  const uint8_t* block = pool.data() + size_t(slot) / layout.block_tokens * layout.block_bytes();
  const size_t row = size_t(slot) % layout.block_tokens;
  const size_t rb = layout.head_dim * layout.elem_bytes();
  std::vector<uint8_t> out(block + layout.k_offset() + row * rb,
                           block + layout.k_offset() + (row + 1) * rb);
  out.insert(out.end(), block + layout.v_offset() + row * rb,
             block + layout.v_offset() + (row + 1) * rb);
  if (layout.dtype == k::KvDtype::kE4M3) {
    for (size_t which : {0, 1}) {
      const uint8_t* s = block + layout.scales_offset() + (which * layout.block_tokens + row) * 4;
      out.insert(out.end(), s, s + 4);
    }
  }
  return out;
}

void set_slot_bytes(std::vector<uint8_t>& pool, const k::KvBlockLayout& layout, int32_t slot,
                    const std::vector<uint8_t>& bytes) {
  uint8_t* block = pool.data() + size_t(slot) / layout.block_tokens * layout.block_bytes();
  const size_t row = size_t(slot) % layout.block_tokens;
  const size_t rb = layout.head_dim * layout.elem_bytes();
  std::memcpy(block + layout.k_offset() + row * rb, bytes.data(), rb);
  std::memcpy(block + layout.v_offset() + row * rb, bytes.data() + rb, rb);
  if (layout.dtype == k::KvDtype::kE4M3) {
    for (size_t which : {0, 1}) {
      std::memcpy(block + layout.scales_offset() + (which * layout.block_tokens + row) * 4,
                  bytes.data() + 2 * rb + 4 * which, 4);
    }
  }
}

// A pool whose every slot holds a random row (written by the host).
std::vector<uint8_t> random_pool(const k::KvBlockLayout& layout, size_t n_blocks, uint32_t seed) {
  auto pool = blank_pool(layout, n_blocks);
  const size_t slots = n_blocks * layout.block_tokens;
  const auto kv = random_vector(2 * slots * layout.head_dim, seed, 2.0f);
  for (size_t s = 0; s < slots; ++s) {
    host_write(pool, layout, int32_t(s), &kv[2 * s * layout.head_dim],
               &kv[(2 * s + 1) * layout.head_dim]);
  }
  return pool;
}

class BackendKv : public BackendTest {};

TEST_P(BackendKv, BlockWriteAndRead) {
  uint32_t seed = 1;
  for (k::KvDtype dtype : kDtypes) {
    const k::KvBlockLayout layout{16, 64, dtype};
    for (auto [row0, n] : {std::pair<size_t, size_t>{0, 1}, {0, 16}, {3, 7}, {15, 1}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " rows " << row0 << "+" << n);
      const size_t stride = layout.head_dim + 3;
      const auto kv = random_vector(2 * n * stride, seed++, 3.0f);
      auto want = blank_pool(layout, 1);
      k::check(k::kv_block_write(want.data(), layout, row0, kv.data(), kv.data() + n * stride, n,
                                 stride),
               "kv_block_write");
      DeviceArray<uint8_t> block = to_device(blank_pool(layout, 1));
      DeviceArray<float> dkv = to_device(kv);
      backend().kv_block_write(block.data(), layout, row0, dkv.data(), dkv.data() + n * stride, n,
                               stride);
      EXPECT_EQ(block.download(), want);

      std::vector<float> wk(n * layout.head_dim), wv(n * layout.head_dim);
      k::check(k::kv_block_read(want.data(), layout, row0, n, wk.data(), wv.data()),
               "kv_block_read");
      DeviceArray<float> rk = filled(wk.size(), -1.0f), rv = filled(wv.size(), -1.0f);
      backend().kv_block_read(block.data(), layout, row0, n, rk.data(), rv.data());
      EXPECT_TRUE(same_bits(rk.download(), wk));
      EXPECT_TRUE(same_bits(rv.download(), wv));
    }
  }
}

// kv_append stores the bytes kv_block_write stores, at every slot asked and nowhere else.
void check_append(k::Backend& backend, const k::KvBlockLayout& layout, size_t n_tokens,
                  size_t n_heads, const std::vector<int32_t>& slots, size_t n_blocks,
                  uint32_t seed) {
  const size_t stride = n_heads * layout.head_dim + 5;
  const auto k_rows = random_vector(n_tokens * stride, seed, 2.0f);
  const auto v_rows = random_vector(n_tokens * stride, seed + 1, 2.0f);
  auto want = blank_pool(layout, n_blocks);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0) continue;
    const size_t at = i / n_heads * stride + i % n_heads * layout.head_dim;
    host_write(want, layout, slots[i], &k_rows[at], &v_rows[at]);
  }
  DeviceArray<uint8_t> pool(backend, blank_pool(layout, n_blocks));
  DeviceArray<float> dk(backend, k_rows), dv(backend, v_rows);
  DeviceArray<int32_t> ds(backend, slots);
  backend.kv_append(pool.data(), layout, dk.data(), dv.data(), stride, n_tokens, n_heads,
                    ds.data());
  EXPECT_EQ(pool.download(), want);
}

TEST_P(BackendKv, AppendMatchesBlockWrites) {
  std::mt19937 rng(10);
  for (k::KvDtype dtype : kDtypes) {
    for (size_t head_dim : {7, 64}) {
      const k::KvBlockLayout layout{16, head_dim, dtype};
      for (size_t n_heads : {1, 3}) {
        for (size_t n_tokens : {1, 7, 33}) {
          SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " head_dim " << head_dim
                                          << " heads " << n_heads << " tokens " << n_tokens);
          // Distinct random slots over 6 blocks, about one in eight skipped (-1).
          const size_t n_blocks = 3 * n_heads * 6;
          std::vector<int32_t> all(n_blocks * 16);
          std::iota(all.begin(), all.end(), 0);
          std::shuffle(all.begin(), all.end(), rng);
          std::vector<int32_t> slots(all.begin(), all.begin() + n_tokens * n_heads);
          for (auto& s : slots) {
            if (rng() % 8 == 0) s = -1;
          }
          check_append(backend(), layout, n_tokens, n_heads, slots, n_blocks, rng());
        }
      }
    }
  }
}

// A 3000-token prompt of 3 heads, each head in its own run of blocks as the cache lays them out:
// large enough to be split over threads.
TEST_P(BackendKv, AppendOfALongPrompt) {
  const size_t n_tokens = 3000, n_heads = 3, bt = 16;
  const size_t blocks_per_head = (n_tokens + bt - 1) / bt;
  std::vector<int32_t> slots(n_tokens * n_heads);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      // Heads interleaved block by block: head h's j-th block is block j * n_heads + h.
      slots[t * n_heads + h] = int32_t(((t / bt) * n_heads + h) * bt + t % bt);
    }
  }
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    check_append(backend(), k::KvBlockLayout{bt, 64, dtype}, n_tokens, n_heads, slots,
                 blocks_per_head * n_heads, 20);
  }
}

// Applies moves to a host pool the way the op promises: every source read first.
void host_copy_rows(std::vector<uint8_t>& pool, const k::KvBlockLayout& layout,
                    const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
  std::vector<std::vector<uint8_t>> snapshot;
  for (int32_t s : src) snapshot.push_back(slot_bytes(pool, layout, s));
  for (size_t i = 0; i < dst.size(); ++i) set_slot_bytes(pool, layout, dst[i], snapshot[i]);
}

TEST_P(BackendKv, CopyRowsCopiesBytesFromASnapshot) {
  std::mt19937 rng(30);
  for (k::KvDtype dtype : kDtypes) {
    const k::KvBlockLayout layout{16, 7, dtype};
    const size_t n_blocks = 5, n_slots = n_blocks * 16;
    for (size_t n : {1, 7, 40}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " moves " << n);
      // Distinct destinations; sources drawn from every slot, so some sources are also
      // destinations of other moves (and some moves read a slot several times).
      std::vector<int32_t> dst(n_slots);
      std::iota(dst.begin(), dst.end(), 0);
      std::shuffle(dst.begin(), dst.end(), rng);
      dst.resize(n);
      std::vector<int32_t> src(n);
      for (auto& s : src) s = int32_t(rng() % n_slots);
      const auto initial = random_pool(layout, n_blocks, rng());
      auto want = initial;
      host_copy_rows(want, layout, src, dst);
      DeviceArray<uint8_t> pool = to_device(initial);
      DeviceArray<int32_t> dsrc = to_device(src), ddst = to_device(dst);
      backend().kv_copy_rows(pool.data(), layout, dsrc.data(), ddst.data(), n);
      EXPECT_EQ(pool.download(), want);
    }
  }
}

// Compaction of one head in place: kept positions 1, 2, 5, 6, 9, ... move down to 0, 1, 2, ...
// over block boundaries, the moves given last first, and a swap: only a snapshot gets these
// right (a move in list order would read rows already overwritten).
TEST_P(BackendKv, CopyRowsCompactsInPlace) {
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const k::KvBlockLayout layout{16, 64, dtype};
    const std::vector<int32_t> blocks = {4, 1, 3};  // the head's blocks, in token order
    auto slot_of = [&](size_t pos) { return blocks[pos / 16] * 16 + int32_t(pos % 16); };
    const size_t length = 40;
    std::vector<size_t> kept;
    for (size_t p = 0; p < length; ++p) {
      if (p % 4 == 1 || p % 4 == 2) kept.push_back(p);
    }
    std::vector<int32_t> src, dst;
    for (size_t i = kept.size(); i-- > 0;) {
      src.push_back(slot_of(kept[i]));
      dst.push_back(slot_of(i));
    }
    // And a swap of two positions past the kept ones.
    src.push_back(slot_of(30));
    dst.push_back(slot_of(31));
    src.push_back(slot_of(31));
    dst.push_back(slot_of(30));

    const auto initial = random_pool(layout, 5, 40 + uint32_t(dtype));
    DeviceArray<uint8_t> pool = to_device(initial);
    DeviceArray<int32_t> dsrc = to_device(src), ddst = to_device(dst);
    backend().kv_copy_rows(pool.data(), layout, dsrc.data(), ddst.data(), src.size());
    const auto got = pool.download();
    for (size_t i = 0; i < kept.size(); ++i) {
      ASSERT_EQ(slot_bytes(got, layout, slot_of(i)), slot_bytes(initial, layout, slot_of(kept[i])))
          << "position " << i << " should hold kept position " << kept[i];
    }
    EXPECT_EQ(slot_bytes(got, layout, slot_of(30)), slot_bytes(initial, layout, slot_of(31)));
    EXPECT_EQ(slot_bytes(got, layout, slot_of(31)), slot_bytes(initial, layout, slot_of(30)));
    auto want = initial;
    host_copy_rows(want, layout, src, dst);
    EXPECT_EQ(got, want);
  }
}

TEST_P(BackendKv, GatherReadsSlotsAsFloat32) {
  std::mt19937 rng(50);
  for (k::KvDtype dtype : kDtypes) {
    const k::KvBlockLayout layout{16, 7, dtype};
    const size_t n_blocks = 4, dim = layout.head_dim, stride = dim + 3;
    const auto host_pool = random_pool(layout, n_blocks, rng());
    DeviceArray<uint8_t> pool = to_device(host_pool);
    for (size_t n : {1, 7, 769}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " rows " << n);
      std::vector<int32_t> slots(n);
      for (auto& s : slots) s = int32_t(rng() % (n_blocks * 16));  // repeats included
      std::vector<float> wk(n * stride, -1.0f), wv(n * stride, -1.0f);
      for (size_t i = 0; i < n; ++i)
        host_read(host_pool, layout, slots[i], &wk[i * stride], &wv[i * stride]);
      DeviceArray<int32_t> ds = to_device(slots);
      DeviceArray<float> k_out = filled(n * stride, -1.0f), v_out = filled(n * stride, -1.0f);
      backend().kv_gather(k_out.data(), v_out.data(), stride, pool.data(), layout, ds.data(), n);
      EXPECT_TRUE(same_bits(k_out.download(), wk));
      EXPECT_TRUE(same_bits(v_out.download(), wv));
      // Keys alone.
      DeviceArray<float> k_only = filled(n * stride, -1.0f);
      backend().kv_gather(k_only.data(), nullptr, stride, pool.data(), layout, ds.data(), n);
      EXPECT_TRUE(same_bits(k_only.download(), wk));
    }
  }
}

TEST_P(BackendKv, OpsNameThemselvesOnBadSlots) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kF32};
  DeviceArray<uint8_t> pool = to_device(blank_pool(layout, 2));
  DeviceArray<float> rows = filled(8, 1.0f);
  DeviceArray<int32_t> bad = to_device(std::vector<int32_t>{0, -2}),
                       good = to_device(std::vector<int32_t>{0, 1});
  EXPECT_TRUE(rejects(
      [&] {
        backend().kv_append(pool.data(), layout, rows.data(), rows.data(), 4, 2, 1, bad.data());
      },
      "kv_append"));
  EXPECT_TRUE(
      rejects([&] { backend().kv_copy_rows(pool.data(), layout, good.data(), bad.data(), 2); },
              "kv_copy_rows"));
  EXPECT_TRUE(rejects(
      [&] { backend().kv_gather(rows.data(), nullptr, 4, pool.data(), layout, bad.data(), 2); },
      "kv_gather"));
  // A slot of -1 is a skip in kv_append only.
  DeviceArray<int32_t> skip = to_device(std::vector<int32_t>{-1, -1});
  EXPECT_NO_THROW(
      backend().kv_append(pool.data(), layout, rows.data(), rows.data(), 4, 2, 1, skip.data()));
  EXPECT_EQ(pool.download(), blank_pool(layout, 2));
  EXPECT_TRUE(rejects(
      [&] { backend().kv_gather(rows.data(), nullptr, 4, pool.data(), layout, skip.data(), 2); },
      "kv_gather"));
}

// ---- attention_paged ----------------------------------------------------------------------

struct SeqSpec {
  size_t n_queries;
  std::vector<uint32_t> lengths;  // [Hkv]
};

void check_paged_attention(k::Backend& backend, size_t Hq, size_t Hkv, k::KvDtype dtype,
                           const std::vector<SeqSpec>& specs, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t dim = 64, bt = 16;
  const float scale = 0.125f;
  const k::KvBlockLayout layout{bt, dim, dtype};
  size_t n_blocks = 3;  // spares
  for (const auto& s : specs)
    for (uint32_t len : s.lengths) n_blocks += (len + bt - 1) / bt;
  std::vector<int32_t> free_ids(n_blocks);
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  auto pool = blank_pool(layout, n_blocks);

  // Host images: every head's block ids (concatenated), its K/V as stored, the queries.
  std::vector<int32_t> ids;
  std::vector<size_t> ids_at;  // [seq * Hkv + g] -> offset in ids
  std::vector<uint32_t> lengths;
  std::vector<std::vector<float>> kd, vd;  // [seq * Hkv + g], dequantized
  const size_t q_stride = Hq * dim + 5, out_stride = Hq * dim + 3;
  std::vector<size_t> q_at;
  size_t q_total = 0;
  for (const auto& s : specs) {
    for (size_t g = 0; g < Hkv; ++g) {
      const size_t len = s.lengths[g];
      ids_at.push_back(ids.size());
      lengths.push_back(uint32_t(len));
      const auto kin = random_vector(len * dim, rng(), 1.0f);
      const auto vin = random_vector(len * dim, rng(), 1.0f);
      kd.emplace_back(len * dim);
      vd.emplace_back(len * dim);
      for (size_t t0 = 0; t0 < len; t0 += bt) {
        const int32_t id = free_ids[ids.size()];
        ids.push_back(id);
        uint8_t* block = pool.data() + size_t(id) * layout.block_bytes();
        const size_t n = std::min(bt, len - t0);
        k::check(k::kv_block_write(block, layout, 0, &kin[t0 * dim], &vin[t0 * dim], n, dim),
                 "kv_block_write");
        k::check(k::kv_block_read(block, layout, 0, n, &kd.back()[t0 * dim], &vd.back()[t0 * dim]),
                 "kv_block_read");
      }
    }
    q_at.push_back(q_total);
    q_total += s.n_queries * q_stride;
  }
  const auto q = random_vector(q_total, rng(), 1.0f);

  // Device images, and the pointers into them.
  DeviceArray<uint8_t> dpool(backend, pool);
  DeviceArray<int32_t> dids(backend, ids);
  DeviceArray<uint32_t> dlengths(backend, lengths);
  DeviceArray<float> dq(backend, q);
  std::vector<float> out_init(q_total / q_stride * out_stride, 777.0f);
  DeviceArray<float> dout(backend, out_init);
  std::vector<const int32_t*> tables;
  for (size_t i = 0; i < ids_at.size(); ++i) tables.push_back(dids.data() + ids_at[i]);
  DeviceArray<const int32_t*> dtables(backend, tables);
  std::vector<k::PagedSequence> seqs;
  size_t out_rows = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    seqs.push_back({dtables.data() + s * Hkv, dlengths.data() + s * Hkv, specs[s].n_queries,
                    dq.data() + q_at[s], q_stride, dout.data() + out_rows * out_stride,
                    out_stride});
    out_rows += specs[s].n_queries;
  }
  DeviceArray<k::PagedSequence> dseqs(backend, seqs);
  backend.attention_paged(dseqs.data(), seqs.size(), dpool.data(), layout, Hq, Hkv, scale);
  const auto out = dout.download();

  // The dense masked reference in double over the stored (dequantized) rows.
  const size_t group = Hq / Hkv;
  std::vector<float> got;
  std::vector<double> want;
  out_rows = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const size_t nq = specs[s].n_queries;
    for (size_t i = 0; i < nq; ++i, ++out_rows) {
      for (size_t h = 0; h < Hq; ++h) {
        const size_t g = h / group, head = s * Hkv + g;
        const size_t visible = specs[s].lengths[g] - nq + i + 1;
        const float* qi = &q[q_at[s] + i * q_stride + h * dim];
        std::vector<double> p(visible);
        double m = -INFINITY, sum = 0;
        for (size_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (size_t d = 0; d < dim; ++d) dot += double(qi[d]) * kd[head][j * dim + d];
          m = std::max(m, p[j] = dot * scale);
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        for (size_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (size_t j = 0; j < visible; ++j) acc += p[j] / sum * vd[head][j * dim + d];
          want.push_back(acc);
          got.push_back(out[out_rows * out_stride + h * dim + d]);
        }
      }
      for (size_t x = Hq * dim; x < out_stride; ++x) {
        ASSERT_EQ(out[out_rows * out_stride + x], 777.0f) << "padding overwritten";
      }
    }
  }
  EXPECT_TRUE(adakv::test::close_to(got, want, adakv::test::kF32AttentionRel));
}

TEST_P(BackendKv, AttentionPagedOverRaggedHeads) {
  for (k::KvDtype dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // GQA (3 query heads per KV head), lengths on both sides of block boundaries, 1 and 3 new
    // queries.
    check_paged_attention(backend(), 9, 3, dtype,
                          {{1, {15, 16, 17}}, {3, {33, 3, 16}}, {1, {1, 32, 49}}}, 60);
    check_paged_attention(backend(), 3, 1, dtype, {{3, {17}}, {1, {33}}}, 61);
    check_paged_attention(backend(), 1, 1, dtype, {{1, {1}}}, 62);
  }
}

ADAKV_INSTANTIATE_BACKENDS(BackendKv);

}  // namespace
