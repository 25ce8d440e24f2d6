// GGUF writer -> reader round trips: every value type, nested arrays, versions 2 and 3, custom
// alignment, tensors of several types, typed getters and their errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"

namespace adakv::gguf {
namespace {

Value scalar_u(ValueType t, uint64_t u) {
  Value v;
  v.type = t;
  v.u = u;
  return v;
}

Value scalar_i(ValueType t, int64_t i) {
  Value v;
  v.type = t;
  v.i = i;
  return v;
}

Value scalar_f(ValueType t, double f) {
  Value v;
  v.type = t;
  v.f = f;
  return v;
}

std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

GgufFile round_trip(const GgufWriter& w) {
  const std::vector<uint8_t> bytes = w.bytes();
  return GgufFile::parse(bytes.data(), bytes.size(), "round-trip");
}

std::string message_of(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes.data(), bytes.size());
  } catch (const GgufError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GgufReader, EveryScalarTypeRoundTrips) {
  for (uint32_t version : {2u, 3u}) {
    SCOPED_TRACE(version);
    GgufWriter w(version);
    w.add("u8", scalar_u(ValueType::U8, 255));
    w.add("i8", scalar_i(ValueType::I8, -128));
    w.add("u16", scalar_u(ValueType::U16, 65535));
    w.add("i16", scalar_i(ValueType::I16, -32768));
    w.add_u32("u32", 4294967295u);
    w.add_i32("i32", std::numeric_limits<int32_t>::min());
    w.add_u64("u64", std::numeric_limits<uint64_t>::max());
    w.add("i64", scalar_i(ValueType::I64, std::numeric_limits<int64_t>::min()));
    w.add_f32("f32", 0.1f);
    w.add("f64", scalar_f(ValueType::F64, 1e300));
    w.add_bool("t", true);
    w.add_bool("f", false);
    w.add_string("s", std::string("h\xc3\xa9llo\0world", 12));
    w.add_string("empty", "");

    const GgufFile f = round_trip(w);
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.metadata().size(), 14u);
    EXPECT_EQ(f.metadata()[0].first, "u8");  // file order is kept
    EXPECT_EQ(f.find("u8")->type, ValueType::U8);
    EXPECT_EQ(f.get_int("u8"), 255);
    EXPECT_EQ(f.get_int("i8"), -128);
    EXPECT_EQ(f.get_int("u16"), 65535);
    EXPECT_EQ(f.get_int("i16"), -32768);
    EXPECT_EQ(f.get_int("u32"), 4294967295);
    EXPECT_EQ(f.get_int("i32"), std::numeric_limits<int32_t>::min());
    EXPECT_EQ(f.find("u64")->u, std::numeric_limits<uint64_t>::max());
    EXPECT_THROW(f.get_int("u64"), GgufError);  // does not fit in int64
    EXPECT_EQ(f.get_int("i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.find("f32")->type, ValueType::F32);
    EXPECT_EQ(f.get_float("f32"), static_cast<double>(0.1f));
    EXPECT_EQ(f.get_float("f64"), 1e300);
    EXPECT_EQ(f.get_float("i8"), -128.0);
    EXPECT_TRUE(f.get_bool("t", false));
    EXPECT_FALSE(f.get_bool("f", true));
    EXPECT_EQ(f.get_string("s"), std::string("h\xc3\xa9llo\0world", 12));
    EXPECT_EQ(f.get_string("empty"), "");
    EXPECT_TRUE(f.tensors().empty());
  }
}

TEST(GgufReader, ArraysOfEveryTypeRoundTrip) {
  GgufWriter w;
  w.add_string_array("strings", {"a", "", "ccc"});
  w.add_i32_array("ints", {1, -2, 3});
  w.add_f32_array("floats", {0.5f, -1.25f});
  w.add("u8s", make_array(ValueType::U8, {scalar_u(ValueType::U8, 0), scalar_u(ValueType::U8, 9)}));
  w.add("i64s", make_array(ValueType::I64, {scalar_i(ValueType::I64, -5)}));
  w.add("u64s", make_array(ValueType::U64, {scalar_u(ValueType::U64, 7)}));
  w.add("f64s", make_array(ValueType::F64, {scalar_f(ValueType::F64, 2.5)}));
  w.add("bools",
        make_array(ValueType::BOOL, {scalar_u(ValueType::BOOL, 1), scalar_u(ValueType::BOOL, 0)}));
  w.add("i16s", make_array(ValueType::I16, {scalar_i(ValueType::I16, -300)}));
  w.add("u16s", make_array(ValueType::U16, {scalar_u(ValueType::U16, 300)}));
  w.add("i8s", make_array(ValueType::I8, {scalar_i(ValueType::I8, -3)}));
  w.add("u32s", make_array(ValueType::U32, {make_u32(1), make_u32(2)}));
  w.add("empty", make_array(ValueType::STRING, {}));

  const GgufFile f = round_trip(w);
  EXPECT_EQ(f.get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_float_array("floats"), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(f.get_float_array("ints"), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(f.get_int_array("u8s"), (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(f.get_int_array("i64s"), (std::vector<int64_t>{-5}));
  EXPECT_EQ(f.get_int_array("u64s"), (std::vector<int64_t>{7}));
  EXPECT_EQ(f.get_float_array("f64s"), (std::vector<double>{2.5}));
  EXPECT_EQ(f.get_int_array("i16s"), (std::vector<int64_t>{-300}));
  EXPECT_EQ(f.get_int_array("u16s"), (std::vector<int64_t>{300}));
  EXPECT_EQ(f.get_int_array("i8s"), (std::vector<int64_t>{-3}));
  EXPECT_EQ(f.get_int_array("u32s"), (std::vector<int64_t>{1, 2}));
  const Value* bools = f.find("bools");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->type, ValueType::ARRAY);
  EXPECT_EQ(bools->elem_type, ValueType::BOOL);
  ASSERT_EQ(bools->arr.size(), 2u);
  EXPECT_EQ(bools->arr[0].u, 1u);
  EXPECT_EQ(bools->arr[1].u, 0u);
  EXPECT_TRUE(f.get_string_array("empty").empty());
  EXPECT_EQ(f.find("empty")->elem_type, ValueType::STRING);

  EXPECT_THROW(f.get_string_array("ints"), GgufError);
  EXPECT_THROW(f.get_int_array("floats"), GgufError);
  EXPECT_THROW(f.get_int_array("strings"), GgufError);
  EXPECT_THROW(f.get_float_array("strings"), GgufError);
}

TEST(GgufReader, NestedArraysRoundTrip) {
  GgufWriter w;
  std::vector<Value> rows;
  for (int r = 0; r < 3; ++r) {
    std::vector<Value> row;
    for (int c = 0; c <= r; ++c) row.push_back(scalar_i(ValueType::I32, r * 10 + c));
    rows.push_back(make_array(ValueType::I32, std::move(row)));
  }
  w.add("matrix", make_array(ValueType::ARRAY, rows));
  w.add("deep",
        make_array(ValueType::ARRAY,
                   {make_array(ValueType::ARRAY, {make_array(ValueType::STRING, {make_string("x")}),
                                                  make_array(ValueType::F32, {})})}));

  const GgufFile f = round_trip(w);
  const Value* m = f.find("matrix");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->elem_type, ValueType::ARRAY);
  ASSERT_EQ(m->arr.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(m->arr[r].type, ValueType::ARRAY);
    EXPECT_EQ(m->arr[r].elem_type, ValueType::I32);
    ASSERT_EQ(m->arr[r].arr.size(), static_cast<size_t>(r + 1));
    for (int c = 0; c <= r; ++c) EXPECT_EQ(m->arr[r].arr[c].as_int(), r * 10 + c);
  }
  const Value& deep = *f.find("deep");
  ASSERT_EQ(deep.arr.size(), 1u);
  ASSERT_EQ(deep.arr[0].arr.size(), 2u);
  EXPECT_EQ(deep.arr[0].arr[0].arr[0].s, "x");
  EXPECT_EQ(deep.arr[0].arr[1].elem_type, ValueType::F32);
  EXPECT_TRUE(deep.arr[0].arr[1].arr.empty());
  EXPECT_THROW(f.get_int_array("matrix"), GgufError);
}

TEST(GgufReader, TensorsOfSeveralTypesRoundTrip) {
  for (uint32_t version : {2u, 3u}) {
    for (uint64_t alignment : {1u, 8u, 32u, 64u, 4096u}) {
      SCOPED_TRACE(testing::Message() << "version " << version << " alignment " << alignment);
      GgufWriter w(version, alignment);
      w.add_string("general.architecture", "llama");
      const std::vector<float> norm = {1.0f, 2.0f, 3.0f};
      w.add_tensor_f32("norm.weight", {3}, norm);
      w.add_tensor("q.weight", GgmlType::Q4_1, {64, 3}, pattern_bytes(6 * 20, 1));
      w.add_tensor("e.weight", GgmlType::Q8_0, {32, 2, 2}, pattern_bytes(4 * 34, 2));
      w.add_tensor("k.weight", GgmlType::Q6_K, {256, 1, 1, 2}, pattern_bytes(2 * 210, 3));
      w.add_tensor("h.weight", GgmlType::F16, {5}, pattern_bytes(10, 4));
      w.add_tensor("z.weight", GgmlType::F32, {0}, {});

      const GgufFile f = round_trip(w);
      EXPECT_EQ(f.version(), version);
      EXPECT_EQ(f.alignment(), alignment);
      EXPECT_EQ(f.get_string("general.architecture"), "llama");
      ASSERT_EQ(f.tensors().size(), 6u);

      const TensorInfo& n = f.tensor("norm.weight");
      EXPECT_EQ(n.type, GgmlType::F32);
      EXPECT_EQ(n.ne, (std::vector<uint64_t>{3}));
      EXPECT_EQ(n.n_elements, 3u);
      EXPECT_EQ(n.n_bytes, 12u);
      EXPECT_EQ(std::memcmp(f.tensor_data(n), norm.data(), 12), 0);

      const TensorInfo& q = f.tensor("q.weight");
      EXPECT_EQ(q.type, GgmlType::Q4_1);
      EXPECT_EQ(q.ne, (std::vector<uint64_t>{64, 3}));
      EXPECT_EQ(q.n_elements, 192u);
      EXPECT_EQ(q.n_bytes, 120u);
      EXPECT_EQ(q.offset % alignment, 0u);
      EXPECT_EQ(std::memcmp(f.tensor_data(q), pattern_bytes(120, 1).data(), 120), 0);

      const TensorInfo& k = f.tensor("k.weight");
      EXPECT_EQ(k.ne, (std::vector<uint64_t>{256, 1, 1, 2}));
      EXPECT_EQ(k.n_bytes, 420u);
      EXPECT_EQ(std::memcmp(f.tensor_data(k), pattern_bytes(420, 3).data(), 420), 0);
      EXPECT_EQ(f.tensor("e.weight").n_bytes, 136u);
      EXPECT_EQ(f.tensor("h.weight").n_bytes, 10u);
      EXPECT_EQ(f.tensor("z.weight").n_elements, 0u);

      for (const TensorInfo& t : f.tensors()) {
        EXPECT_EQ(t.offset % alignment, 0u) << t.name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensor_data(t)) % std::min<uint64_t>(alignment, 64),
                  0u)
            << t.name;
      }
      EXPECT_EQ(f.find_tensor("missing"), nullptr);
      EXPECT_EQ(f.tensors()[1].name, "q.weight");  // file order is kept
    }
  }
}

TEST(GgufReader, AlignmentKeyIsWrittenOnlyWhenNotDefault) {
  EXPECT_EQ(round_trip(GgufWriter(3, 32)).find("general.alignment"), nullptr);
  const GgufFile f = round_trip(GgufWriter(3, 128));
  EXPECT_EQ(f.get_int("general.alignment"), 128);
  EXPECT_EQ(f.find("general.alignment")->type, ValueType::U32);
}

TEST(GgufReader, GettersReportMissingKeysAndWrongTypes) {
  GgufWriter w;
  w.add_string("name", "x");
  w.add_u32("count", 7);
  w.add_f32("eps", 1e-5f);
  const GgufFile f = round_trip(w);

  EXPECT_EQ(f.get_int("absent", 42), 42);
  EXPECT_EQ(f.get_float("absent", 0.5), 0.5);
  EXPECT_TRUE(f.get_bool("absent", true));
  EXPECT_EQ(f.get_string("absent", "fallback"), "fallback");
  EXPECT_EQ(f.get_int("count", 0), 7);
  EXPECT_EQ(f.get_float("count"), 7.0);
  EXPECT_NEAR(f.get_float("eps"), 1e-5, 1e-12);
  EXPECT_EQ(f.find("absent"), nullptr);

  try {
    f.get_int("missing.key");
    FAIL() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.key"), std::string::npos) << e.what();
  }
  try {
    f.get_int("name");
    FAIL() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("'name'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_int("eps", 1), GgufError);  // present but not an integer
  EXPECT_THROW(f.get_string("count"), GgufError);
  EXPECT_THROW(f.get_bool("count", false), GgufError);
  EXPECT_THROW(f.get_float("name"), GgufError);
  EXPECT_THROW(f.get_string_array("name"), GgufError);
  try {
    f.tensor("blk.0.attn_q.weight");
    FAIL() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
  }
}

TEST(GgufReader, ValueConversions) {
  EXPECT_TRUE(scalar_u(ValueType::U16, 1).is_integer());
  EXPECT_FALSE(scalar_u(ValueType::BOOL, 1).is_integer());
  EXPECT_FALSE(scalar_f(ValueType::F32, 1).is_integer());
  EXPECT_EQ(scalar_i(ValueType::I16, -7).as_int(), -7);
  EXPECT_EQ(scalar_u(ValueType::U64, 9).as_float(), 9.0);
  EXPECT_THROW(scalar_f(ValueType::F64, 1.5).as_int(), GgufError);
  EXPECT_THROW(make_string("1").as_float(), GgufError);
  EXPECT_THROW(scalar_u(ValueType::U64, ~uint64_t{0}).as_int(), GgufError);
  EXPECT_STREQ(value_type_name(ValueType::F64), "f64");
  EXPECT_STREQ(value_type_name(ValueType::ARRAY), "array");
}

TEST(GgufReader, OpenMapsAFileAndSurvivesMoves) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("adakv_gguf_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  GgufWriter w(3, 64);
  w.add_string("general.name", "tiny");
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  w.add_tensor_f32("t", {3, 2}, values);
  w.write(path);

  GgufFile opened = GgufFile::open(path);
  GgufFile moved = std::move(opened);
  EXPECT_EQ(moved.path(), path);
  EXPECT_EQ(moved.alignment(), 64u);
  const TensorInfo& t = moved.tensor("t");
  EXPECT_EQ(std::memcmp(moved.tensor_data(t), values.data(), 24), 0);
  std::filesystem::remove(path);

  EXPECT_THROW(GgufFile::open(path), GgufError);  // gone now
  EXPECT_THROW(GgufFile::open(std::filesystem::temp_directory_path().string()), GgufError);
}

TEST(GgufReader, TruncationMessageNamesFieldAndOffset) {
  GgufWriter w;
  w.add_tensor("blk.0.attn_q.weight", GgmlType::F32, {4, 2}, pattern_bytes(32, 0));
  std::vector<uint8_t> bytes = w.bytes();
  // Header 24, name 8 + 19, n_dims 4: ne[0] at 55, ne[1] at 63.
  bytes.resize(66);
  EXPECT_EQ(message_of(bytes),
            "gguf: truncated file: tensor info 'blk.0.attn_q.weight' ne[1] at offset 63 needs 8 "
            "bytes, file has 66");
  bytes.resize(3);
  EXPECT_EQ(message_of(bytes),
            "gguf: truncated file: header magic at offset 0 needs 4 bytes, file has 3");
}

TEST(GgufReader, EmptyImageIsTruncated) {
  EXPECT_THROW(GgufFile::parse(nullptr, 0), GgufError);
}

// The default model, when it is on this machine (the model-labelled e2e tests fetch it).
TEST(GgufReader, DefaultModelIfPresent) {
  const char* home = std::getenv("HOME");
  const std::string path =
      std::string(home ? home : "") + "/.cache/adakv/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  const TensorInfo& e = f.tensor("token_embd.weight");
  EXPECT_EQ(e.type, GgmlType::Q8_0);
  EXPECT_EQ(e.ne, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, GgmlType::Q4_1);
  EXPECT_EQ(f.tensor("output_norm.weight").type, GgmlType::F32);
}

}  // namespace
}  // namespace adakv::gguf
