// Corrupt and truncated GGUF images: every case must parse or throw GgufError, never crash,
// throw anything else or allocate without bound. Targeted cases also check that the message
// names the broken field. Run under ASan+UBSan too (-DADAKV_SANITIZE=ON).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"

namespace adakv::gguf {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint64_t kHeaderTensorCount = 8;
constexpr uint64_t kHeaderKvCount = 16;

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 13);
  return b;
}

// Fp16 scales of 1.0 so that decoded tensors are finite; the rest of each block is a pattern.
Bytes quant_blocks(GgmlType t, size_t blocks, uint8_t seed) {
  Bytes b = pattern(blocks * block_bytes(t), seed);
  const size_t scale_at = t == GgmlType::Q6_K ? 208 : 0;
  for (size_t i = 0; i < blocks; ++i) {
    b[i * block_bytes(t) + scale_at] = 0x00;
    b[i * block_bytes(t) + scale_at + 1] = 0x3C;
  }
  return b;
}

GgufWriter valid_writer(uint32_t version = 3, uint64_t alignment = 32) {
  GgufWriter w(version, alignment);
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "bc", "\xc4\xa0the"});
  w.add_i32_array("tokenizer.ggml.token_type", {3, 1, 1, 1});
  w.add_f32_array("scores", {0.5f, -1.0f});
  w.add("nested", make_array(ValueType::ARRAY, {make_array(ValueType::U32, {make_u32(1)}),
                                                make_array(ValueType::U32, {})}));
  w.add_tensor("empty.weight", GgmlType::F32, {0, 4}, {});
  w.add_tensor_f32("norm.weight", {8}, std::vector<float>(8, 1.5f));
  w.add_tensor("wq.weight", GgmlType::Q4_1, {64, 2}, quant_blocks(GgmlType::Q4_1, 4, 1));
  w.add_tensor("emb.weight", GgmlType::Q8_0, {32, 3}, quant_blocks(GgmlType::Q8_0, 3, 2));
  w.add_tensor("k6.weight", GgmlType::Q6_K, {256}, quant_blocks(GgmlType::Q6_K, 1, 3));
  w.add_tensor("half.weight", GgmlType::F16, {4, 2}, pattern(16, 4));
  return w;
}

Bytes valid_file(uint32_t version = 3) {
  return valid_writer(version).bytes();
}

// Parses, and on success reads every tensor through the public API (so that ASan sees any
// pointer past the image). Returns the GgufError message, or "" when the image parsed.
std::string try_parse(const Bytes& b) {
  try {
    const GgufFile f = GgufFile::parse(b.data(), b.size());
    const uint8_t* data_section = nullptr;
    for (const TensorInfo& t : f.tensors()) {
      const uint8_t* p = f.tensor_data(t);
      // A tensor the reader accepts lies inside the image (the reader keeps its own copy of an
      // in-memory image): its end within the file's size, its start at its offset into the one
      // data section.
      EXPECT_LE(t.offset + t.n_bytes, b.size()) << t.name;
      if (!data_section) data_section = p - t.offset;
      EXPECT_EQ(p - t.offset, data_section) << t.name;
      if (can_dequantize(t.type) && t.n_elements <= (1u << 20)) {
        std::vector<float> out(t.n_elements);
        dequantize(t.type, p, out.data(), out.size());
      } else {
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < t.n_bytes; ++i) sink = sink ^ p[i];
      }
    }
    for (const auto& [key, v] : f.metadata()) (void)f.find(key);
    return "";
  } catch (const GgufError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    return msg.empty() ? "(empty message)" : msg;
  }
  // Any other exception escapes and fails the test.
}

std::string expect_error(const Bytes& b) {
  const std::string msg = try_parse(b);
  EXPECT_FALSE(msg.empty()) << "corrupt image parsed without error";
  return msg;
}

#define EXPECT_MESSAGE_HAS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg) << "\nexpected: " << (part)

size_t find_bytes(const Bytes& b, const std::string& s) {
  const auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  EXPECT_NE(it, b.end()) << "cannot find " << s;
  return static_cast<size_t>(it - b.begin());
}

// Offset just past a key or tensor name (which is stored after its u64 length).
size_t after(const Bytes& b, const std::string& name) {
  return find_bytes(b, name) + name.size();
}

