// adakv's logits and greedy continuations against HF transformers (fp32) on the same GGUF.
// Goldens: tests/tools/gen_logits_goldens.py (format documented there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "kernels/quant.h"
#include "model/llama.h"
#include "runtime/contiguous_kv_cache.h"
#include "runtime/sampler.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/model_fixture.h"
#include "tests/unit/tolerances.h"

namespace {

struct Position {
  int32_t argmax;
  float max_abs;
  std::vector<std::pair<int32_t, float>> top;
  std::vector<float> probes;
};

struct Prompt {
  std::vector<int32_t> ids, greedy;
  std::vector<Position> positions;
};

struct Goldens {
  std::vector<int32_t> probe_ids;
  std::vector<Prompt> prompts;
};

class Reader {
 public:
  explicit Reader(const std::string& path) {
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

Goldens load_goldens() {
  Reader r(std::string(ADAKV_TEST_DATA_DIR) + "/logits_goldens.bin");
  if (r.get<uint32_t>() != 0x474c4b41u) throw std::runtime_error("goldens: bad magic");
  if (r.get<uint32_t>() != 1) throw std::runtime_error("goldens: unknown version");
  Goldens g;
  const uint32_t n_prompts = r.get<uint32_t>(), n_top = r.get<uint32_t>(),
                 n_probe = r.get<uint32_t>();
  g.probe_ids = r.get_vector<int32_t>(n_probe);
  for (uint32_t p = 0; p < n_prompts; ++p) {
    Prompt pr;
    pr.ids = r.get_vector<int32_t>(r.get<uint32_t>());
    pr.greedy = r.get_vector<int32_t>(r.get<uint32_t>());
    for (size_t t = 0; t < pr.ids.size(); ++t) {
      Position pos;
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

class LogitsOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    goldens_ = new Goldens(load_goldens());
    model_ = new adakv::model::LlamaModel(
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend()));
  }
  static void TearDownTestSuite() {
    delete goldens_;
    delete model_;
  }
  // Greedy decoding from every golden prompt gives the transformers tokens.
  static void expect_greedy_goldens(const adakv::model::LlamaModel& model);
  // max |row[id] - want| / max |logit| over the position's checked ids (top and probes).
  static float row_error(const float* row, const Position& ref) {
    float worst = 0;
    auto rel = [&](int32_t id, float want) { return std::fabs(row[id] - want) / ref.max_abs; };
    for (const auto& [id, want] : ref.top) worst = std::max(worst, rel(id, want));
    for (size_t i = 0; i < ref.probes.size(); ++i) {
      worst = std::max(worst, rel(goldens_->probe_ids[i], ref.probes[i]));
    }
    return worst;
  }
  static Goldens* goldens_;
  static adakv::model::LlamaModel* model_;
};
Goldens* LogitsOracle::goldens_ = nullptr;
adakv::model::LlamaModel* LogitsOracle::model_ = nullptr;

TEST_F(LogitsOracle, EveryPositionMatchesTransformers) {
  ASSERT_EQ(goldens_->prompts.size(), 5u);
  size_t longest = 0;
  const size_t V = model_->config().vocab_size;
  for (const auto& pr : goldens_->prompts) {
    longest = std::max(longest, pr.ids.size());
    adakv::runtime::ContiguousKvCache cache(model_->config(), pr.ids.size(), model_->backend());
    const std::vector<float> logits =
        model_->logits_to_host(model_->forward(pr.ids.data(), pr.ids.size(), cache, pr.ids.size()));
    float worst = 0;
    for (size_t t = 0; t < pr.ids.size(); ++t) {
      const float* row = logits.data() + t * V;
      worst = std::max(worst, row_error(row, pr.positions[t]));
      ASSERT_EQ(adakv::runtime::argmax(row, V), pr.positions[t].argmax)
          << "prompt of " << pr.ids.size() << " tokens, position " << t;
    }
    EXPECT_LE(worst, adakv::test::kLogitsRel) << "prompt of " << pr.ids.size() << " tokens";
    std::printf("prompt %5zu tokens: max |diff| / max |logit| over checked ids = %.2e\n",
                pr.ids.size(), worst);
  }
  EXPECT_GE(longest, 2000u);
}

constexpr adakv::kernels::MatmulPath kDecodePaths[] = {adakv::kernels::MatmulPath::kInt16Dots,
                                                       adakv::kernels::MatmulPath::kFloatDots};

const char* path_name(adakv::kernels::MatmulPath path) {
  return path == adakv::kernels::MatmulPath::kInt16Dots ? "int16 dots (the default)"
                                                        : "float dots (--decode-dots float)";
}

// The goldens hold on both decode paths.
TEST_F(LogitsOracle, Greedy64TokensIdentical) {
  for (const auto path : kDecodePaths) {
    SCOPED_TRACE(path_name(path));
    const adakv::test::DecodeDotsScope dots(path);
    const auto model =
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend());
    expect_greedy_goldens(model);
  }
}

// The rows a generated token takes (one token per forward: the decode dots, int16 activations
// by default) against the transformers logits at every position, within the tolerance and with
// the argmax of the prompt's float32 GEMM path above. The long prompt is prefilled up to its last
// 100 tokens, which are then decoded at 2000 tokens of context.
TEST_F(LogitsOracle, DecodeRowsMatchTransformers) {
  const size_t V = model_->config().vocab_size;
  for (const auto path : kDecodePaths) {
    SCOPED_TRACE(path_name(path));
    const adakv::test::DecodeDotsScope dots(path);
    const auto model =
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend());
    float worst = 0;
    size_t rows = 0;
    for (const auto& pr : goldens_->prompts) {
      const size_t n = pr.ids.size(), first = n > 200 ? n - 100 : 0;
      adakv::runtime::ContiguousKvCache cache(model.config(), n, model.backend());
      std::vector<float> logits;
      if (first > 0) model.forward(pr.ids.data(), first, cache);
      for (size_t t = first; t < n; ++t, ++rows) {
        logits = model.logits_to_host(model.forward(&pr.ids[t], 1, cache));
        worst = std::max(worst, row_error(logits.data(), pr.positions[t]));
        EXPECT_EQ(adakv::runtime::argmax(logits.data(), V), pr.positions[t].argmax)
            << "prompt of " << n << " tokens, position " << t;
      }
    }
    EXPECT_LE(worst, adakv::test::kLogitsRel);
    std::printf("%s: %zu decode rows, max |diff| / max |logit| over checked ids = %.2e\n",
                path_name(path), rows, worst);
  }
}

void LogitsOracle::expect_greedy_goldens(const adakv::model::LlamaModel& model) {
  for (const auto& pr : goldens_->prompts) {
    adakv::runtime::ContiguousKvCache cache(model.config(), pr.ids.size() + pr.greedy.size(),
                                            model.backend());
    std::vector<float> logits =
        model.logits_to_host(model.forward(pr.ids.data(), pr.ids.size(), cache));
    std::vector<int32_t> got;
    for (size_t i = 0; i < pr.greedy.size(); ++i) {
      const int32_t next = adakv::runtime::argmax(logits.data(), model.config().vocab_size);
      got.push_back(next);
      logits = model.logits_to_host(model.forward(&next, 1, cache));
    }
    EXPECT_EQ(got, pr.greedy) << "prompt of " << pr.ids.size() << " tokens";
  }
}

// forward_batch decodes several sequences at different positions in one pass; each must get
// the logits it gets alone (the batched GEMM may round differently, hence the tolerance) and
// the same greedy tokens as the transformers goldens.
TEST_F(LogitsOracle, BatchedDecodeMatchesOneSequenceAtATime) {
  using adakv::runtime::ContiguousKvCache;
  const size_t V = model_->config().vocab_size, steps = 16;
  std::vector<const Prompt*> prompts;
  for (const auto& pr : goldens_->prompts) {
    if (prompts.size() < 3 && pr.greedy.size() >= steps) prompts.push_back(&pr);
  }
  ASSERT_GE(prompts.size(), 2u);
  const size_t B = prompts.size();
  std::vector<std::unique_ptr<ContiguousKvCache>> batched, alone;
  std::vector<std::vector<float>> alone_logits(B);
  std::vector<float> batch_logits(B * V);
  for (size_t b = 0; b < B; ++b) {
    const auto& ids = prompts[b]->ids;
    batched.push_back(std::make_unique<ContiguousKvCache>(model_->config(), ids.size() + steps,
                                                          model_->backend()));
    alone.push_back(std::make_unique<ContiguousKvCache>(model_->config(), ids.size() + steps,
                                                        model_->backend()));
    const auto lg = model_->logits_to_host(model_->forward(ids.data(), ids.size(), *batched[b]));
    std::copy(lg.begin(), lg.end(), batch_logits.begin() + b * V);
    alone_logits[b] = model_->logits_to_host(model_->forward(ids.data(), ids.size(), *alone[b]));
  }
  for (size_t step = 0; step < steps; ++step) {
    std::vector<int32_t> next(B);
    std::vector<adakv::model::KvCache*> caches(B);
    for (size_t b = 0; b < B; ++b) {
      next[b] = adakv::runtime::argmax(batch_logits.data() + b * V, V);
      EXPECT_EQ(next[b], prompts[b]->greedy[step]) << "sequence " << b << ", step " << step;
      caches[b] = batched[b].get();
    }
    batch_logits = model_->logits_to_host(model_->forward_batch(next.data(), caches.data(), B));
    ASSERT_EQ(batch_logits.size(), B * V);
    for (size_t b = 0; b < B; ++b) {
      alone_logits[b] = model_->logits_to_host(model_->forward(&next[b], 1, *alone[b]));
      float worst = 0, scale = 0;
      for (size_t i = 0; i < V; ++i) {
        worst = std::max(worst, std::fabs(batch_logits[b * V + i] - alone_logits[b][i]));
        scale = std::max(scale, std::fabs(alone_logits[b][i]));
      }
      EXPECT_LE(worst, 1e-5f * scale) << "sequence " << b << ", step " << step;
    }
  }
}

}  // namespace
