// Reconstruct scoring in pieces (runtime/compression/reconstruction.h, Compressor::score_piece):
// the spans the pieces score cover the context once, the text is found after a chat template,
// and a piece's scores under ReconstructKeys::kPiece equal a reference spelled out here: each
// repeat query's softmax over the attention sink, the piece's span and the repeat so far, its
// largest value per key, the largest over the GQA group, kept per key over the pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/compressor.h"
#include "runtime/compression/reconstruction.h"
#include "tests/unit/random_data.h"

namespace c = adakv::compression;
namespace k = adakv::kernels;

namespace {

constexpr size_t kHq = 4, kHkv = 2, kDh = 8, kWindow = 4;

// One repeated piece: its queries (every row after the context, [steps][Hq][Dh]) and the keys
// of the context and of the piece ([n + steps][Hkv][Dh]).
struct Piece {
  std::vector<float> q, keys;
  size_t steps;
};

Piece random_piece(const std::vector<float>& context_keys, size_t n, size_t steps, uint32_t seed) {
  Piece p{adakv::test::random_vector(steps * kHq * kDh, seed, 1.0f), context_keys, steps};
  const auto repeat_keys = adakv::test::random_vector(steps * kHkv * kDh, seed + 1, 1.0f);
  p.keys.resize(n * kHkv * kDh);
  p.keys.insert(p.keys.end(), repeat_keys.begin(), repeat_keys.end());
  return p;
}

// The reference: into best[Hkv][n - W], each key of `sink` and [begin, end) the largest softmax
// weight any query of the piece (any head of its group) gives it, the softmax taken over those
// keys and the repeat's own up to the query.
void reference_piece(const Piece& p, size_t n, size_t sink, size_t begin, size_t end,
                     std::vector<float>& best) {
  const float scale = 1.0f / std::sqrt(float(kDh));
  const size_t prefix = n - kWindow;
  for (size_t h = 0; h < kHq; ++h) {
    const size_t g = h / (kHq / kHkv);
    for (size_t i = 0; i < p.steps; ++i) {
      std::vector<size_t> keys;
      for (size_t j = 0; j < sink; ++j) keys.push_back(j);
      for (size_t j = begin; j < end; ++j) keys.push_back(j);
      for (size_t j = n; j <= n + i; ++j) keys.push_back(j);
      std::vector<double> logits;
      for (size_t j : keys) {
        double dot = 0;
        for (size_t d = 0; d < kDh; ++d) {
          dot += double(p.q[(i * kHq + h) * kDh + d]) * double(p.keys[(j * kHkv + g) * kDh + d]);
        }
        logits.push_back(dot * scale);
      }
      const double m = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (double& l : logits) sum += (l = std::exp(l - m));
      for (size_t t = 0; t < keys.size(); ++t) {
        if (keys[t] >= prefix) continue;
        float& b = best[g * prefix + keys[t]];
        b = std::max(b, float(logits[t] / sum));
      }
    }
  }
}

}  // namespace

TEST(ReconstructPieces, SpansCoverTheContextOnce) {
  // A text of 30 tokens at position 5 of a 40-token context, in pieces of 10.
  EXPECT_EQ(c::piece_span(0, false, 10, 5, 40).begin, 0u);
  EXPECT_EQ(c::piece_span(0, false, 10, 5, 40).end, 15u);
  EXPECT_EQ(c::piece_span(1, false, 10, 5, 40).begin, 15u);
  EXPECT_EQ(c::piece_span(1, false, 10, 5, 40).end, 25u);
  EXPECT_EQ(c::piece_span(2, true, 10, 5, 40).begin, 25u);
  EXPECT_EQ(c::piece_span(2, true, 10, 5, 40).end, 40u);
  // One piece: the whole context.
  EXPECT_EQ(c::piece_span(0, true, 30, 5, 40).end, 40u);
  // Past the context nothing is left.
  const auto past = c::piece_span(9, false, 10, 5, 40);
  EXPECT_EQ(past.begin, past.end);
}

TEST(ReconstructPieces, TheTextIsFoundAfterAChatTemplate) {
  std::vector<int32_t> text(40);
  for (size_t i = 0; i < text.size(); ++i) text[i] = int32_t(100 + i);
  std::vector<int32_t> context = {1, 2, 3};
  context.insert(context.end(), text.begin(), text.end());
  context.push_back(7);
  EXPECT_EQ(c::text_offset(context, text), 3u);
  // Its first token merged with the template's newline: found by the tokens after it.
  context[3] = 99;
  EXPECT_EQ(c::text_offset(context, text), 3u);
  EXPECT_EQ(c::text_offset({5, 6, 7}, text), 0u);
  const auto r = c::repeat_pieces({9, 9}, text, 16, 3);
  EXPECT_EQ(r.piece_tokens, 16u);
  EXPECT_EQ(r.text_offset, 3u);
  EXPECT_EQ(r.ends, (std::vector<size_t>{18, 36, 46}));
}

TEST(ReconstructPieces, EachPieceScoresItsSpanAsTheReference) {
  const size_t n = 48, layers = 1;
  adakv::model::ModelConfig model;
  model.n_layers = layers;
  model.n_heads = kHq;
  model.n_kv_heads = kHkv;
  model.head_dim = kDh;
  model.d_model = kHq * kDh;
  c::CompressionConfig config;
  config.scoring = c::Scoring::kReconstruct;
  config.reconstruct_keys = c::ReconstructKeys::kPiece;
  config.window = kWindow;
  config.pool_kernel = 1;
  config.gqa = c::GqaAggregation::kMax;
  k::Backend& backend = k::cpu_backend();
  c::Compressor compressor(model, config, c::HeadGroup{}, /*record=*/true, backend);
  compressor.start_prompt(false);

  const auto context_keys = adakv::test::random_vector(n * kHkv * kDh, 7, 1.0f);
  const auto window_q = adakv::test::random_vector(kWindow * kHq * kDh, 9, 1.0f);
  // Two pieces: [0, 20) (no separate sink: it is in the span) and [20, 48).
  const Piece first = random_piece(context_keys, n, 12, 11);
  const Piece second = random_piece(context_keys, n, 9, 21);
  const c::RepeatPiece spans[] = {{n, {0, 20}}, {n, {20, n}}};
  const Piece* pieces[] = {&first, &second};
  std::vector<float> expected(kHkv * (n - kWindow), 0.0f);
  const size_t q_width = kHq * kDh;
  compressor.observe(0, window_q.data(), q_width, kWindow);
  for (size_t i = 0; i < 2; ++i) {
    const Piece& p = *pieces[i];
    compressor.observe(0, p.q.data(), q_width, p.steps);
    auto keys = [&p, &backend](size_t) {
      k::Buffer b = backend.allocate(p.keys.size() * sizeof(float));
      std::memcpy(b.data(), p.keys.data(), p.keys.size() * sizeof(float));
      return b;
    };
    compressor.score_lookahead(n + p.steps, keys, /*keep_window=*/i == 0, &spans[i]);
    const size_t sink = std::min(c::kReconstructSink, spans[i].span.begin);
    reference_piece(p, n, sink, spans[i].span.begin, spans[i].span.end, expected);
  }
  const std::vector<float>& got = compressor.scores()[0];
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5f) << i;
  // Every key before the window is in one piece's span: none is left unscored.
  EXPECT_GT(*std::min_element(got.begin(), got.end()), 0.0f);
}
