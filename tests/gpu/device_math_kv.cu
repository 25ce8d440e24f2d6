// The KV-pool and attention kernels' math (kernels/cuda/kv_elements.cuh, attention_math.cuh) run
// on the host against the CPU twins:
//  - bf16 and E4M3 conversions bit for bit fp32_to_bf16, bf16_to_fp32, fp32_to_e4m3 and the
//    CPU's block reads, over every bf16 code, every E4M3 code, every float's upper half with the
//    low bits that decide the rounding, a sweep over all floats, and NaN, infinities,
//    subnormals, saturation and ties;
//  - rows stored as the store kernel does it (32 lanes' partial maxima folded by a butterfly)
//    are the bytes kv_block_write stores, and read back bit for bit as kv_block_read reads;
//  - the pool geometry and slot offsets are KvBlockLayout's, and kv_append, kv_copy_rows and
//    kv_gather emulated element by element with them give the CPU ops' bytes and floats;
//  - a PagedSequence fails paged_head_ok on some head exactly when the CPU rejects it, and
//    seq_of_row maps every batch row to its sequence;
//  - attention emulated row by row with the kernels' steps and tiles (causal and paged, every
//    dtype) matches the CPU within kCudaAttentionTolerance.
// What stays unproven here: the kernels' thread mapping and synchronisation, which only a GPU
// runs (tests/gpu/test_cuda_attention_kv.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/attention_math.cuh"
#include "kernels/cuda/kv_elements.cuh"
#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
namespace cu = adakv::kernels::cuda;
using adakv::test::kCudaAttentionTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::same_bits;

const k::KvDtype kDtypes[] = {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

uint32_t to_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Float bit patterns that decide roundings: every upper half with low halves at and around the
// bf16 tie (0x8000) and the E4M3 ties of the upper bits, plus a sweep over all 2^32 patterns.
void for_rounding_patterns(const std::function<void(uint32_t)>& f) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000};
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (uint32_t lo : lows) f(hi << 16 | lo);
  }
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) f(static_cast<uint32_t>(b));
}

// ---- Conversions
// ----------------------------------------------------------------------------------

TEST(DeviceMathKv, Bf16RoundIsTheCpus) {
  size_t mismatches = 0, first = 0;
  for_rounding_patterns([&](uint32_t b) {
    if (cu::bf16_round(from_bits(b)) != k::fp32_to_bf16(from_bits(b)) && mismatches++ == 0) {
      first = b;
    }
  });
  EXPECT_EQ(mismatches, 0u) << "first at bits 0x" << std::hex << first;
}

TEST(DeviceMathKv, Bf16WidenIsTheCpusOnEveryCode) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    ASSERT_EQ(to_bits(cu::bf16_widen(uint16_t(h))), to_bits(k::bf16_to_fp32(uint16_t(h)))) << h;
  }
}

TEST(DeviceMathKv, E4m3EncodeIsTheCpus) {
  size_t mismatches = 0, first = 0;
  const auto compare = [&](uint32_t b) {
    if (cu::e4m3_encode(from_bits(b)) != k::fp32_to_e4m3(from_bits(b)) && mismatches++ == 0) {
      first = b;
    }
  };
  for_rounding_patterns(compare);
  // Every code's value, the midpoints between neighbours and one float ulp either side: the
  // ties to even, the subnormal steps, 448 and the values that saturate to it (464 = the
  // midpoint to a 480 that does not exist, infinities).
  std::vector<float> values;
  for (uint32_t c = 0; c < 0x7F; ++c) values.push_back(k::e4m3_to_fp32(uint8_t(c)));
  values.push_back(480.0f);
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const float mid = (values[i] + values[i + 1]) / 2;
    for (float x : {values[i], mid}) {
      for (float y : {std::nextafter(x, -INFINITY), x, std::nextafter(x, INFINITY)}) {
        compare(to_bits(y));
        compare(to_bits(-y));
      }
    }
  }
  for (float x : {464.0f, 1e30f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), from_bits(0x7F800001u),
                  std::numeric_limits<float>::denorm_min(), 0x1p-10f, 0x1p-10f * 3, 0.0f, -0.0f}) {
    compare(to_bits(x));
  }
  EXPECT_EQ(mismatches, 0u) << "first at bits 0x" << std::hex << first;
  EXPECT_EQ(cu::e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(cu::e4m3_encode(-INFINITY), 0xFE);
  EXPECT_EQ(cu::e4m3_encode(std::numeric_limits<float>::quiet_NaN()), 0x7F);
}

