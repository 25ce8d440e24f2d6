// The conformance suite's fixture: every backend this build has, arrays in a backend's memory
// that are filled by upload() and read back by download() only (so the same test runs on a
// device), and the comparisons of the suite.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace adakv::kernels {
// Test names and failure messages show a backend by its name.
inline void PrintTo(BackendKind kind, std::ostream* os) {
  *os << to_string(kind);
}
}  // namespace adakv::kernels

namespace adakv::test {

namespace k = adakv::kernels;

// The backends the suite runs on: the CPU and guarded backends everywhere, the CUDA backend
// where this build has it and the process sees a GPU; a new backend is one more entry.
inline std::vector<k::BackendKind> backend_kinds() {
  std::vector<k::BackendKind> kinds = {k::BackendKind::kCpu, k::BackendKind::kGuarded};
  if (k::device_count(k::BackendKind::kCuda) > 0) kinds.push_back(k::BackendKind::kCuda);
  return kinds;
}

// Whether host code can address the backend's memory inside run_on_host() (a device backend
// throws std::logic_error there).
inline bool host_addressable(k::BackendKind kind) {
  return kind != k::BackendKind::kCuda;
}

// n elements of T in a backend's memory.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(k::Backend& backend, size_t n)
      : backend_(&backend), n_(n), buffer_(backend.allocate(n * sizeof(T))) {}
  DeviceArray(k::Backend& backend, const std::vector<T>& host) : DeviceArray(backend, host.size()) {
    upload(host);
  }

  T* data() const { return buffer_.as<T>(); }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    backend_->upload(data(), host.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    backend_->download(host.data(), data(), n_ * sizeof(T));
    return host;
  }

 private:
  k::Backend* backend_;
  size_t n_;
  k::Buffer buffer_;
};

class BackendTest : public testing::TestWithParam<k::BackendKind> {
 protected:
  void SetUp() override { backend_ = k::make_backend(GetParam()); }

  k::Backend& backend() { return *backend_; }
  template <typename T>
  DeviceArray<T> to_device(const std::vector<T>& host) {
    return DeviceArray<T>(*backend_, host);
  }
  // n copies of `value` in backend memory.
  template <typename T>
  DeviceArray<T> filled(size_t n, T value) {
    return DeviceArray<T>(*backend_, std::vector<T>(n, value));
  }

 private:
  std::unique_ptr<k::Backend> backend_;
};

inline std::string backend_name(const testing::TestParamInfo<k::BackendKind>& info) {
  return k::to_string(info.param);
}

// Bit equality (NaNs and signed zeros included).
template <typename T>
testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return testing::AssertionFailure() << "first difference at element " << i;
    }
  }
  return testing::AssertionSuccess();
}

// |got - want| <= rel * max |want| elementwise (want from a double reference).
inline testing::AssertionResult close_to(const std::vector<float>& got,
                                         const std::vector<double>& want, double rel) {
  if (got.size() != want.size()) {
    return testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  double max_ref = 1e-6;
  for (double w : want) max_ref = std::max(max_ref, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= rel * max_ref)) {
      return testing::AssertionFailure() << "element " << i << ": " << got[i] << ", reference "
                                         << want[i] << " (tolerance " << rel * max_ref << ")";
    }
  }
  return testing::AssertionSuccess();
}

// Runs `call` and expects std::invalid_argument whose message names `op`.
template <typename F>
testing::AssertionResult rejects(F&& call, const std::string& op) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find(op) != std::string::npos) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "the message does not name " << op << ": " << e.what();
  }
  return testing::AssertionFailure() << op << " accepted the arguments";
}

}  // namespace adakv::test

#define ADAKV_INSTANTIATE_BACKENDS(suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Backends, suite, testing::ValuesIn(adakv::test::backend_kinds()), \
                           adakv::test::backend_name)
