// The logit goldens of tests/tools/gen_logits_goldens.py (format documented there): per prompt
// its token ids, transformers' greedy continuation, and at each checked position the argmax,
// the largest |logit|, the top logits and the logits of fixed probe ids. Version 1 checks every
// position; version 2 names the positions it checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace adakv::test {

struct GoldenPosition {
  size_t position;  // in the prompt
  int32_t argmax;
  float max_abs;
  std::vector<std::pair<int32_t, float>> top;
  std::vector<float> probes;
};

struct GoldenPrompt {
  std::vector<int32_t> ids, greedy;
  std::vector<GoldenPosition> positions;  // ascending
};

struct LogitGoldens {
  std::vector<int32_t> probe_ids;
  std::vector<GoldenPrompt> prompts;

  // max |row[id] - want| / max |logit| over the position's checked ids (top and probes).
  float row_error(const float* row, const GoldenPosition& ref) const {
    float worst = 0;
    auto rel = [&](int32_t id, float want) { return std::fabs(row[id] - want) / ref.max_abs; };
    for (const auto& [id, want] : ref.top) worst = std::max(worst, rel(id, want));
    for (size_t i = 0; i < ref.probes.size(); ++i) {
      worst = std::max(worst, rel(probe_ids[i], ref.probes[i]));
    }
    return worst;
  }
};

namespace detail {

class GoldenReader {
 public:
  explicit GoldenReader(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
  }
  template <class T>
  T get() {
    if (pos_ + sizeof(T) > bytes_.size()) throw std::runtime_error("goldens truncated");
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_vector(size_t n) {
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }

 private:
  std::vector<char> bytes_;
  size_t pos_ = 0;
};

}  // namespace detail

inline LogitGoldens load_logit_goldens(const std::string& path) {
  detail::GoldenReader r(path);
  if (r.get<uint32_t>() != 0x474c4b41u) throw std::runtime_error(path + ": bad magic");
  const uint32_t version = r.get<uint32_t>();
  if (version != 1 && version != 2) throw std::runtime_error(path + ": unknown version");
  LogitGoldens g;
  const uint32_t n_prompts = r.get<uint32_t>(), n_top = r.get<uint32_t>(),
                 n_probe = r.get<uint32_t>();
  g.probe_ids = r.get_vector<int32_t>(n_probe);
  for (uint32_t p = 0; p < n_prompts; ++p) {
    GoldenPrompt pr;
    pr.ids = r.get_vector<int32_t>(r.get<uint32_t>());
    pr.greedy = r.get_vector<int32_t>(r.get<uint32_t>());
    const size_t checked = version == 1 ? pr.ids.size() : r.get<uint32_t>();
    for (size_t t = 0; t < checked; ++t) {
      GoldenPosition pos;
      pos.position = version == 1 ? t : r.get<uint32_t>();
      if (pos.position >= pr.ids.size()) throw std::runtime_error(path + ": bad position");
      pos.argmax = r.get<int32_t>();
      pos.max_abs = r.get<float>();
      for (uint32_t i = 0; i < n_top; ++i) {
        const int32_t id = r.get<int32_t>();
        pos.top.emplace_back(id, r.get<float>());
      }
      pos.probes = r.get_vector<float>(n_probe);
      pr.positions.push_back(std::move(pos));
    }
    g.prompts.push_back(std::move(pr));
  }
  return g;
}

}  // namespace adakv::test