TEST(DeviceMathKv, E4m3DecodeIsTheCpusOnEveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float got = cu::e4m3_decode(uint8_t(c)), want = k::e4m3_to_fp32(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_EQ(to_bits(got), 0x7FC00000u | (c & 0x80u) << 24) << c;
    } else {
      EXPECT_EQ(to_bits(got), to_bits(want)) << c;
    }
  }
}

// A block of one token whose K row holds all 256 codes and V row the same reversed, under
// scales that include the NaN-making ones (0 * inf, NaN scales): every element as kv_block_read
// decodes it, bit for bit.
TEST(DeviceMathKv, E4m3DequantizeIsTheCpusBlockRead) {
  const k::KvBlockLayout layout{1, 256, k::KvDtype::kE4M3};
  const cu::KvGeometry g = cu::kv_geometry(layout);
  std::vector<uint8_t> block(layout.block_bytes());
  for (size_t d = 0; d < 256; ++d) {
    block[cu::kv_row_offset(g, 0, 0) + d] = uint8_t(d);
    block[cu::kv_row_offset(g, 1, 0) + d] = uint8_t(255 - d);
  }
  const float scales[] = {1.0f,
                          0.5f,
                          3.7e-3f,
                          1e-30f,
                          1e-40f,
                          0.0f,
                          -0.0f,
                          INFINITY,
                          -INFINITY,
                          std::numeric_limits<float>::quiet_NaN(),
                          448.0f,
                          1e38f,
                          -2.0f,
                          from_bits(0xFFC00000u),
                          from_bits(0x7F800001u)};
  for (float ks : scales) {
    for (float vs : {1.0f, ks}) {
      cu::kv_store_scale(block.data() + cu::kv_scale_offset(g, 0, 0), ks);
      cu::kv_store_scale(block.data() + cu::kv_scale_offset(g, 1, 0), vs);
      std::vector<float> wk(256), wv(256), gk(256), gv(256);
      k::check(k::kv_block_read(block.data(), layout, 0, 1, wk.data(), wv.data()), "kv_block_read");
      const float rk = cu::kv_load_scale(block.data() + cu::kv_scale_offset(g, 0, 0));
      const float rv = cu::kv_load_scale(block.data() + cu::kv_scale_offset(g, 1, 0));
      for (size_t d = 0; d < 256; ++d) {
        gk[d] = cu::kv_load_element(block.data() + cu::kv_row_offset(g, 0, 0), g.dtype, d, rk);
        gv[d] = cu::kv_load_element(block.data() + cu::kv_row_offset(g, 1, 0), g.dtype, d, rv);
      }
      EXPECT_TRUE(same_bits(gk, wk)) << "scale bits 0x" << std::hex << to_bits(ks);
      EXPECT_TRUE(same_bits(gv, wv)) << "scale bits 0x" << std::hex << to_bits(vs);
    }
  }
}

TEST(DeviceMathKv, UnalignedLoadsAndStoresAreLittleEndianBytes) {
  uint8_t bytes[16];
  for (size_t i = 0; i < 16; ++i) bytes[i] = uint8_t(0x11 * i + 3);
  for (size_t at = 0; at < 8; ++at) {
    uint32_t w32;
    uint16_t w16;
    std::memcpy(&w32, bytes + at, 4);
    std::memcpy(&w16, bytes + at, 2);
    EXPECT_EQ(cu::load_u32_bytewise(bytes + at), w32);
    EXPECT_EQ(cu::load_u16_bytewise(bytes + at), w16);
    EXPECT_EQ(cu::load_u32(bytes + at), w32);
    EXPECT_EQ(cu::load_u16(bytes + at), w16);
    uint8_t a[16] = {}, b[16] = {};
    cu::store_u32_bytewise(a + at, 0xA1B2C3D4u);
    std::memcpy(b + at, "\xD4\xC3\xB2\xA1", 4);
    EXPECT_EQ(std::memcmp(a, b, 16), 0);
    cu::store_u16_bytewise(a + at + 4, 0x1234);
    std::memcpy(b + at + 4, "\x34\x12", 2);
    EXPECT_EQ(std::memcmp(a, b, 16), 0);
  }
}

// ---- Rows and the pool --------------------------------------------------------------------------