template <class T>
void poke(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

template <class T>
T peek(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

TEST(CorruptFiles, ValidFileParses) {
  for (uint32_t version : {2u, 3u}) {
    const Bytes b = valid_file(version);
    EXPECT_EQ(try_parse(b), "");
    const GgufFile f = GgufFile::parse(b.data(), b.size());
    EXPECT_EQ(f.tensors().size(), 6u);
    EXPECT_EQ(f.metadata().size(), 8u);
  }
}

TEST(CorruptFiles, EveryTruncationFailsCleanly) {
  for (uint32_t version : {2u, 3u}) {
    const Bytes full = valid_file(version);
    // The writer pads the last tensor (half.weight, 16 bytes) to the 32-byte alignment; only a
    // cut inside that padding may parse.
    const size_t padding = 16;
    for (size_t n = 0; n < full.size(); ++n) {
      SCOPED_TRACE(testing::Message() << "version " << version << " cut at " << n);
      const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      const std::string msg = try_parse(cut);
      if (n < full.size() - padding) {
        EXPECT_FALSE(msg.empty()) << "a cut file parsed";
        EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
      }
    }
  }
}

TEST(CorruptFiles, TruncationInsideTensorDataIsAnError) {
  const Bytes full = valid_file();
  const Bytes cut(full.begin(), full.end() - 17);  // one byte of half.weight is gone
  EXPECT_MESSAGE_HAS(expect_error(cut), "tensor 'half.weight' data");
}

TEST(CorruptFiles, WrongMagic) {
  Bytes b = valid_file();
  b[0] = 'G';
  b[3] = 'G';
  const std::string msg = expect_error(b);
  EXPECT_MESSAGE_HAS(msg, "bad magic");
  EXPECT_MESSAGE_HAS(msg, "offset 0");
}

TEST(CorruptFiles, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u, 0xFFFFFFFFu}) {
    Bytes b = valid_file();
    poke<uint32_t>(b, 4, v);
    const std::string msg = expect_error(b);
    EXPECT_MESSAGE_HAS(msg, "unsupported version " + std::to_string(v));
  }
  Bytes b = valid_file();
  poke<uint32_t>(b, 4, 0x03000000u);
  EXPECT_MESSAGE_HAS(expect_error(b), "big-endian");
}

TEST(CorruptFiles, HugeCounts) {
  for (uint64_t n : {uint64_t{1} << 20, uint64_t{1} << 40, ~uint64_t{0}}) {
    Bytes b = valid_file();
    poke<uint64_t>(b, kHeaderTensorCount, n);
    EXPECT_MESSAGE_HAS(expect_error(b), "header tensor count " + std::to_string(n));
    b = valid_file();
    poke<uint64_t>(b, kHeaderKvCount, n);
    EXPECT_MESSAGE_HAS(expect_error(b), "header metadata kv count " + std::to_string(n));
  }
}

TEST(CorruptFiles, CountsSlightlyTooLarge) {
  // One more kv or tensor than the file holds: the reader runs off the tensor infos.
  Bytes b = valid_file();
  poke<uint64_t>(b, kHeaderKvCount, peek<uint64_t>(b, kHeaderKvCount) + 1);
  expect_error(b);
  b = valid_file();
  poke<uint64_t>(b, kHeaderTensorCount, peek<uint64_t>(b, kHeaderTensorCount) + 1);
  expect_error(b);
}

TEST(CorruptFiles, HugeStringLength) {
  for (uint64_t n : {uint64_t{1} << 33, ~uint64_t{0}, uint64_t{1} << 63}) {
    Bytes b = valid_file();
    poke<uint64_t>(b, 24, n);  // length of the first key
    const std::string msg = expect_error(b);
    EXPECT_MESSAGE_HAS(msg, "metadata key #0");
    EXPECT_MESSAGE_HAS(msg, std::to_string(n));

    b = valid_file();
    // The value of general.architecture: a string whose length follows the value type.
    poke<uint64_t>(b, after(b, "general.architecture") + 4, n);
    EXPECT_MESSAGE_HAS(expect_error(b), "metadata 'general.architecture'");

    b = valid_file();
    // The first element of the token array.
    poke<uint64_t>(b, after(b, "tokenizer.ggml.tokens") + 16, n);
    EXPECT_MESSAGE_HAS(expect_error(b), "metadata 'tokenizer.ggml.tokens'[0]");

    b = valid_file();
    poke<uint64_t>(b, find_bytes(b, "norm.weight") - 8, n);  // a tensor name
    EXPECT_MESSAGE_HAS(expect_error(b), "tensor info #1 name");
  }
}

