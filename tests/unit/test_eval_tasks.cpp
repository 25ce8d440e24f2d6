// The retrieval tasks without a model: prompts hit their token length and depth, are
// reproducible from the seed, answers are scored on the numbers written, the grid's runs,
// aggregates and pictures are right. A word-based counter stands in for the tokenizer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/eval/eval_report.h"
#include "runtime/eval/eval_runner.h"
#include "runtime/eval/niah.h"
#include "runtime/eval/passkey.h"
#include "runtime/eval/prompt_builder.h"
#include "runtime/eval/scoring.h"
#include "runtime/eval/svg_plot.h"

namespace {

using namespace adakv::eval;

// A tokenizer-like count: each word costs one token per 4 characters (rounded up), except
// digits, one token each (as the smollm pre-tokenizer splits them).
size_t raw_tokens(const std::string& text) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string w; in >> w;) {
    size_t digits = 0;
    for (char c : w) digits += (c >= '0' && c <= '9');
    n += digits + (w.size() - digits + 3) / 4;
  }
  return n;
}

constexpr size_t kTemplateTokens = 17;  // what a chat template would add
const TokenCounter kCount = [](const std::string& s) { return raw_tokens(s) + kTemplateTokens; };

// The haystack of a sample: between the intro (if any) and the question.
std::string haystack_of(const std::string& user_text, bool has_intro) {
  const size_t begin = has_intro ? user_text.find("\n\n") + 2 : 0;
  const size_t end = user_text.rfind("\n\n");
  return user_text.substr(begin, end - begin);
}

// Where `needle` sits in `hay`, as a fraction of the haystack's tokens without it.
double measured_depth(const std::string& hay, const std::string& needle) {
  const size_t pos = hay.find(needle);
  EXPECT_NE(pos, std::string::npos) << needle;
  if (pos == std::string::npos) return -1;
  const double before = raw_tokens(hay.substr(0, pos));
  const double after = raw_tokens(hay.substr(pos + needle.size()));
  return before / (before + after);
}

std::string passkey_needle(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key.";
}

TEST(Passkey, HitsTheTargetLengthWithinAFewTokens) {
  for (size_t target : {300, 1024, 2048, 4096}) {
    for (double depth : {0.0, 0.3, 1.0}) {
      const Sample s = make_passkey(target, depth, 7, kCount);
      EXPECT_EQ(s.prompt_tokens, kCount(s.user_text));
      EXPECT_LE(s.prompt_tokens, target);
      EXPECT_GE(s.prompt_tokens + 3, target) << "target " << target << " depth " << depth;
    }
  }
}

TEST(Passkey, PlacesTheKeyAtTheRequestedDepth) {
  for (size_t target : {1024, 4096}) {
    for (double depth : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0}) {
      const Sample s = make_passkey(target, depth, 3, kCount);
      const double got = measured_depth(haystack_of(s.user_text, true), passkey_needle(s.answer));
      EXPECT_NEAR(got, depth, 0.02) << "target " << target;
      EXPECT_NEAR(s.depth, depth, 0.02);
    }
  }
  // The ends are exact: first thing of the haystack, last thing before the question.
  const Sample first = make_passkey(1024, 0.0, 3, kCount);
  EXPECT_EQ(haystack_of(first.user_text, true).rfind(passkey_needle(first.answer), 0), 0u);
  const Sample last = make_passkey(1024, 1.0, 3, kCount);
  const std::string hay = haystack_of(last.user_text, true);
  const std::string needle = passkey_needle(last.answer);
  EXPECT_EQ(hay.substr(hay.size() - needle.size()), needle);
}

TEST(Passkey, KeyIsFiveDigitsAndAppearsInTheNeedle) {
  const Sample s = make_passkey(512, 0.5, 11, kCount);
  ASSERT_EQ(s.answer.size(), 5u);
  EXPECT_EQ(extract_numbers(s.answer), std::vector<std::string>{s.answer});
  EXPECT_NE(s.user_text.find(passkey_needle(s.answer)), std::string::npos);
  EXPECT_NE(s.user_text.find("The grass is green."), std::string::npos);
  const std::string question = "What is the pass key? Answer with the number.";
  EXPECT_EQ(s.user_text.substr(s.user_text.size() - question.size()), question);
}