// Rows of `dim` floats that exercise the stores: random at several magnitudes, zeros, values
// so small that the E4M3 scale underflows, huge ones, and rows with NaN and infinities.
std::vector<std::vector<float>> awkward_rows(size_t dim, uint32_t seed) {
  std::vector<std::vector<float>> rows;
  for (float scale : {1.0f, 3.0f, 1e-3f, 300.0f}) rows.push_back(random_vector(dim, seed++, scale));
  rows.push_back(std::vector<float>(dim, 0.0f));
  rows.push_back(std::vector<float>(dim, -0.0f));
  auto tiny = random_vector(dim, seed++, 1.0f);
  for (auto& x : tiny) x *= 1e-42f;
  rows.push_back(tiny);
  auto huge = random_vector(dim, seed++, 1.0f);
  for (auto& x : huge) x *= 1e38f;
  rows.push_back(huge);
  for (float special : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
    auto r = random_vector(dim, seed++, 2.0f);
    r[dim / 2] = special;
    rows.push_back(r);
  }
  // The E4M3 grid's ties once scaled: max |x| = 448 makes the scale 1.
  std::vector<float> ties(dim);
  for (size_t d = 0; d < dim; ++d) ties[d] = d == 0 ? 448.0f : 0.5f * float(d % 40) + 0.0625f;
  rows.push_back(ties);
  return rows;
}

// What store_rows_kernel does for one row (row `row` of part `which`), its 32 lanes run one
// after the other and their maxima folded by the same butterfly.
void emulate_store_row(uint8_t* block, const cu::KvGeometry& g, int which, size_t row,
                       const float* x) {
  uint8_t* dst = block + cu::kv_row_offset(g, which, row);
  float scale = 1.0f;
  if (g.dtype == k::KvDtype::kE4M3) {
    float lanes[32];
    for (size_t lane = 0; lane < 32; ++lane) {
      lanes[lane] = 0.0f;
      for (size_t d = lane; d < g.head_dim; d += 32)
        lanes[lane] = cu::e4m3_amax_step(lanes[lane], x[d]);
    }
    for (size_t offset = 16; offset > 0; offset /= 2) {
      float next[32];
      for (size_t lane = 0; lane < 32; ++lane) {
        next[lane] = cu::e4m3_amax_merge(lanes[lane], lanes[lane ^ offset]);
      }
      std::copy(next, next + 32, lanes);
    }
    scale = cu::e4m3_row_scale(lanes[0]);
    cu::kv_store_scale(block + cu::kv_scale_offset(g, which, row), scale);
  }
  for (size_t d = 0; d < g.head_dim; ++d) cu::kv_store_element(dst, g.dtype, d, x[d], scale);
}

// Element d of row `row` of part `which` as read_rows_kernel reads it.
float emulate_load(const uint8_t* block, const cu::KvGeometry& g, int which, size_t row, size_t d) {
  const float scale = g.dtype == k::KvDtype::kE4M3
                          ? cu::kv_load_scale(block + cu::kv_scale_offset(g, which, row))
                          : 1.0f;
  return cu::kv_load_element(block + cu::kv_row_offset(g, which, row), g.dtype, d, scale);
}

TEST(DeviceMathKv, RowStoresAndReadsAreTheCpuBlockOps) {
  uint32_t seed = 10;
  for (k::KvDtype dtype : kDtypes) {
    for (size_t bt : {1, 3, 16}) {
      for (size_t dim : {1, 7, 33, 64, 128}) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(dtype) << " block_tokens " << bt << " head_dim " << dim);
        const k::KvBlockLayout layout{bt, dim, dtype};
        const cu::KvGeometry g = cu::kv_geometry(layout);
        const auto rows = awkward_rows(dim, seed);
        seed += 20;
        // Pairs of rows (K, V) written to the block's rows in turn, one at a time.
        for (size_t r = 0; r < rows.size(); ++r) {
          const size_t row = r % bt;
          const auto& kr = rows[r];
          const auto& vr = rows[(r + 3) % rows.size()];
          std::vector<uint8_t> want(layout.block_bytes(), 0xCD), got(want);
          k::check(k::kv_block_write(want.data(), layout, row, kr.data(), vr.data(), 1, dim),
                   "kv_block_write");
          emulate_store_row(got.data(), g, 0, row, kr.data());
          emulate_store_row(got.data(), g, 1, row, vr.data());
          ASSERT_EQ(got, want) << "row " << r;
          std::vector<float> wk(dim), wv(dim), gk(dim), gv(dim);
          k::check(k::kv_block_read(want.data(), layout, row, 1, wk.data(), wv.data()),
                   "kv_block_read");
          for (size_t d = 0; d < dim; ++d) {
            gk[d] = emulate_load(got.data(), g, 0, row, d);
            gv[d] = emulate_load(got.data(), g, 1, row, d);
          }
          ASSERT_TRUE(same_bits(gk, wk)) << "row " << r;
          ASSERT_TRUE(same_bits(gv, wv)) << "row " << r;
        }
      }
    }
  }
}

