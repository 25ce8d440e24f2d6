// Head profile statistics on synthetic score rows (entropy, locality, retained mass, roles) and
// the heatmap SVG writer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/profile/head_profile.h"
#include "runtime/profile/svg_heatmap.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::profile::HeadRole;
using adakv::profile::RoleThresholds;

CompressionConfig policy(Policy p, size_t window = 8) {
  CompressionConfig c;
  c.policy = p;
  c.window = window;
  return c;
}

// Attention that decays away from the end of the prefix: a sliding-window head.
std::vector<float> local_row(size_t n) {
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = std::exp((static_cast<float>(i) - n) / 4.0f);
  return s;
}

// Nearly all attention on three distant positions: a retrieval head.
std::vector<float> retrieval_row(size_t n) {
  std::vector<float> s(n, 1e-4f);
  s[10] = 1.0f;
  s[50] = 0.8f;
  s[100] = 0.6f;
  return s;
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

TEST(HeadProfile, EntropyOfKnownDistributions) {
  const std::vector<float> uniform(8, 0.5f), one_hot = {0, 0, 3, 0}, two = {1, 0, 1, 0};
  EXPECT_NEAR(adakv::profile::entropy_bits(uniform.data(), 8), 3.0, 1e-12);
  EXPECT_NEAR(adakv::profile::entropy_bits(one_hot.data(), 4), 0.0, 1e-12);
  EXPECT_NEAR(adakv::profile::entropy_bits(two.data(), 4), 1.0, 1e-12);
  // p = (1/4, 1/4, 1/2): 1.5 bits.
  const std::vector<float> skewed = {1, 1, 2};
  EXPECT_NEAR(adakv::profile::entropy_bits(skewed.data(), 3), 1.5, 1e-12);
}

TEST(HeadProfile, ZeroNegativeAndNanScoresCountAsNoMass) {
  const std::vector<float> zeros(16, 0.0f);
  EXPECT_NEAR(adakv::profile::entropy_bits(zeros.data(), 16), 4.0, 1e-12);  // uniform
  const std::vector<float> noisy = {1, -3, std::numeric_limits<float>::quiet_NaN(), 1};
  EXPECT_NEAR(adakv::profile::entropy_bits(noisy.data(), 4), 1.0, 1e-12);
  EXPECT_NEAR(adakv::profile::mass_share(noisy.data(), 4, {1, 2, 3}), 0.5, 1e-12);
  EXPECT_EQ(adakv::profile::entropy_bits(nullptr, 0), 0.0);
}

TEST(HeadProfile, TailShareTakesTheLastCeilFractionOfPositions) {
  std::vector<float> s(15, 1.0f);
  s[14] = 13.0f;  // total 27
  // ceil(0.1 * 15) = 2 positions: 13 + 1 of 27.
  EXPECT_NEAR(adakv::profile::tail_mass_share(s.data(), 15, 0.1), 14.0 / 27.0, 1e-12);
  EXPECT_NEAR(adakv::profile::tail_mass_share(s.data(), 15, 0.0), 13.0 / 27.0, 1e-12);  // >= 1
  EXPECT_NEAR(adakv::profile::tail_mass_share(s.data(), 15, 1.0), 1.0, 1e-12);
  const std::vector<float> zeros(10, 0.0f);
  EXPECT_NEAR(adakv::profile::tail_mass_share(zeros.data(), 10, 0.3), 0.3, 1e-12);
}

TEST(HeadProfile, DistantFocusTakesTheTopPositionsBeforeTheTail) {
  std::vector<float> s(100, 1.0f);  // total 100 + 9 + 9 = 118
  s[5] = 10.0f;
  s[95] = 10.0f;  // in the tail (last 10 positions): not distant
  // 90 distant positions, top max(2, ceil(0.01 * 90) = 1) = 2: 10 + 1 of 118.
  EXPECT_NEAR(adakv::profile::distant_focus(s.data(), 100, 0.1, 0.01, 2), 11.0 / 118.0, 1e-12);
  // The top 10% (9 positions): 10 + 8.
  EXPECT_NEAR(adakv::profile::distant_focus(s.data(), 100, 0.1, 0.1, 2), 18.0 / 118.0, 1e-12);
  // More positions asked for than there are: every distant position.
  EXPECT_NEAR(adakv::profile::distant_focus(s.data(), 100, 0.1, 0.01, 500), 99.0 / 118.0, 1e-12);
  const std::vector<float> zeros(10, 0.0f);
  EXPECT_NEAR(adakv::profile::distant_focus(zeros.data(), 10, 0.1, 0.01, 3), 0.3, 1e-12);
}

TEST(HeadProfile, ClassifyFollowsTheDocumentedThresholds) {
  const RoleThresholds t;  // local: locality >= 0.5; retrieval: focus >= 0.25
  EXPECT_EQ(adakv::profile::classify(0.5, 0.9, t), HeadRole::kLocal);
  EXPECT_EQ(adakv::profile::classify(0.8, 0.0, t), HeadRole::kLocal);
  EXPECT_EQ(adakv::profile::classify(0.49, 0.25, t), HeadRole::kRetrieval);
  EXPECT_EQ(adakv::profile::classify(0.1, 0.9, t), HeadRole::kRetrieval);
  EXPECT_EQ(adakv::profile::classify(0.49, 0.249, t), HeadRole::kMixed);
  EXPECT_EQ(adakv::profile::classify(0.1, 0.01, t), HeadRole::kMixed);
  EXPECT_STREQ(adakv::profile::to_string(HeadRole::kRetrieval), "retrieval");
  EXPECT_STREQ(adakv::profile::to_string(HeadRole::kMixed), "mixed");
  EXPECT_EQ(adakv::profile::role_letter(HeadRole::kLocal), 'L');
  EXPECT_EQ(adakv::profile::role_letter(HeadRole::kRetrieval), 'R');
}

TEST(HeadProfile, SyntheticRowsGetTheirRoles) {
  const auto c = policy(Policy::kAdaKV);
  const size_t prefix = 500, n = prefix + c.window, budget = c.window + 50;
  const RoleThresholds t;

  const auto local = local_row(prefix);
  const auto l = adakv::profile::profile_head(local.data(), n, budget, c, t);
  EXPECT_EQ(l.role, HeadRole::kLocal);
  EXPECT_GT(l.locality, 0.99);

  const auto retrieval = retrieval_row(prefix);
  const auto r = adakv::profile::profile_head(retrieval.data(), n, budget, c, t);
  EXPECT_EQ(r.role, HeadRole::kRetrieval);
  EXPECT_LT(r.entropy_norm, 0.3);
  EXPECT_LT(r.locality, 0.05);
  EXPECT_GT(r.focus, 0.95);
  EXPECT_GT(r.retained_mass, 0.97);  // the three spikes are among the kept 50

  const std::vector<float> uniform(prefix, 1.0f);
  const auto m = adakv::profile::profile_head(uniform.data(), n, budget, c, t);
  EXPECT_EQ(m.role, HeadRole::kMixed);
  EXPECT_NEAR(m.entropy_bits, std::log2(500.0), 1e-9);
  EXPECT_NEAR(m.entropy_norm, 1.0, 1e-12);
  EXPECT_NEAR(m.sink_mass, 4.0 / 500.0, 1e-12);
  EXPECT_NEAR(m.locality, 50.0 / 496.0, 1e-12);  // ceil(10% of the 496 content positions)
  EXPECT_NEAR(m.focus, 8.0 / 496.0, 1e-12);      // 8 positions (1% of 446 is 5)
  EXPECT_NEAR(m.retained_mass, 0.1, 1e-12);      // 50 of 500 equal scores
}

TEST(HeadProfile, AnAttentionSinkIsNotRetrieval) {
  // 90% of the attention on the first token (spread over 4 positions by max-pooling), the
  // rest uniform: one distant position holds the mass, yet the head retrieves nothing.
  const auto c = policy(Policy::kAdaKV);
  const size_t prefix = 1000, n = prefix + c.window;
  std::vector<float> s(prefix, 0.1f / 996);
  for (size_t i = 0; i < 4; ++i) s[i] = 0.9f / 4;
  const auto h = adakv::profile::profile_head(s.data(), n, c.window + 100, c, RoleThresholds{});
  EXPECT_NEAR(h.sink_mass, 0.9, 1e-6);
  EXPECT_LT(h.entropy_norm, 0.35);  // low entropy: the sink alone would look like retrieval
  EXPECT_LT(h.focus, 0.02);
  EXPECT_EQ(h.role, HeadRole::kMixed);
  // Without the sink exclusion the same row would be called retrieval.
  RoleThresholds no_sink;
  no_sink.sink_tokens = 0;
  EXPECT_EQ(adakv::profile::profile_head(s.data(), n, c.window + 100, c, no_sink).role,
            HeadRole::kRetrieval);
}

TEST(HeadProfile, RetainedMassCountsTheTopScoresAndNeverFallsBelowTheKeptFraction) {
  const auto c = policy(Policy::kSnapKV, 4);
  const std::vector<float> s = {5, 1, 0, 3, 1, 0, 0, 0, 2, 0, 1, 2};  // prefix 12, total 15
  const size_t n = s.size() + c.window;
  const auto h = adakv::profile::profile_head(s.data(), n, c.window + 3, c, RoleThresholds{});
  EXPECT_EQ(h.budget, 7u);
  EXPECT_EQ(h.kept_prefix, 3u);
  EXPECT_NEAR(h.kept_fraction, 3.0 / 12.0, 1e-12);
  // Top 3: 5, 3 and the first 2 (position 8; ties go to the lower position).
  EXPECT_NEAR(h.retained_mass, 10.0 / 15.0, 1e-12);
  EXPECT_EQ(adakv::profile::kept_prefix_positions(s.data(), n, 7, c),
            (std::vector<uint32_t>{0, 3, 8}));
  for (size_t budget = c.window; budget <= n; ++budget) {
    const auto k = adakv::profile::profile_head(s.data(), n, budget, c, RoleThresholds{});
    EXPECT_GE(k.retained_mass + 1e-12, k.kept_fraction) << budget;
  }
  const auto all = adakv::profile::profile_head(s.data(), n, n, c, RoleThresholds{});
  EXPECT_NEAR(all.retained_mass, 1.0, 1e-12);
  EXPECT_EQ(all.kept_prefix, 12u);
}

TEST(HeadProfile, StreamingKeepsTheSinkAndTheRecentTail) {
  auto c = policy(Policy::kStreaming, 8);
  c.sink = 4;
  const size_t n = 100;  // prefix 92
  std::vector<float> s(92, 1.0f);
  // Budget 20: sink 4 + the last 16 tokens, 8 of them in the prefix (84..91).
  const auto kept = adakv::profile::kept_prefix_positions(s.data(), n, 20, c);
  std::vector<uint32_t> want = {0, 1, 2, 3};
  for (uint32_t i = 84; i < 92; ++i) want.push_back(i);
  EXPECT_EQ(kept, want);
  EXPECT_NEAR(adakv::profile::profile_head(s.data(), n, 20, c, {}).retained_mass, 12.0 / 92.0,
              1e-12);
}

TEST(HeadProfile, ProfileHeadsShapesSummaryAndErrors) {
  const auto c = policy(Policy::kAdaKV);
  const size_t prefix = 200, n = prefix + c.window;
  const auto local = local_row(prefix), retrieval = retrieval_row(prefix);
  std::vector<std::vector<float>> scores(2);
  for (auto& layer : scores) {
    layer.insert(layer.end(), local.begin(), local.end());
    layer.insert(layer.end(), retrieval.begin(), retrieval.end());
  }
  const std::vector<std::vector<size_t>> kept = {{40, 60}, {50, 50}};
  const auto p = adakv::profile::profile_heads(scores, kept, n, c);
  EXPECT_EQ(p.layers(), 2u);
  EXPECT_EQ(p.kv_heads(), 2u);
  EXPECT_EQ(p.total_budget(), 200u);
  EXPECT_EQ(p.heads[1][0].budget, 50u);

  const auto j = adakv::profile::to_json(p);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["kv_heads"], 2);
  EXPECT_EQ(j["budgets"][0][1], 60);
  EXPECT_EQ(j["heads"][0][0]["role"], "local");
  EXPECT_GT(j["heads"][0][1]["focus"].get<double>(), 0.9);
  EXPECT_EQ(j["thresholds"]["sink_tokens"], 4);
  EXPECT_EQ(j["heads"][0][1]["role"], "retrieval");
  EXPECT_EQ(j["summary"]["total_budget"], 200);
  EXPECT_EQ(j["summary"]["roles"]["local"], 2);
  EXPECT_EQ(j["summary"]["roles"]["retrieval"], 2);
  EXPECT_EQ(j["summary"]["roles"]["mixed"], 0);
  EXPECT_EQ(j["policy"]["policy"], "adakv");

  EXPECT_THROW(adakv::profile::profile_heads(scores, {{40, 60}}, n, c), std::invalid_argument);
  EXPECT_THROW(adakv::profile::profile_heads(scores, kept, n + 1, c), std::invalid_argument);
  EXPECT_THROW(adakv::profile::profile_heads(scores, kept, c.window, c), std::invalid_argument);
}