TEST(Passkey, IsDeterministicInTheSeed) {
  const Sample a = make_passkey(800, 0.4, 42, kCount);
  const Sample b = make_passkey(800, 0.4, 42, kCount);
  EXPECT_EQ(a.user_text, b.user_text);
  std::set<std::string> keys;
  for (uint64_t seed = 0; seed < 20; ++seed)
    keys.insert(make_passkey(800, 0.4, seed, kCount).answer);
  EXPECT_GE(keys.size(), 18u);
}

TEST(PromptBuilder, RejectsBadArguments) {
  EXPECT_THROW(make_passkey(20, 0.5, 1, kCount), std::invalid_argument);  // shorter than needle
  EXPECT_THROW(make_passkey(500, 1.5, 1, kCount), std::invalid_argument);
  EXPECT_THROW(make_passkey(500, -0.1, 1, kCount), std::invalid_argument);
  TaskText t{"", "needle 1.", "question?", "1"};
  EXPECT_THROW(build_sample(t, {}, 0, 100, 0.5, kCount), std::invalid_argument);
  EXPECT_THROW(build_sample(t, {" ", ""}, 0, 100, 0.5, kCount), std::invalid_argument);
}

TEST(PromptBuilder, SeedsDifferPerCellAndRepeat) {
  EXPECT_EQ(prompt_seed(1, 1024, 50, 0), prompt_seed(1, 1024, 50, 0));
  std::set<uint64_t> seeds;
  for (size_t len : {1024, 2048}) {
    for (size_t d : {0, 50, 100}) {
      for (size_t t = 0; t < 3; ++t) seeds.insert(prompt_seed(1, len, d, t));
    }
  }
  EXPECT_EQ(seeds.size(), 18u);
  EXPECT_NE(prompt_seed(1, 1024, 50, 0), prompt_seed(2, 1024, 50, 0));
}

class Niah : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("adakv-niah-" + std::to_string(::getpid()) + ".txt"))
                .string();
    std::ofstream out(path_);
    out << "  GENERAL TERMS\n\n"  // a heading: not prose
        << "----------------------------------------\n\n"
        << "The river ran past the old mill, and the\n   miller watched it every morning. "
           "He never asked where it went! Did anyone? Nobody in the village knew.\n\n"
        << "  1. Definitions.\n\n"
        << "A second paragraph tells of the long winter, when snow covered the roads and "
           "the children stayed at home to read.\n";
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(Niah, LoadsTheSentencesOfProseParagraphs) {
  const auto s = load_sentences({path_});
  const std::vector<std::string> want = {
      "The river ran past the old mill, and the miller watched it every morning.",
      "He never asked where it went!", "Did anyone?", "Nobody in the village knew.",
      "A second paragraph tells of the long winter, when snow covered the roads and the "
      "children stayed at home to read."};
  EXPECT_EQ(s, want);
  EXPECT_THROW(load_sentences({path_ + ".missing"}), std::runtime_error);
}

TEST_F(Niah, HitsLengthAndDepthWithAFactAboutACity) {
  const auto sentences = load_sentences({path_});
  for (size_t target : {400, 1500}) {
    for (double depth : {0.0, 0.5, 1.0}) {
      const Sample s = make_niah(sentences, target, depth, 5, kCount);
      EXPECT_LE(s.prompt_tokens, target);
      EXPECT_GE(s.prompt_tokens + 3, target);
      ASSERT_EQ(s.answer.size(), 7u);
      const size_t at = s.user_text.find("The special magic number of ");
      ASSERT_NE(at, std::string::npos);
      const std::string city = s.user_text.substr(at + 28, s.user_text.find(" is ", at) - at - 28);
      EXPECT_NE(s.user_text.find("What is the special magic number of " + city + "?"),
                std::string::npos);
      EXPECT_NE(s.user_text.find(city + " is " + s.answer + "."), std::string::npos);
      // Sentences are ~25 tokens here; the needle goes between two of them.
      const double got =
          measured_depth(haystack_of(s.user_text, false),
                         "The special magic number of " + city + " is " + s.answer + ".");
      EXPECT_NEAR(got, depth, target < 1000 ? 0.05 : 0.03);
    }
  }
  EXPECT_EQ(make_niah(sentences, 600, 0.5, 9, kCount).user_text,
            make_niah(sentences, 600, 0.5, 9, kCount).user_text);
  EXPECT_NE(make_niah(sentences, 600, 0.5, 9, kCount).answer,
            make_niah(sentences, 600, 0.5, 10, kCount).answer);
}