TEST(DeviceMathKv, GeometryIsTheLayouts) {
  for (k::KvDtype dtype : kDtypes) {
    for (size_t bt : {1, 3, 16}) {
      for (size_t dim : {1, 7, 64, 128}) {
        const k::KvBlockLayout layout{bt, dim, dtype};
        const cu::KvGeometry g = cu::kv_geometry(layout);
        EXPECT_EQ(g.block_bytes, layout.block_bytes());
        EXPECT_EQ(g.v_offset, layout.v_offset());
        EXPECT_EQ(g.scales_offset, layout.scales_offset());
        EXPECT_EQ(g.row_bytes, dim * layout.elem_bytes());
        const size_t rb = g.row_bytes;
        EXPECT_EQ(cu::kv_slot_bytes(g), 2 * rb + (dtype == k::KvDtype::kE4M3 ? 8 : 0));
        // Each byte of a slot, in the snapshot's order, where KvBlockLayout puts it.
        for (size_t slot : {size_t{0}, bt - 1, bt, 5 * bt + bt / 2}) {
          const size_t block = slot / bt * layout.block_bytes(), row = slot % bt;
          std::vector<size_t> want;
          for (size_t b = 0; b < rb; ++b) want.push_back(block + layout.k_offset() + row * rb + b);
          for (size_t b = 0; b < rb; ++b) want.push_back(block + layout.v_offset() + row * rb + b);
          if (dtype == k::KvDtype::kE4M3) {
            for (size_t which : {0, 1}) {
              for (size_t b = 0; b < 4; ++b) {
                want.push_back(block + layout.scales_offset() + (which * bt + row) * 4 + b);
              }
            }
          }
          std::vector<size_t> got;
          for (size_t b = 0; b < cu::kv_slot_bytes(g); ++b) {
            got.push_back(cu::kv_slot_byte_offset(g, slot, b));
          }
          EXPECT_EQ(got, want) << dtype_name(dtype) << " " << bt << " " << dim << " slot " << slot;
        }
      }
    }
  }
}

// A host pool whose every slot holds a random row, written by the CPU.
std::vector<uint8_t> random_pool(const k::KvBlockLayout& layout, size_t n_blocks, uint32_t seed) {
  std::vector<uint8_t> pool(n_blocks * layout.block_bytes(), 0xCD);
  const size_t slots = n_blocks * layout.block_tokens, dim = layout.head_dim;
  const auto kv = random_vector(2 * slots * dim, seed, 2.0f);
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  k::check(k::kv_append(pool.data(), layout, kv.data(), kv.data() + slots * dim, dim, slots, 1,
                        all.data()),
           "kv_append");
  return pool;
}