TEST(CorruptFiles, HugeArrayCount) {
  for (uint64_t n : {uint64_t{1} << 30, uint64_t{1} << 62, ~uint64_t{0}}) {
    Bytes b = valid_file();
    poke<uint64_t>(b, after(b, "tokenizer.ggml.tokens") + 8, n);
    const std::string msg = expect_error(b);
    EXPECT_MESSAGE_HAS(msg, "metadata 'tokenizer.ggml.tokens' array count " + std::to_string(n));

    b = valid_file();
    poke<uint64_t>(b, after(b, "nested") + 8, n);
    EXPECT_MESSAGE_HAS(expect_error(b), "metadata 'nested' array count");

    b = valid_file();
    poke<uint64_t>(b, after(b, "nested") + 20, n);  // the inner array's count
    EXPECT_MESSAGE_HAS(expect_error(b), "metadata 'nested'[0] array count");
  }
}

TEST(CorruptFiles, UnknownValueTypes) {
  for (uint32_t t : {13u, 100u, 0xFFFFFFFFu}) {
    Bytes b = valid_file();
    poke<uint32_t>(b, after(b, "llama.block_count"), t);
    std::string msg = expect_error(b);
    EXPECT_MESSAGE_HAS(msg, "metadata 'llama.block_count' value type " + std::to_string(t));

    b = valid_file();
    poke<uint32_t>(b, after(b, "scores") + 4, t);  // array element type
    msg = expect_error(b);
    EXPECT_MESSAGE_HAS(msg, "metadata 'scores' array element type " + std::to_string(t));
  }
}

TEST(CorruptFiles, DeepNestingIsRejected) {
  Value v = make_array(ValueType::U32, {make_u32(7)});
  for (int depth = 1; depth < 40; ++depth) v = make_array(ValueType::ARRAY, {v});
  GgufWriter w;
  w.add("deep", v);
  EXPECT_MESSAGE_HAS(expect_error(w.bytes()), "deeper");
}

TEST(CorruptFiles, TensorDims) {
  for (uint32_t n : {0u, 5u, 64u, 0xFFFFFFFFu}) {
    Bytes b = valid_file();
    poke<uint32_t>(b, after(b, "wq.weight"), n);
    EXPECT_MESSAGE_HAS(expect_error(b), "tensor info 'wq.weight' n_dims " + std::to_string(n));
  }
}

TEST(CorruptFiles, HugeShapes) {
  const size_t ne0 = after(valid_file(), "wq.weight") + 4;
  Bytes b = valid_file();
  poke<uint64_t>(b, ne0 + 8, uint64_t{1} << 63);  // not an int64
  EXPECT_MESSAGE_HAS(expect_error(b), "tensor info 'wq.weight' ne[1]");

  b = valid_file();
  poke<uint64_t>(b, ne0, uint64_t{1} << 40);
  poke<uint64_t>(b, ne0 + 8, uint64_t{1} << 40);  // the product overflows
  EXPECT_MESSAGE_HAS(expect_error(b), "tensor info 'wq.weight' element count overflows");

  b = valid_file();
  poke<uint64_t>(b, ne0, uint64_t{1} << 32);  // data far past the end of the file
  EXPECT_MESSAGE_HAS(expect_error(b), "tensor 'wq.weight' data");

  b = valid_file();
  poke<uint64_t>(b, ne0, 48);  // not a whole number of Q4_1 blocks
  EXPECT_MESSAGE_HAS(expect_error(b), "not a multiple of the Q4_1 block size 32");
}

TEST(CorruptFiles, TensorOffsets) {
  const size_t off = after(valid_file(), "emb.weight") + 4 + 2 * 8 + 4;
  ASSERT_EQ(peek<uint64_t>(valid_file(), off) % 32, 0u);

  Bytes b = valid_file();
  poke<uint64_t>(b, off, peek<uint64_t>(b, off) + 1);
  std::string msg = expect_error(b);
  EXPECT_MESSAGE_HAS(msg, "tensor info 'emb.weight' offset");
  EXPECT_MESSAGE_HAS(msg, "not a multiple of the alignment 32");

  for (uint64_t o : {uint64_t{1} << 40, ~uint64_t{0} - 31, uint64_t{4096}}) {
    b = valid_file();
    poke<uint64_t>(b, off, o);
    EXPECT_MESSAGE_HAS(expect_error(b), "tensor 'emb.weight' data");
  }
}