TEST(NiahDefaultHaystack, DebianLicensesGiveEnoughProse) {
  // base-files (essential on Debian) installs /usr/share/common-licenses.
  const auto files = default_haystack_files();
  ASSERT_FALSE(files.empty());
  const auto sentences = load_sentences(files);
  size_t tokens = 0;
  for (const auto& s : sentences) tokens += raw_tokens(s);
  EXPECT_GT(sentences.size(), 500u);
  EXPECT_GT(tokens, 16000u);  // two 8k haystacks without repeating
}

TEST(Scoring, ExtractsNumbersAndMatchesExactly) {
  EXPECT_EQ(extract_numbers("The pass key is 12345. Remember 678."),
            (std::vector<std::string>{"12345", "678"}));
  EXPECT_EQ(extract_numbers("1,234,567 and 89, 10"),
            (std::vector<std::string>{"1234567", "89", "10"}));
  EXPECT_TRUE(extract_numbers("no digits").empty());
  EXPECT_TRUE(is_correct("The pass key is 12345.", "12345"));
  EXPECT_TRUE(is_correct("12345", "12345"));
  EXPECT_TRUE(is_correct("It is 1,234,567!", "1234567"));
  EXPECT_TRUE(is_correct("Maybe 11111 or 12345", "12345"));
  EXPECT_TRUE(is_correct("The pass key is 1234500000", "12345"));  // ran on past the key
  EXPECT_FALSE(is_correct("The pass key is 12355.", "12345"));
  EXPECT_FALSE(is_correct("The pass key is 1235.", "12345"));
  EXPECT_FALSE(is_correct("The pass key is 1234", "12345"));
  EXPECT_FALSE(is_correct("The pass key is 1 2 3 4 5", "12345"));
  EXPECT_FALSE(is_correct("", "12345"));
}

TEST(Runs, FullFirstThenEveryPolicyAtEveryBudget) {
  adakv::compression::CompressionConfig base;
  base.window = 16;
  const auto runs = make_runs(base, {"snapkv", "full", "adakv", "snapkv"}, {"0.1", "20%", "128"});
  ASSERT_EQ(runs.size(), 7u);
  EXPECT_EQ(runs[0].label(), "full @ 100%");
  EXPECT_EQ(runs[0].config.policy, adakv::compression::Policy::kFull);
  EXPECT_EQ(runs[1].label(), "snapkv @ 10%");
  EXPECT_EQ(runs[2].label(), "snapkv @ 20%");
  EXPECT_EQ(runs[3].label(), "snapkv @ 128 tok");
  EXPECT_EQ(runs[3].config.budget_tokens, 128u);
  EXPECT_EQ(runs[6].label(), "adakv @ 128 tok");
  for (const auto& r : runs) EXPECT_EQ(r.config.window, 16u);  // shared knobs
  EXPECT_THROW(make_runs(base, {"adakv"}, {"1.5"}), std::invalid_argument);
  EXPECT_THROW(make_runs(base, {"adakv"}, {"8"}), std::invalid_argument);  // below the window
  EXPECT_THROW(make_runs(base, {"bogus"}, {"0.2"}), std::invalid_argument);
  EXPECT_THROW(make_runs(base, {}, {"0.2"}), std::invalid_argument);
  EXPECT_EQ(make_runs(base, {"full"}, {}).size(), 1u);
}