// kv_append, kv_copy_rows and kv_gather run element by element as their kernels run them (the
// same functions, one thread's or warp's work at a time) against the CPU ops.
TEST(DeviceMathKv, PoolOpsEmulatedMatchTheCpu) {
  std::mt19937 rng(70);
  for (k::KvDtype dtype : kDtypes) {
    for (size_t dim : {7, 64}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " head_dim " << dim);
      const k::KvBlockLayout layout{16, dim, dtype};
      const cu::KvGeometry g = cu::kv_geometry(layout);
      const size_t n_blocks = 6, n_slots = n_blocks * 16;

      // kv_append: 9 tokens of 3 heads, padded rows, some slots skipped.
      const size_t n_tokens = 9, n_heads = 3, stride = n_heads * dim + 5;
      std::vector<int32_t> all(n_slots);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int32_t> slots(all.begin(), all.begin() + n_tokens * n_heads);
      for (auto& s : slots) {
        if (rng() % 6 == 0) s = -1;
      }
      const auto kr = random_vector(n_tokens * stride, rng(), 2.0f);
      const auto vr = random_vector(n_tokens * stride, rng(), 2.0f);
      std::vector<uint8_t> want(n_blocks * layout.block_bytes(), 0xCD), got(want);
      k::check(k::kv_append(want.data(), layout, kr.data(), vr.data(), stride, n_tokens, n_heads,
                            slots.data()),
               "kv_append");
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i] < 0) continue;
        const size_t at = i / n_heads * stride + i % n_heads * dim;
        uint8_t* block = got.data() + cu::kv_slot_block(g, size_t(slots[i]));
        emulate_store_row(block, g, 0, cu::kv_slot_row(g, size_t(slots[i])), &kr[at]);
        emulate_store_row(block, g, 1, cu::kv_slot_row(g, size_t(slots[i])), &vr[at]);
      }
      ASSERT_EQ(got, want) << "kv_append";

      // kv_copy_rows: distinct destinations, sources anywhere (some also destinations).
      const auto initial = random_pool(layout, n_blocks, rng());
      for (size_t n : {1, 9, 60}) {
        std::vector<int32_t> dst(all.begin(), all.begin() + n), src(n);
        for (auto& s : src) s = int32_t(rng() % n_slots);
        auto cpu_pool = initial, emu_pool = initial;
        k::check(k::kv_copy_rows(cpu_pool.data(), layout, src.data(), dst.data(), n),
                 "kv_copy_rows");
        const size_t sb = cu::kv_slot_bytes(g);
        std::vector<uint8_t> flat(n * sb);
        for (size_t e = 0; e < flat.size(); ++e) {
          flat[e] = emu_pool[cu::kv_slot_byte_offset(g, size_t(src[e / sb]), e % sb)];
        }
        for (size_t e = 0; e < flat.size(); ++e) {
          if (src[e / sb] == dst[e / sb]) continue;
          emu_pool[cu::kv_slot_byte_offset(g, size_t(dst[e / sb]), e % sb)] = flat[e];
        }
        ASSERT_EQ(emu_pool, cpu_pool) << "kv_copy_rows of " << n;
      }

      // kv_gather with repeats, padded output rows.
      const size_t n = 50, out_stride = dim + 3;
      std::vector<int32_t> gather(n);
      for (auto& s : gather) s = int32_t(rng() % n_slots);
      std::vector<float> wk(n * out_stride, -1.0f), wv(wk), gk(wk), gv(wk);
      k::check(
          k::kv_gather(wk.data(), wv.data(), out_stride, initial.data(), layout, gather.data(), n),
          "kv_gather");
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* block = initial.data() + cu::kv_slot_block(g, size_t(gather[i]));
        const size_t row = cu::kv_slot_row(g, size_t(gather[i]));
        for (size_t d = 0; d < dim; ++d) {
          gk[i * out_stride + d] = emulate_load(block, g, 0, row, d);
          gv[i * out_stride + d] = emulate_load(block, g, 1, row, d);
        }
      }
      EXPECT_TRUE(same_bits(gk, wk)) << "kv_gather";
      EXPECT_TRUE(same_bits(gv, wv)) << "kv_gather";
    }
  }
}

// ---- Paged batches ------------------------------------------------------------------------------

TEST(DeviceMathKv, SeqOfRowFindsEveryRowsSequence) {
  for (const std::vector<size_t>& nq : std::vector<std::vector<size_t>>{
           {1}, {5}, {1, 1, 1}, {3, 1, 7, 1, 1, 2}, {1, 64, 1}, std::vector<size_t>(100, 2)}) {
    std::vector<unsigned long long> offsets{0};
    for (size_t q : nq) offsets.push_back(offsets.back() + q);
    unsigned long long r = 0;
    for (size_t s = 0; s < nq.size(); ++s) {
      for (size_t i = 0; i < nq[s]; ++i, ++r) {
        ASSERT_EQ(cu::seq_of_row(offsets.data(), nq.size(), r), s) << "row " << r;
      }
    }
  }
}

// A paged batch in host memory: every head's blocks written with random rows.
struct HostBatch {
  k::KvBlockLayout layout;
  size_t Hq, Hkv;
  std::vector<uint8_t> pool;
  std::vector<std::vector<int32_t>> ids;  // [seq * Hkv + g]
  std::vector<std::vector<uint32_t>> lengths;
  std::vector<std::vector<const int32_t*>> tables;
  std::vector<std::vector<float>> q, out;
  std::vector<k::PagedSequence> seqs;
};

struct SeqSpec {
  size_t n_queries;
  std::vector<uint32_t> lengths;  // [Hkv]
};

