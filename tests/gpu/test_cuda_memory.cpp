// The CUDA backend's memory, transfers, row gather and policy against the CPU backend. Data
// enters device memory through upload() and leaves through download() only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::CudaBackendTest;
using adakv::test::DeviceArray;
using adakv::test::rejects;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class CudaMemory : public CudaBackendTest {};
class CudaTransfers : public CudaBackendTest {};
class CudaGatherRows : public CudaBackendTest {};

TEST_F(CudaMemory, KindAndPolicy) {
  EXPECT_EQ(cuda().kind(), k::BackendKind::kCuda);
  EXPECT_EQ(cuda().weight_layout(k::WeightFormat::kQ8_0), k::WeightLayout::kRows);
  EXPECT_EQ(cuda().decode_path(), k::MatmulPath::kFloatDots);
}

TEST_F(CudaMemory, UploadAndDownloadRoundTrip) {
  uint32_t seed = 1;
  for (size_t n : {size_t{1}, size_t{7}, size_t{769}, (size_t{1} << 20) + 3}) {
    const auto host = random_bytes(n, seed++);
    DeviceArray<uint8_t> dev = to_cuda(host);
    EXPECT_EQ(dev.download(), host) << n << " bytes";
    // Part of it, at an odd offset each way.
    const auto part = random_bytes(n / 2, seed++);
    cuda().upload(dev.data() + n / 3, part.data(), part.size());
    std::vector<uint8_t> got(part.size());
    cuda().download(got.data(), dev.data() + n / 3, got.size());
    EXPECT_EQ(got, part) << n << " bytes";
  }
}

TEST_F(CudaMemory, AllocationsAreDisjointAndEmptyOnesAreNull) {
  k::Buffer empty = cuda().allocate(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.bytes(), 0u);
  cuda().upload(empty.data(), nullptr, 0);
  cuda().download(nullptr, empty.data(), 0);

  std::vector<k::Buffer> buffers;
  for (size_t n : {1, 7, 769, 64 << 10, 3 << 20, 5}) buffers.push_back(cuda().allocate(n));
  std::vector<std::vector<uint8_t>> want;
  uint32_t seed = 10;
  for (auto& b : buffers) {
    ASSERT_NE(b.data(), nullptr);
    want.push_back(random_bytes(b.bytes(), seed++));
    cuda().upload(b.data(), want.back().data(), b.bytes());
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<uint8_t> got(buffers[i].bytes());
    cuda().download(got.data(), buffers[i].data(), got.size());
    EXPECT_EQ(got, want[i]) << "buffer " << i;
  }
}

TEST_F(CudaMemory, ConstantIsACopy) {
  std::vector<float> host = adakv::test::random_vector(769, 20);
  const std::vector<float> original = host;
  k::Buffer c = cuda().constant(host.data(), host.size() * sizeof(float));
  ASSERT_NE(c.data(), nullptr);
  EXPECT_NE(c.data(), static_cast<void*>(host.data()));
  std::fill(host.begin(), host.end(), 0.0f);
  std::vector<float> got(original.size());
  cuda().download(got.data(), c.data(), c.bytes());
  EXPECT_EQ(got, original);
  EXPECT_EQ(cuda().constant(nullptr, 0).bytes(), 0u);
}

TEST_F(CudaTransfers, CopyAndFillAtOddOffsets) {
  for (size_t n : {1, 7, 769, 100003}) {
    const auto host = random_bytes(n, static_cast<uint32_t>(n));
    DeviceArray<uint8_t> src = to_cuda(host);
    DeviceArray<uint8_t> dst = to_cuda(std::vector<uint8_t>(n + 2, 0x11));
    cuda().copy(dst.data() + 1, src.data(), n);
    std::vector<uint8_t> want(n + 2, 0x11);
    std::copy(host.begin(), host.end(), want.begin() + 1);
    EXPECT_EQ(dst.download(), want) << n;
    cuda().fill(dst.data() + 1, 0xA5, n);
    std::fill(want.begin() + 1, want.end() - 1, uint8_t{0xA5});
    EXPECT_EQ(dst.download(), want) << n;
  }
}

TEST_F(CudaTransfers, RunOnHostIsRefusedAndTheStreamIsExposed) {
  bool ran = false;
  EXPECT_THROW(cuda().run_on_host([&] { ran = true; }), std::logic_error);
  EXPECT_FALSE(ran);
  EXPECT_NE(cuda().native_stream(), nullptr);
  EXPECT_EQ(k::cpu_backend().native_stream(), nullptr);
}

// The CPU twin on host copies of the same bytes is the reference.
TEST_F(CudaGatherRows, MatchesCpu) {
  std::mt19937 rng(40);
  struct Shape {
    size_t row_bytes, src_stride, dst_stride;
  };
  // Odd sizes (byte copies), and 16-byte aligned ones (the widest words).
  for (const Shape s : {Shape{7, 9, 13}, Shape{64, 128, 64}, Shape{12, 12, 20}}) {
    for (size_t n : {1, 7, 769}) {
      const size_t src_rows = 50;
      const auto src = random_bytes(src_rows * s.src_stride, static_cast<uint32_t>(n));
      std::vector<int32_t> rows(n);
      for (auto& r : rows) r = static_cast<int32_t>(rng() % src_rows);
      const std::vector<uint8_t> dst0(n * s.dst_stride, 0x5A);
      std::vector<uint8_t> want = dst0;
      cpu().gather_rows(want.data(), s.dst_stride, src.data(), s.src_stride, s.row_bytes,
                        rows.data(), n);
      DeviceArray<uint8_t> dsrc = to_cuda(src), ddst = to_cuda(dst0);
      DeviceArray<int32_t> drows = to_cuda(rows);
      cuda().gather_rows(ddst.data(), s.dst_stride, dsrc.data(), s.src_stride, s.row_bytes,
                         drows.data(), n);
      EXPECT_EQ(ddst.download(), want) << "n " << n << ", row_bytes " << s.row_bytes;
    }
  }
}

TEST_F(CudaGatherRows, RejectsWhatTheCpuRejects) {
  DeviceArray<uint8_t> src = to_cuda(std::vector<uint8_t>(64, 1));
  DeviceArray<uint8_t> dst = to_cuda(std::vector<uint8_t>(64, 2));
  DeviceArray<int32_t> bad = to_cuda(std::vector<int32_t>{0, -1});
  EXPECT_TRUE(rejects([&] { cuda().gather_rows(dst.data(), 8, src.data(), 8, 8, bad.data(), 2); },
                      "gather_rows"));
  // Nothing was written.
  EXPECT_EQ(dst.download(), std::vector<uint8_t>(64, 2));
  DeviceArray<int32_t> rows = to_cuda(std::vector<int32_t>{0, 1});
  EXPECT_TRUE(
      rejects([&] { cuda().gather_rows(src.data() + 8, 8, src.data(), 8, 8, rows.data(), 2); },
              "gather_rows"));
  EXPECT_TRUE(rejects([&] { cuda().gather_rows(dst.data(), 4, src.data(), 8, 8, rows.data(), 2); },
                      "gather_rows"));
  cuda().gather_rows(nullptr, 0, nullptr, 0, 8, nullptr, 0);
}

}  // namespace