// Two lengths x two depths x two trials, runs full / snapkv / adakv, outcomes set by hand.
EvalResult hand_made_result() {
  EvalResult r;
  r.spec.lengths = {1024, 2048};
  r.spec.depths = {0, 100};
  r.spec.trials = 2;
  r.spec.runs = make_runs({}, {"snapkv", "adakv"}, {"0.2"});
  for (size_t li = 0; li < 2; ++li) {
    for (size_t di = 0; di < 2; ++di) {
      for (size_t t = 0; t < 2; ++t) {
        TrialRecord rec;
        rec.length_index = li, rec.depth_index = di, rec.trial = t;
        rec.answer = "12345";
        const bool snap = li == 0 && t == 0;  // 2 of 8
        const bool ada = li == 0 || di == 0;  // 6 of 8
        for (bool ok : {true, snap, ada}) {
          TrialRecord::Run run;
          run.correct = ok;
          run.kv_kept = ok ? 1.0 : 0.2;
          rec.runs.push_back(run);
        }
        r.records.push_back(rec);
      }
    }
  }
  return r;
}

TEST(Results, AggregateByRunLengthAndCell) {
  const EvalResult r = hand_made_result();
  EXPECT_DOUBLE_EQ(r.accuracy(0), 1.0);
  EXPECT_DOUBLE_EQ(r.accuracy(1), 0.25);
  EXPECT_DOUBLE_EQ(r.accuracy(2), 0.75);
  EXPECT_DOUBLE_EQ(r.accuracy(1, 0), 0.5);
  EXPECT_DOUBLE_EQ(r.accuracy(1, 1), 0.0);
  EXPECT_DOUBLE_EQ(r.accuracy(2, 1, 0), 1.0);
  EXPECT_DOUBLE_EQ(r.accuracy(2, 1, 1), 0.0);
  EXPECT_DOUBLE_EQ(r.kv_kept(1), (2 * 1.0 + 6 * 0.2) / 8);

  const std::string table = format_summary(r);
  EXPECT_NE(table.find("adakv @ 20%: 75.0% of full; +50.0 points vs snapkv (prompts right with "
                       "only one of them: adakv 4, snapkv 0)"),
            std::string::npos)
      << table;
  EXPECT_NE(format_cells(r).find("adakv @ 20%"), std::string::npos);
  const auto j = to_json(r);
  EXPECT_EQ(j["runs"][2]["accuracy_by_length_depth"][1][1].get<double>(), 0.0);
  EXPECT_EQ(j["records"].size(), 8u);
}

TEST(Results, ReadBackFromJson) {
  EvalResult r = hand_made_result();
  r.spec.runs[2].config.pool_kernel = 31;
  r.spec.runs[2].config.gqa = adakv::compression::GqaAggregation::kMax;
  r.records[1].runs[2].kv_bytes = 4096;
  r.records[1].runs[2].kv_full_bytes = 20480;
  r.records[1].runs[2].budgets_fingerprint = "00ff00ff00ff00ff";
  r.records[1].runs[2].budgets_agree_across_ranks = false;
  const EvalResult back = adakv::eval::from_json(to_json(r));
  EXPECT_EQ(back.records[1].runs[2].kv_bytes, 4096u);
  EXPECT_EQ(back.records[1].runs[2].kv_full_bytes, 20480u);
  EXPECT_EQ(back.records[1].runs[2].budgets_fingerprint, "00ff00ff00ff00ff");
  EXPECT_FALSE(back.records[1].runs[2].budgets_agree_across_ranks);
  EXPECT_TRUE(back.records[0].runs[2].budgets_agree_across_ranks);
  ASSERT_EQ(back.spec.runs.size(), 3u);
  EXPECT_EQ(back.spec.runs[2].label(), "adakv @ 20%");
  EXPECT_EQ(back.spec.runs[2].config.pool_kernel, 31u);
  EXPECT_EQ(back.spec.runs[2].config.gqa, adakv::compression::GqaAggregation::kMax);
  EXPECT_EQ(back.spec.lengths, r.spec.lengths);
  ASSERT_EQ(back.records.size(), r.records.size());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(back.accuracy(i), r.accuracy(i));
    EXPECT_DOUBLE_EQ(back.accuracy(i, 1, 0), r.accuracy(i, 1, 0));
  }
  EXPECT_EQ(format_summary(back), format_summary(r));
  auto j = to_json(r);
  j["records"][3].erase("answer");
  EXPECT_THROW(adakv::eval::from_json(j), std::invalid_argument);
}