HostBatch make_batch(const k::KvBlockLayout& layout, size_t Hq, size_t Hkv,
                     const std::vector<SeqSpec>& specs, uint32_t seed) {
  std::mt19937 rng(seed);
  HostBatch b{layout, Hq, Hkv, {}, {}, {}, {}, {}, {}, {}};
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  size_t n_blocks = 2;
  for (const auto& s : specs)
    for (uint32_t len : s.lengths) n_blocks += (len + bt - 1) / bt;
  std::vector<int32_t> free_ids(n_blocks);
  std::iota(free_ids.begin(), free_ids.end(), 0);
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  b.pool.assign(n_blocks * layout.block_bytes(), 0xCD);
  size_t next = 0;
  for (const auto& s : specs) {
    for (size_t g = 0; g < Hkv; ++g) {
      const size_t len = s.lengths[g];
      b.ids.emplace_back();
      const auto kin = random_vector(len * dim, rng(), 1.0f);
      const auto vin = random_vector(len * dim, rng(), 1.0f);
      for (size_t t0 = 0; t0 < len; t0 += bt) {
        const int32_t id = free_ids[next++];
        b.ids.back().push_back(id);
        k::check(k::kv_block_write(b.pool.data() + size_t(id) * layout.block_bytes(), layout, 0,
                                   &kin[t0 * dim], &vin[t0 * dim], std::min(bt, len - t0), dim),
                 "kv_block_write");
      }
    }
    b.lengths.push_back(s.lengths);
    const size_t q_stride = Hq * dim + 5, out_stride = Hq * dim + 3;
    b.q.push_back(random_vector(s.n_queries * q_stride, rng(), 1.0f));
    b.out.push_back(std::vector<float>(s.n_queries * out_stride, 777.0f));
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    b.tables.emplace_back();
    for (size_t g = 0; g < Hkv; ++g) b.tables.back().push_back(b.ids[s * Hkv + g].data());
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    b.seqs.push_back({b.tables[s].data(), b.lengths[s].data(), specs[s].n_queries, b.q[s].data(),
                      Hq * dim + 5, b.out[s].data(), Hq * dim + 3});
  }
  return b;
}

bool heads_ok(const HostBatch& b) {
  for (const auto& seq : b.seqs) {
    for (size_t g = 0; g < b.Hkv; ++g) {
      if (!cu::paged_head_ok(seq, g, b.Hq, b.layout.head_dim, b.layout.block_tokens)) return false;
    }
  }
  return true;
}

bool cpu_accepts(HostBatch& b) {
  return k::attention_paged(b.seqs.data(), b.seqs.size(), b.pool.data(), b.layout, b.Hq, b.Hkv,
                            0.125f) == k::Status::kOk;
}

TEST(DeviceMathKv, PagedHeadChecksRejectWhatTheCpuRejects) {
  const k::KvBlockLayout layout{4, 8, k::KvDtype::kF32};
  const std::vector<SeqSpec> specs = {{1, {5, 1}}, {3, {3, 9}}};
  std::vector<std::function<void(HostBatch&)>> breaks = {
      [](HostBatch&) {},
      [](HostBatch& b) { b.seqs[1].n_queries = 0; },
      [](HostBatch& b) { b.seqs[1].n_queries = 4; },  // longer than head 0's 3 tokens
      [](HostBatch& b) { b.seqs[0].n_queries = 2; },  // head 1 holds 1 token
      [](HostBatch& b) { b.lengths[1][0] = 2; },
      [](HostBatch& b) { b.ids[3].back() = -1; },  // seq 1, head 1, last block
      [](HostBatch& b) { b.ids[0][0] = -5; },
      [](HostBatch& b) { b.seqs[1].q_stride = b.Hq * 8 - 1; },
      [](HostBatch& b) { b.seqs[1].out_stride = 1; },
      [](HostBatch& b) { b.seqs[0].q_stride = 1; },  // one query: any stride
      [](HostBatch& b) { b.seqs[0].q = nullptr; },
      [](HostBatch& b) { b.seqs[1].out = nullptr; },
      [](HostBatch& b) { b.seqs[0].lengths = nullptr; },
      [](HostBatch& b) { b.seqs[1].block_ids = nullptr; },
      [](HostBatch& b) { b.tables[1][1] = nullptr; },
      // A negative id past the head's last block is not read.
      [](HostBatch& b) {
        b.ids[1].push_back(-1);
        b.tables[0][1] = b.ids[1].data();
      },
  };
  for (size_t i = 0; i < breaks.size(); ++i) {
    HostBatch b = make_batch(layout, 6, 2, specs, 90);
    breaks[i](b);
    EXPECT_EQ(heads_ok(b), cpu_accepts(b)) << "case " << i;
  }
  HostBatch good = make_batch(layout, 6, 2, specs, 90);
  EXPECT_TRUE(heads_ok(good));
}

// ---- Attention emulated with the kernels' steps ------------------------------------------------

struct Ref {
  const uint8_t* k;
  const uint8_t* v;
  float ks, vs;
};