TEST(CorruptFiles, UnknownTensorTypes) {
  const size_t type_at = after(valid_file(), "k6.weight") + 4 + 8;
  for (uint32_t t : {4u, 5u, 16u, 29u, 99u, 0xFFFFFFFFu}) {
    Bytes b = valid_file();
    poke<uint32_t>(b, type_at, t);
    EXPECT_MESSAGE_HAS(expect_error(b), "tensor info 'k6.weight' type " + std::to_string(t));
  }
}

TEST(CorruptFiles, BadAlignment) {
  const Bytes base = valid_writer(3, 64).bytes();
  const size_t value_at = after(base, "general.alignment") + 4;
  ASSERT_EQ(peek<uint32_t>(base, value_at), 64u);
  EXPECT_EQ(try_parse(base), "");
  for (uint32_t a : {0u, 3u, 48u, 100u, 0x80000001u, 0xFFFFFFFFu}) {
    Bytes b = base;
    poke<uint32_t>(b, value_at, a);
    EXPECT_MESSAGE_HAS(expect_error(b), "general.alignment");
  }
  // A valid but different alignment: offsets or the data section no longer line up.
  for (uint32_t a : {1u << 20, 1u << 31}) {
    Bytes b = base;
    poke<uint32_t>(b, value_at, a);
    expect_error(b);
  }
  // Wrong value type: a string where a u32 belongs.
  GgufWriter w;
  w.add_string("general.alignment", "32");
  EXPECT_MESSAGE_HAS(expect_error(w.bytes()), "general.alignment");
}

TEST(CorruptFiles, Duplicates) {
  GgufWriter w = valid_writer();
  w.add_u32("llama.block_count", 3);
  EXPECT_MESSAGE_HAS(expect_error(w.bytes()), "duplicate metadata key 'llama.block_count'");

  GgufWriter t = valid_writer();
  t.add_tensor_f32("norm.weight", {2}, {1, 2});
  EXPECT_MESSAGE_HAS(expect_error(t.bytes()), "duplicate tensor name 'norm.weight'");
}

TEST(CorruptFiles, RandomByteFlips) {
  std::mt19937_64 rng(0xADA5EED);
  for (uint32_t version : {2u, 3u}) {
    const Bytes base = valid_file(version);
    size_t parsed = 0, rejected = 0;
    for (int iter = 0; iter < 3000; ++iter) {
      Bytes b = base;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        const size_t at = rng() % b.size();
        if (rng() % 2) {
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        } else {
          b[at] = static_cast<uint8_t>(rng());
        }
      }
      // Some iterations also cut the image at a random point.
      if (iter % 5 == 0) b.resize(rng() % (b.size() + 1));
      SCOPED_TRACE(testing::Message() << "version " << version << " iteration " << iter);
      (try_parse(b).empty() ? parsed : rejected)++;
    }
    // Flips in tensor data leave the file valid; flips in the header must be caught.
    EXPECT_GT(parsed, 100u);
    EXPECT_GT(rejected, 100u);
  }
}

TEST(CorruptFiles, RandomFlipsInTheHeaderRegion) {
  // Concentrate on the metadata and tensor infos, where structure lives.
  std::mt19937_64 rng(12345);
  const Bytes base = valid_file();
  const GgufFile f = GgufFile::parse(base.data(), base.size());
  const size_t header_end = find_bytes(base, "half.weight") + 40;
  int parsed = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = base;
    const size_t at = rng() % header_end;
    const int width = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < width && at + k < b.size(); ++k) b[at + k] = static_cast<uint8_t>(rng());
    SCOPED_TRACE(testing::Message() << "iteration " << iter);
    (try_parse(b).empty() ? parsed : refused)++;
  }
  // Flips in names and values leave a valid file; flips in counts, types, lengths and offsets
  // do not: both must happen, or the flips did not reach the structure (or the reader
  // refuses everything).
  EXPECT_GT(parsed, 100) << refused << " refused";
  EXPECT_GT(refused, 1000) << parsed << " parsed";
}

}  // namespace
}  // namespace adakv::gguf