// Every opening tag is closed in order (self-closing tags count as both); the text outside
// tags has no raw '<'.
bool tags_balanced(const std::string& xml) {
  std::vector<std::string> open;
  for (size_t i = 0; i < xml.size();) {
    const size_t lt = xml.find('<', i);
    if (lt == std::string::npos) break;
    const size_t gt = xml.find('>', lt);
    if (gt == std::string::npos) return false;
    const std::string tag = xml.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return false;
    if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
    i = gt + 1;
  }
  return open.empty();
}

TEST(SvgHeatmap, WellFormedWithOneRectPerCellPlusBars) {
  adakv::profile::HeatmapFigure f;
  f.title = "profile <test> & more";
  f.notes = {"a note"};
  f.footer = {"a footer"};
  adakv::profile::HeatmapPanel a{"budgets", {}, {}, 0}, b{"mass", {}, {}, 2};
  const size_t rows = 30, cols = 3;
  for (size_t r = 0; r < rows; ++r) {
    a.values.emplace_back();
    a.cell_text.emplace_back();
    b.values.emplace_back();
    for (size_t c = 0; c < cols; ++c) {
      a.values.back().push_back(static_cast<double>(r * cols + c));
      a.cell_text.back().push_back(std::to_string(r) + " R");
      b.values.back().push_back(r == 3 ? std::nan("") : 0.5 + 0.01 * c);
    }
  }
  f.panels = {a, b};
  const std::string svg = adakv::profile::heatmap_svg(f);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "<rect"), 1 + 2 * (rows * cols + 1));
  EXPECT_NE(svg.find("profile &lt;test&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(count(svg, ">29 R<"), cols);
  EXPECT_NE(svg.find("fill=\"#c8c8c8\""), std::string::npos);  // NaN cells are grey
  EXPECT_NE(svg.find(">0.52<"), std::string::npos);            // colour bar max, 2 decimals
}

TEST(SvgHeatmap, RejectsEmptyOrMismatchedPanels) {
  adakv::profile::HeatmapFigure f;
  EXPECT_THROW(adakv::profile::heatmap_svg(f), std::invalid_argument);
  f.panels = {{"a", {{1, 2}}, {}, 0}, {"b", {{1, 2, 3}}, {}, 0}};
  EXPECT_THROW(adakv::profile::heatmap_svg(f), std::invalid_argument);
  f.panels = {{"a", {{1, 2}}, {{"x"}}, 0}};
  EXPECT_THROW(adakv::profile::heatmap_svg(f), std::invalid_argument);
  f.panels = {{"a", {{}}, {}, 0}};
  EXPECT_THROW(adakv::profile::heatmap_svg(f), std::invalid_argument);
}

TEST(SvgHeatmap, ViridisEndsAndClamps) {
  const auto lo = adakv::profile::viridis(0.0), hi = adakv::profile::viridis(1.0);
  EXPECT_EQ(lo.r, 68);
  EXPECT_EQ(lo.b, 84);
  EXPECT_EQ(hi.r, 253);
  EXPECT_EQ(hi.g, 231);
  const auto below = adakv::profile::viridis(-3), above = adakv::profile::viridis(7);
  EXPECT_EQ(below.r, lo.r);
  EXPECT_EQ(above.g, hi.g);
  const auto nan = adakv::profile::viridis(std::nan(""));
  EXPECT_EQ(nan.r, lo.r);
}

}  // namespace