// attend_row (attention_ops.cu) on the host: the same tiles, lane partials, butterfly and steps.
void emulate_row(const float* q, float* out, size_t n_keys, size_t dim, float scale,
                 k::KvDtype dtype, const std::function<Ref(size_t)>& ref_of) {
  std::vector<float> acc(dim, 0.0f);
  float m = -INFINITY, l = 0.0f;
  for (size_t j0 = 0; j0 < n_keys; j0 += cu::kKeyTile) {
    const size_t n = std::min<size_t>(cu::kKeyTile, n_keys - j0);
    std::vector<Ref> refs(n);
    std::vector<float> scores(n), weights(n);
    for (size_t j = 0; j < n; ++j) refs[j] = ref_of(j0 + j);
    for (size_t j = 0; j < n; ++j) {
      float lanes[32];
      for (size_t lane = 0; lane < 32; ++lane) {
        lanes[lane] = 0.0f;
        for (size_t d = lane; d < dim; d += 32) {
          lanes[lane] = cu::attn_dot_step(lanes[lane], q[d],
                                          cu::kv_load_element(refs[j].k, dtype, d, refs[j].ks));
        }
      }
      for (size_t offset = 16; offset > 0; offset /= 2) {
        float next[32];
        for (size_t lane = 0; lane < 32; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
        std::copy(next, next + 32, lanes);
      }
      scores[j] = cu::attn_score(lanes[0], scale);
    }
    const float m_new = std::fmax(m, cu::attn_tile_max(scores.data(), n));
    const float correction = cu::attn_correction(m, m_new);
    for (size_t j = 0; j < n; ++j) weights[j] = cu::attn_weight(scores[j], m_new);
    l = cu::attn_running_sum(l, correction, weights.data(), n);
    m = m_new;
    for (size_t d = 0; d < dim; ++d) {
      float a = cu::attn_rescale(acc[d], correction);
      for (size_t j = 0; j < n; ++j) {
        a = cu::attn_value_step(a, weights[j],
                                cu::kv_load_element(refs[j].v, dtype, d, refs[j].vs));
      }
      acc[d] = a;
    }
  }
  for (size_t d = 0; d < dim; ++d) out[d] = cu::attn_output(acc[d], l);
}

// attention_paged_kernel's items on the host, rows laid end to end as the check kernel lays them.
void emulate_paged(HostBatch& b, float scale) {
  const cu::KvGeometry g = cu::kv_geometry(b.layout);
  const size_t dim = g.head_dim, group = b.Hq / b.Hkv;
  std::vector<unsigned long long> offsets{0};
  for (const auto& seq : b.seqs) offsets.push_back(offsets.back() + seq.n_queries);
  for (unsigned long long item = 0; item < offsets.back() * b.Hq; ++item) {
    const unsigned long long r = item / b.Hq;
    const size_t h = item % b.Hq;
    const size_t s = cu::seq_of_row(offsets.data(), b.seqs.size(), r);
    const size_t i = r - offsets[s];
    const k::PagedSequence& seq = b.seqs[s];
    const int32_t* ids = seq.block_ids[h / group];
    const auto ref_of = [&](size_t j) {
      const uint8_t* block = b.pool.data() + cu::paged_block_offset(ids, g, j);
      const size_t row = j % g.block_tokens;
      Ref ref{block + cu::kv_row_offset(g, 0, row), block + cu::kv_row_offset(g, 1, row), 1.0f,
              1.0f};
      if (g.dtype == k::KvDtype::kE4M3) {
        ref.ks = cu::kv_load_scale(block + cu::kv_scale_offset(g, 0, row));
        ref.vs = cu::kv_load_scale(block + cu::kv_scale_offset(g, 1, row));
      }
      return ref;
    };
    emulate_row(seq.q + i * seq.q_stride + h * dim, seq.out + i * seq.out_stride + h * dim,
                cu::paged_visible(seq.lengths[h / group], seq.n_queries, i), dim, scale, g.dtype,
                ref_of);
  }
}

double worst_paged = 0, worst_causal = 0;  // the largest error seen, in units of the tolerance

double error_ratio(const std::vector<float>& got, const std::vector<float>& want) {
  double max_ref = 1e-30, worst = 0;
  for (float w : want) max_ref = std::max(max_ref, std::fabs(double(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    worst =
        std::max(worst, std::fabs(double(got[i]) - want[i]) / (kCudaAttentionTolerance * max_ref));
  }
  return worst;
}

TEST(DeviceMathKv, PagedAttentionEmulationMatchesCpu) {
  struct Case {
    size_t Hq, Hkv, bt, dim;
    std::vector<SeqSpec> specs;
  };
  const Case cases[] = {
      {1, 1, 16, 64, {{1, {1}}}},
      {9, 3, 16, 64, {{1, {15, 16, 17}}, {3, {33, 3, 16}}, {1, {1, 32, 49}}}},
      {3, 1, 16, 128, {{3, {17}}, {1, {300}}}},
      {8, 8, 16, 128, {{1, {65, 64, 63, 1, 2, 128, 129, 700}}}},
      {12, 4, 7, 64, {{5, {5, 40, 77, 200}}, {1, {1, 1, 1, 1}}}},
      {6, 2, 3, 7, {{2, {2, 9}}, {1, {130, 4}}}},
  };
  uint32_t seed = 100;
  for (k::KvDtype dtype : kDtypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " Hq " << c.Hq << " Hkv " << c.Hkv
                                      << " block_tokens " << c.bt << " head_dim " << c.dim);
      const k::KvBlockLayout layout{c.bt, c.dim, dtype};
      HostBatch want = make_batch(layout, c.Hq, c.Hkv, c.specs, seed);
      HostBatch got = make_batch(layout, c.Hq, c.Hkv, c.specs, seed++);
      const float scale = 1.0f / std::sqrt(float(c.dim));
      k::check(k::attention_paged(want.seqs.data(), want.seqs.size(), want.pool.data(), layout,
                                  c.Hq, c.Hkv, scale),
               "attention_paged");
      emulate_paged(got, scale);
      for (size_t s = 0; s < c.specs.size(); ++s) {
        EXPECT_TRUE(matches_cpu(got.out[s], want.out[s], kCudaAttentionTolerance)) << "seq " << s;
        worst_paged = std::max(worst_paged, error_ratio(got.out[s], want.out[s]));
      }
    }
  }
  std::printf("paged attention emulation: largest error %.4f of the tolerance\n", worst_paged);
}

TEST(DeviceMathKv, CausalAttentionEmulationMatchesCpu) {
  struct Shape {
    size_t T, n_kv, Hq, Hkv, Dh;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 1},      {1, 33, 3, 1, 8},   {7, 17, 3, 3, 7},
                          {17, 33, 6, 3, 64},   {33, 33, 3, 1, 16}, {64, 200, 4, 2, 128},
                          {130, 130, 2, 1, 64}, {1, 500, 8, 8, 128}};
  uint32_t seed = 200;
  for (const Shape& s : shapes) {
    for (float sharpness : {1.0f, 4.0f}) {
      SCOPED_TRACE(testing::Message()
                   << "T " << s.T << " n_kv " << s.n_kv << " Hq " << s.Hq << " Hkv " << s.Hkv
                   << " Dh " << s.Dh << " sharpness " << sharpness);
      const size_t q_stride = s.Hq * s.Dh + 3, kv_stride = s.Hkv * s.Dh + 1,
                   out_stride = s.Hq * s.Dh + 2;
      const auto q = random_vector(s.T * q_stride, seed++, 2.0f);
      const auto kc = random_vector(s.n_kv * kv_stride, seed++, 2.0f);
      const auto vc = random_vector(s.n_kv * kv_stride, seed++);
      const float scale = sharpness / std::sqrt(float(s.Dh));
      std::vector<float> want(s.T * out_stride, 777.0f), got(want);
      k::check(k::attention_causal(want.data(), q.data(), kc.data(), vc.data(), s.T, s.n_kv, s.Hq,
                                   s.Hkv, s.Dh, q_stride, kv_stride, out_stride, scale),
               "attention_causal");
      const size_t group = s.Hq / s.Hkv;
      for (size_t item = 0; item < s.T * s.Hq; ++item) {
        const size_t t = item / s.Hq, h = item % s.Hq, column = h / group * s.Dh;
        const auto ref_of = [&](size_t j) {
          return Ref{reinterpret_cast<const uint8_t*>(&kc[j * kv_stride + column]),
                     reinterpret_cast<const uint8_t*>(&vc[j * kv_stride + column]), 1.0f, 1.0f};
        };
        emulate_row(&q[t * q_stride + h * s.Dh], &got[t * out_stride + h * s.Dh],
                    cu::causal_visible(s.n_kv, s.T, t), s.Dh, scale, k::KvDtype::kF32, ref_of);
      }
      EXPECT_TRUE(matches_cpu(got, want, kCudaAttentionTolerance));
      worst_causal = std::max(worst_causal, error_ratio(got, want));
    }
  }
  std::printf("causal attention emulation: largest error %.4f of the tolerance\n", worst_causal);
}

}  // namespace