// The hand-made grid split by length into two results, merged back: the same accuracies.
TEST(Results, MergeOfSeparateRunsEqualsTheWholeGrid) {
  const EvalResult whole = hand_made_result();
  EvalResult parts[2];
  for (size_t li = 0; li < 2; ++li) {
    parts[li].spec = whole.spec;
    parts[li].spec.lengths = {whole.spec.lengths[1 - li]};  // longer length first
    for (auto rec : whole.records) {
      if (rec.length_index != 1 - li) continue;
      rec.length_index = 0;
      parts[li].records.push_back(rec);
    }
  }
  const EvalResult merged = adakv::eval::merge_results({parts[0], parts[1]});
  EXPECT_EQ(merged.spec.lengths, whole.spec.lengths);
  EXPECT_EQ(merged.spec.trials, 2u);
  for (size_t run = 0; run < 3; ++run) {
    EXPECT_DOUBLE_EQ(merged.accuracy(run), whole.accuracy(run));
    for (size_t li = 0; li < 2; ++li) {
      for (size_t di = 0; di < 2; ++di) {
        EXPECT_DOUBLE_EQ(merged.accuracy(run, li, di), whole.accuracy(run, li, di));
      }
    }
  }
  // The same length twice with the same seed is the same prompts; another seed adds trials.
  EXPECT_THROW(adakv::eval::merge_results({parts[0], parts[0]}), std::invalid_argument);
  EvalResult reseeded = parts[0];
  reseeded.spec.seed = 9;
  EXPECT_EQ(adakv::eval::merge_results({parts[0], reseeded}).spec.trials, 4u);
  // Different scorer settings are different experiments.
  EvalResult other = parts[1];
  other.spec.runs[1].config.pool_kernel = 15;
  EXPECT_THROW(adakv::eval::merge_results({parts[0], other}), std::invalid_argument);
  // So are other door names, which come back from the file as they went.
  EvalResult renamed = parts[1];
  renamed.spec.doors = adakv::eval::DoorNames::kDistinct;
  EXPECT_THROW(adakv::eval::merge_results({parts[0], renamed}), std::invalid_argument);
  EXPECT_EQ(adakv::eval::from_json(to_json(renamed)).spec.doors, renamed.spec.doors);
  auto unnamed = to_json(parts[1]);
  unnamed.erase("doors");  // written before the names could be chosen: the colors
  EXPECT_EQ(adakv::eval::from_json(unnamed).spec.doors, adakv::eval::DoorNames::kColors);
}

TEST(Svg, HeatmapHasACellPerValueAndEscapesText) {
  Heatmap h;
  h.title = "adakv <20%> & co";
  h.x_labels = {"1024", "2048", "4096"};
  h.y_labels = {"0%", "100%"};
  h.values = {{1.0, 0.5, 0.0}, {0.25, std::nan(""), 0.875}};
  const std::string svg = heatmap_svg(h);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  size_t rects = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++rects;
  EXPECT_EQ(rects, 1u + 6u);  // the background, then one per cell
  EXPECT_NE(svg.find("adakv &lt;20%&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find(">88<"), std::string::npos);     // 87.5% rounds to 88
  EXPECT_NE(svg.find("#1a9850"), std::string::npos);  // 100% is green
  EXPECT_NE(svg.find("#d73027"), std::string::npos);  // 0% is red
  h.values.pop_back();
  EXPECT_THROW(heatmap_svg(h), std::invalid_argument);
}

TEST(Svg, BarChartDrawsEveryBarAndTheReference) {
  BarChart c;
  c.title = "passkey";
  c.groups = {"10%", "20%"};
  c.series = {"snapkv", "adakv"};
  c.values = {{0.5, 0.75}, {0.625, std::nan("")}};
  c.reference = 0.9;
  c.reference_label = "full cache";
  const std::string svg = bar_chart_svg(c);
  size_t rects = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++rects;
  EXPECT_EQ(rects, 1u + 3u + 2u);  // background, three bars, two legend swatches
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find("full cache"), std::string::npos);
  c.values.pop_back();
  EXPECT_THROW(bar_chart_svg(c), std::invalid_argument);
}

}  // namespace
