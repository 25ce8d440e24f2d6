#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/compression/config.h"
#include "runtime/compression/model_presets.h"

using namespace adakv::compression;

namespace {

const std::string kPresetDir = std::string(ADAKV_TEST_DATA_DIR) + "/../../configs/compression/";

// The message of the std::invalid_argument that f throws ("" and a test failure if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument thrown";
  return "";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "adakv_compression_" + name + ".yaml";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(CompressionConfig, DefaultsFollowTheOfficialCode) {
  const CompressionConfig c;
  EXPECT_EQ(c.policy, Policy::kAdaKV);
  EXPECT_EQ(c.window, 32u);
  EXPECT_EQ(c.pooling, Pooling::kMax);
  EXPECT_EQ(c.pool_kernel, 7u);
  EXPECT_EQ(c.pool_sink, 0u);  // the official code pools every position
  EXPECT_EQ(c.gqa, GqaAggregation::kMean);
  EXPECT_EQ(c.budget_scores, BudgetScores::kSum);  // the budgets read the selection's scores
  EXPECT_DOUBLE_EQ(c.alpha, 0.2);
  EXPECT_EQ(c.rule, Rule::kTopK);
  EXPECT_EQ(c.min_keep, 0u);  // no floor: the library and the eval grids stay official
  EXPECT_NO_THROW(c.validate());
  EXPECT_NO_THROW(c.validate(1000));
  // adakv generate's own defaults add the floor.
  EXPECT_EQ(kGenerateMinKeep, 512u);
  EXPECT_EQ(generate_builtin_defaults().min_keep, kGenerateMinKeep);
  EXPECT_EQ(generate_builtin_defaults().policy, Policy::kAdaKV);
}

TEST(CompressionConfig, BudgetPerHead) {
  CompressionConfig c;  // ratio 0.2, window 32
  EXPECT_EQ(c.budget_per_head(1000), 200u);
  EXPECT_EQ(c.budget_per_head(100), 32u);  // 20 is below the window
  EXPECT_EQ(c.budget_per_head(10), 10u);   // min(window, n)
  EXPECT_EQ(c.budget_per_head(0), 0u);
  c.budget_ratio = 0.25;
  EXPECT_EQ(c.budget_per_head(130), 33u);  // round(32.5)
  c.budget_ratio = 1.0;
  EXPECT_EQ(c.budget_per_head(77), 77u);
  c.budget_tokens = 128;
  EXPECT_EQ(c.budget_per_head(1000), 128u);
  EXPECT_EQ(c.budget_per_head(100), 100u);
}

TEST(CompressionConfig, KeepsEverything) {
  CompressionConfig c;
  EXPECT_FALSE(c.keeps_everything(1000));
  EXPECT_TRUE(c.keeps_everything(20));  // the window alone covers the prompt
  c.budget_tokens = 128;
  EXPECT_TRUE(c.keeps_everything(128));
  EXPECT_FALSE(c.keeps_everything(129));
  c.policy = Policy::kFull;
  EXPECT_TRUE(c.keeps_everything(100000));
}

// The issue's prompt: 37 chat tokens at 20% kept only the 32-token window in every head.
TEST(CompressionConfig, MinKeepKeepsShortPromptsWhole) {
  CompressionConfig c;  // ratio 0.2, window 32
  EXPECT_EQ(c.budget_per_head(37), 32u);
  EXPECT_FALSE(c.keeps_everything(37));
  c.min_keep = 512;
  for (size_t n : {1, 5, 32, 33, 37, 94, 134, 300, 511, 512}) {
    EXPECT_EQ(c.budget_per_head(n), n) << n;
    EXPECT_TRUE(c.keeps_everything(n)) << n;
  }
  EXPECT_EQ(c.budget_per_head(0), 0u);
  // Longer prompts keep at least the floor, and the ratio once it is larger.
  EXPECT_EQ(c.budget_per_head(513), 512u);
  EXPECT_FALSE(c.keeps_everything(513));
  EXPECT_EQ(c.budget_per_head(1000), 512u);  // 20% would be 200
  EXPECT_EQ(c.budget_per_head(2560), 512u);  // 20% is exactly the floor
  EXPECT_EQ(c.budget_per_head(4000), 800u);
  c.budget_ratio = 0.6;
  EXPECT_EQ(c.budget_per_head(1000), 600u);
  // A token budget is floored the same way.
  c.budget_tokens = 128;
  EXPECT_EQ(c.budget_per_head(400), 400u);
  EXPECT_TRUE(c.keeps_everything(400));
  EXPECT_EQ(c.budget_per_head(1000), 512u);
  c.budget_tokens = 700;
  EXPECT_EQ(c.budget_per_head(1000), 700u);
  // Never more than the prompt, whatever the floor.
  c.min_keep = 100000;
  EXPECT_EQ(c.budget_per_head(8000), 8000u);
  EXPECT_TRUE(c.keeps_everything(8000));
  // 0: no floor, the official behaviour.
  c = CompressionConfig{};
  c.min_keep = 0;
  EXPECT_EQ(c.budget_per_head(37), 32u);
  EXPECT_EQ(c.budget_per_head(1000), 200u);
  // Policy full keeps everything with or without it; streaming is floored like the others.
  c.policy = Policy::kFull;
  EXPECT_TRUE(c.keeps_everything(100000));
  c.policy = Policy::kStreaming;
  c.min_keep = 64;
  EXPECT_EQ(c.budget_per_head(100), 64u);
  EXPECT_NO_THROW(c.validate(100));
}

TEST(CompressionConfig, MinKeepOnlyChangesTheBudget) {
  CompressionConfig a, b;
  b.min_keep = 512;
  EXPECT_TRUE(a.same_scoring(b));  // one recording serves a floored and an unfloored copy
  EXPECT_NO_THROW(b.validate());
  EXPECT_NO_THROW(b.validate(40));
}

TEST(CompressionConfig, DescribeNamesTheSettingsInForce) {
  CompressionConfig c;
  c.min_keep = 512;
  std::string d = describe(c);
  for (const char* want : {"policy adakv", "budget 20%", "min_keep 512", "window 32",
                           "pooling maxpool 7", "gqa mean", "lookahead 0", "scope layer"}) {
    EXPECT_NE(d.find(want), std::string::npos) << want << " in " << d;
  }
  c.budget_tokens = 128;
  c.pool_sink = 4;
  c.pool_shift = 3;
  d = describe(c);
  EXPECT_NE(d.find("budget 128 tokens/head"), std::string::npos) << d;
  EXPECT_NE(d.find("(sink 4, shift 3)"), std::string::npos) << d;
  c.policy = Policy::kFull;
  EXPECT_EQ(describe(c), "policy full (nothing evicted)");
}

// Scores recorded once serve any policy and budget, but not another scorer.
TEST(CompressionConfig, SameScoringIgnoresPolicyAndBudgetOnly) {
  const CompressionConfig base;
  CompressionConfig other = base;
  other.policy = Policy::kSnapKV;
  other.budget_ratio = 0.5;
  other.alpha = 0.7;
  EXPECT_TRUE(base.same_scoring(other));
  const std::vector<void (*)(CompressionConfig&)> scorer_changes = {
      [](CompressionConfig& c) { c.window = 16; },
      [](CompressionConfig& c) { c.pooling = Pooling::kAvg; },
      [](CompressionConfig& c) { c.pool_kernel = 9; },
      [](CompressionConfig& c) { c.pool_sink = 4; },
      [](CompressionConfig& c) { c.pool_shift = 2; },
      [](CompressionConfig& c) { c.gqa = GqaAggregation::kMax; },
      [](CompressionConfig& c) { c.lookahead = 8; },
      [](CompressionConfig& c) { c.budget_scores = BudgetScores::kPeak; },
  };
  for (size_t i = 0; i < scorer_changes.size(); ++i) {
    CompressionConfig changed = base;
    scorer_changes[i](changed);
    EXPECT_FALSE(base.same_scoring(changed)) << "change " << i;
  }
}

TEST(CompressionConfig, EveryBadValueNamesItsField) {
  struct Case {
    std::function<void(CompressionConfig&)> set;
    std::vector<std::string> words;  // the field and the value
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.budget_ratio = -0.1; }, {"budget", "-0.1"}},
      {[](auto& c) { c.budget_ratio = 0.0; }, {"budget", "0"}},
      {[](auto& c) { c.budget_ratio = 1.5; }, {"budget", "1.5"}},
      {[](auto& c) { c.alpha = -0.5; }, {"alpha", "-0.5"}},
      {[](auto& c) { c.alpha = 1.01; }, {"alpha", "1.01"}},
      {[](auto& c) { c.pool_kernel = 0; }, {"pool_kernel", "0"}},
      {[](auto& c) { c.pool_kernel = 6; }, {"pool_kernel", "6"}},
      {[](auto& c) { c.delta = 0; }, {"delta", "0"}},
      {[](auto& c) { c.pyramid_beta = 0.0; }, {"pyramid_beta", "0"}},
      {[](auto& c) { c.pyramid_beta = -2.0; }, {"pyramid_beta", "-2"}},
      {[](auto& c) { c.window = 0; }, {"window", "0"}},
      {[](auto& c) { c.pool_shift = 4; }, {"pool_shift", "4", "3"}},  // kernel 7: at most 3
      {[](auto& c) { c.lookahead = 257; }, {"lookahead", "257", "256"}},
      {[](auto& c) { c.lookahead_weight = 0.0; }, {"lookahead_weight", "0"}},
      {[](auto& c) { c.lookahead_weight = -2.0; }, {"lookahead_weight", "-2"}},
      {[](auto& c) { c.lookahead_weight = std::nan(""); }, {"lookahead_weight", "nan"}},
      {[](auto& c) { c.budget_tokens = 16; }, {"budget", "16", "window", "32"}},
      {[](auto& c) {
         c.policy = Policy::kStreaming;
         c.budget_tokens = 40;
         c.sink = 40;
       },
       {"sink", "40"}},
  };
  for (const Case& k : cases) {
    CompressionConfig c;
    k.set(c);
    const std::string msg = error_of([&] { c.validate(); });
    for (const std::string& w : k.words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
  }
}

TEST(CompressionConfig, PromptMustBeLongerThanTheWindowUnlessFull) {
  CompressionConfig c;
  const std::string msg = error_of([&] { c.validate(20); });
  EXPECT_NE(msg.find("window 32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20"), std::string::npos) << msg;
  EXPECT_THROW(c.validate(32), std::invalid_argument);
  EXPECT_NO_THROW(c.validate(33));
  c.policy = Policy::kFull;
  EXPECT_NO_THROW(c.validate(20));
  c.budget_tokens = 8;  // irrelevant when nothing is compressed
  EXPECT_NO_THROW(c.validate(20));
}

TEST(CompressionConfig, NamesRoundTripAndIgnoreCase) {
  for (Policy p : {Policy::kFull, Policy::kStreaming, Policy::kSnapKV, Policy::kPyramidKV,
                   Policy::kAdaKV, Policy::kAdaPyramid}) {
    EXPECT_EQ(parse_policy(to_string(p)), p);
  }
  EXPECT_STREQ(to_string(Policy::kAdaPyramid), "ada-pyramid");
  EXPECT_EQ(parse_policy("AdaKV"), Policy::kAdaKV);
  for (Scope s : {Scope::kLayer, Scope::kGlobal}) EXPECT_EQ(parse_scope(to_string(s)), s);
  for (Rule r : {Rule::kTopK, Rule::kWaterfill}) EXPECT_EQ(parse_rule(to_string(r)), r);
  for (Pooling p : {Pooling::kMax, Pooling::kAvg}) EXPECT_EQ(parse_pooling(to_string(p)), p);
  EXPECT_STREQ(to_string(Pooling::kAvg), "avgpool");
  EXPECT_EQ(parse_pooling("max"), Pooling::kMax);
  EXPECT_EQ(parse_pooling("avg"), Pooling::kAvg);
  for (GqaAggregation g : {GqaAggregation::kMean, GqaAggregation::kMax}) {
    EXPECT_EQ(parse_gqa(to_string(g)), g);
  }
  for (BudgetScores b : {BudgetScores::kSum, BudgetScores::kPeak}) {
    EXPECT_EQ(parse_budget_scores(to_string(b)), b);
  }
}

// A compressed context is allocated by context_policy, or by the policy under "policy"; a
// policy that keeps everything keeps the context whole too.
TEST(CompressionConfig, ContextPolicyNamesTheContextsAllocation) {
  for (ContextPolicy p :
       {ContextPolicy::kAsPolicy, ContextPolicy::kSnapKV, ContextPolicy::kPyramidKV,
        ContextPolicy::kAdaKV, ContextPolicy::kAdaPyramid}) {
    EXPECT_EQ(parse_context_policy(to_string(p)), p);
  }
  EXPECT_EQ(parse_context_policy("Ada-Pyramid"), ContextPolicy::kAdaPyramid);
  const std::string msg = error_of([] { parse_context_policy("streaming"); });
  EXPECT_NE(msg.find("context policy \"streaming\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("policy|snapkv|pyramidkv|adakv|ada-pyramid"), std::string::npos) << msg;

  CompressionConfig c;
  EXPECT_EQ(c.context_policy, ContextPolicy::kAsPolicy);
  EXPECT_EQ(c.context_allocation(), Policy::kAdaKV);
  c.policy = Policy::kSnapKV;
  EXPECT_EQ(c.context_allocation(), Policy::kSnapKV);
  EXPECT_EQ(describe(c).find("context_policy"), std::string::npos) << describe(c);
  c.context_policy = ContextPolicy::kAdaPyramid;
  EXPECT_EQ(c.context_allocation(), Policy::kAdaPyramid);
  EXPECT_NE(describe(c).find("context_policy ada-pyramid"), std::string::npos) << describe(c);
  c.context_policy = ContextPolicy::kPyramidKV;
  EXPECT_EQ(c.context_allocation(), Policy::kPyramidKV);
  c.policy = Policy::kFull;
  EXPECT_EQ(c.context_allocation(), Policy::kFull);
}

TEST(CompressionConfig, UnknownNamesListTheAcceptedOnes) {
  std::string msg = error_of([] { parse_policy("h2o"); });
  EXPECT_NE(msg.find("h2o"), std::string::npos) << msg;
  EXPECT_NE(msg.find("full|streaming|snapkv|pyramidkv|adakv|ada-pyramid"), std::string::npos);
  msg = error_of([] { parse_scope("head"); });
  EXPECT_NE(msg.find("layer|global"), std::string::npos) << msg;
  msg = error_of([] { parse_rule("greedy"); });
  EXPECT_NE(msg.find("topk|waterfill"), std::string::npos) << msg;
  msg = error_of([] { parse_pooling("min"); });
  EXPECT_NE(msg.find("maxpool|avgpool"), std::string::npos) << msg;
  msg = error_of([] { parse_gqa("sum"); });
  EXPECT_NE(msg.find("mean|max"), std::string::npos) << msg;
  msg = error_of([] { parse_budget_scores("max"); });
  EXPECT_NE(msg.find("budget_scores"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sum|peak"), std::string::npos) << msg;
}

TEST(CompressionConfig, ParseBudgetAcceptsRatiosPercentAndTokens) {
  CompressionConfig c;
  parse_budget("0.2", c);
  EXPECT_DOUBLE_EQ(c.budget_ratio, 0.2);
  EXPECT_EQ(c.budget_tokens, 0u);
  parse_budget("128", c);
  EXPECT_EQ(c.budget_tokens, 128u);
  parse_budget("20%", c);  // a ratio again: the token count is cleared
  EXPECT_DOUBLE_EQ(c.budget_ratio, 0.2);
  EXPECT_EQ(c.budget_tokens, 0u);
  parse_budget("1.0", c);
  EXPECT_DOUBLE_EQ(c.budget_ratio, 1.0);
  parse_budget("100%", c);
  EXPECT_DOUBLE_EQ(c.budget_ratio, 1.0);
  parse_budget(" 64 ", c);
  EXPECT_EQ(c.budget_tokens, 64u);
}

TEST(CompressionConfig, ParseBudgetRejectsNonsense) {
  for (const std::string bad : {"-1", "0", "abc", "1.5", "", "0.0", "150%", "%", "-5%", "nan",
                                "inf", "0x10", "12abc", "99999999999999999999999"}) {
    CompressionConfig c;
    const std::string msg = error_of([&] { parse_budget(bad, c); });
    EXPECT_NE(msg.find("budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"" + bad + "\""), std::string::npos) << msg;
    EXPECT_EQ(c.budget_tokens, 0u) << "a rejected budget must not change the config";
    EXPECT_DOUBLE_EQ(c.budget_ratio, 0.2);
  }
}

TEST(CompressionPreset, RepositoryPresetsLoad) {
  const CompressionConfig d = load_preset(kPresetDir + "default.yaml");
  const CompressionConfig ref;
  EXPECT_EQ(d.policy, ref.policy);
  EXPECT_DOUBLE_EQ(d.budget_ratio, ref.budget_ratio);
  EXPECT_EQ(d.budget_tokens, ref.budget_tokens);
  EXPECT_EQ(d.window, ref.window);
  EXPECT_DOUBLE_EQ(d.alpha, ref.alpha);
  EXPECT_EQ(d.pooling, ref.pooling);
  EXPECT_EQ(d.pool_kernel, ref.pool_kernel);
  EXPECT_EQ(d.pool_sink, ref.pool_sink);
  EXPECT_EQ(d.pool_shift, ref.pool_shift);
  EXPECT_DOUBLE_EQ(d.lookahead_weight, ref.lookahead_weight);
  EXPECT_EQ(d.gqa, ref.gqa);
  EXPECT_EQ(d.scope, ref.scope);
  EXPECT_EQ(d.rule, ref.rule);
  EXPECT_EQ(d.delta, ref.delta);
  EXPECT_EQ(d.b_min, ref.b_min);
  EXPECT_DOUBLE_EQ(d.pyramid_beta, ref.pyramid_beta);
  EXPECT_EQ(d.sink, ref.sink);
  EXPECT_EQ(d.min_keep, 0u);  // the official settings: no floor

  EXPECT_EQ(load_preset(kPresetDir + "ada-pyramid.yaml").policy, Policy::kAdaPyramid);
  const CompressionConfig s = load_preset(kPresetDir + "snapkv.yaml");
  EXPECT_EQ(s.policy, Policy::kSnapKV);
  EXPECT_EQ(s.budget_tokens, 128u);

  // The default model's preset: the official allocation, a span scorer with the sink apart,
  // look-ahead queries, budgets sized from the peak attention.
  const CompressionConfig m = load_preset(kPresetDir + "smollm2-135m.yaml");
  EXPECT_EQ(m.policy, Policy::kAdaKV);
  EXPECT_DOUBLE_EQ(m.alpha, ref.alpha);
  EXPECT_EQ(m.rule, ref.rule);
  EXPECT_EQ(m.scope, ref.scope);
  EXPECT_EQ(m.pooling, Pooling::kAvg);
  EXPECT_EQ(m.pool_kernel, 21u);
  EXPECT_EQ(m.pool_sink, 4u);
  EXPECT_EQ(m.pool_shift, 3u);
  EXPECT_EQ(m.gqa, GqaAggregation::kMax);
  EXPECT_EQ(m.lookahead, 16u);
  EXPECT_EQ(ref.lookahead, 0u);  // off in the official settings
  EXPECT_EQ(m.budget_scores, BudgetScores::kPeak);
  EXPECT_EQ(ref.budget_scores, BudgetScores::kSum);
  // The floor is the command's (generate 512, eval 0), not the preset's: eval --preset
  // smollm2-135m.yaml reproduces the published grids.
  EXPECT_EQ(m.min_keep, 0u);
  EXPECT_EQ(load_preset(kPresetDir + "smollm2-135m.yaml", generate_builtin_defaults()).min_keep,
            kGenerateMinKeep);

  // Qwen2.5-Coder-0.5B's: the official settings, but its compressed contexts under Ada-Pyramid.
  CompressionConfig official = ref;
  CompressionConfig q = load_preset(kPresetDir + "qwen2.5-coder-0.5b.yaml");
  EXPECT_EQ(q.context_policy, ContextPolicy::kAdaPyramid);
  q.context_policy = official.context_policy;
  EXPECT_EQ(q, official);
}

TEST(CompressionPreset, MinKeepKey) {
  EXPECT_EQ(load_preset(write_temp("minkeep", "min_keep: 256\n")).min_keep, 256u);
  CompressionConfig defaults;
  defaults.min_keep = 512;
  defaults.window = 16;
  // Absent keys keep the caller's defaults; present ones replace them, 0 included.
  const CompressionConfig kept = load_preset(write_temp("nominkeep", "budget: 0.1\n"), defaults);
  EXPECT_EQ(kept.min_keep, 512u);
  EXPECT_EQ(kept.window, 16u);
  EXPECT_DOUBLE_EQ(kept.budget_ratio, 0.1);
  EXPECT_EQ(load_preset(write_temp("minkeep0", "min_keep: 0\n"), defaults).min_keep, 0u);
  EXPECT_EQ(load_preset(write_temp("minkeepempty", ""), defaults).min_keep, 512u);
  for (const std::string bad : {"-1", "1.5", "lots", "20%", "0x10", "99999999999999999999999"}) {
    const std::string path = write_temp("badminkeep", "min_keep: " + bad + "\n");
    const std::string msg = error_of([&] { load_preset(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("min_keep"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"" + bad + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("non-negative integer"), std::string::npos) << msg;
  }
}

TEST(ModelPreset, NamesFromMetadataThenTheFileName) {
  // The default model: general.basename "smollm2", general.size_label "135M".
  EXPECT_EQ(model_preset_names("smollm2", "135M", "/m/SmolLM2-135M-Instruct.Q4_1.gguf"),
            (std::vector<std::string>{"smollm2-135m", "smollm2", "smollm2-135m-instruct"}));
  // Without metadata the file name alone finds the same preset.
  EXPECT_EQ(model_preset_names("", "", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            (std::vector<std::string>{"smollm2-135m-instruct", "smollm2-135m", "smollm2"}));
  EXPECT_EQ(model_preset_names("", "", "/x/Llama-3.2-1B.Q4_K_M.gguf"),
            (std::vector<std::string>{"llama-3.2-1b", "llama-3.2", "llama"}));
  EXPECT_EQ(model_preset_names("", "", "/x/tiny.F16.gguf"), (std::vector<std::string>{"tiny"}));
  EXPECT_EQ(model_preset_names("My Model/v2", "", "/x/../m.gguf"),
            (std::vector<std::string>{"my-model-v2", "m"}));
  EXPECT_EQ(model_preset_names("", "", "/x/.hidden"), (std::vector<std::string>{"hidden"}));
}

TEST(ModelPreset, ConfigFoldersAndLookup) {
  EXPECT_EQ(config_dirs("/env/configs", "/opt/a/build/adakv", "/src/configs"),
            (std::vector<std::string>{"/env/configs"}));
  EXPECT_EQ(
      config_dirs("", "/opt/a/build/adakv", "/src/configs"),
      (std::vector<std::string>{"/opt/a/configs", "/opt/a/share/adakv/configs", "/src/configs"}));
  EXPECT_EQ(config_dirs(nullptr, "/opt/a/build/adakv", "/opt/a/configs/"),
            (std::vector<std::string>{"/opt/a/configs", "/opt/a/share/adakv/configs"}));

  namespace fs = std::filesystem;
  const fs::path root = fs::path(testing::TempDir()) / "adakv_model_presets";
  fs::remove_all(root);
  fs::create_directories(root / "one" / "compression");
  fs::create_directories(root / "two" / "compression");
  std::ofstream(root / "one" / "compression" / "b.yaml") << "budget: 0.3\n";
  std::ofstream(root / "two" / "compression" / "a.yaml") << "budget: 0.4\n";
  const std::vector<std::string> dirs = {(root / "none").string(), (root / "one").string(),
                                         (root / "two").string()};
  // Every name in a folder before the next folder.
  auto m = find_preset({"a", "b"}, dirs);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->name, "b");
  EXPECT_EQ(m->path, (root / "one" / "compression" / "b.yaml").string());
  EXPECT_FALSE(find_preset({"c"}, dirs).has_value());

  const ModelDefaults found = model_defaults({"c", "a"}, dirs);
  EXPECT_DOUBLE_EQ(found.config.budget_ratio, 0.4);
  EXPECT_EQ(found.config.min_keep, kGenerateMinKeep);  // the preset leaves it out
  EXPECT_NE(found.source.find("a.yaml"), std::string::npos) << found.source;
  const ModelDefaults none = model_defaults({"c"}, dirs);
  EXPECT_DOUBLE_EQ(none.config.budget_ratio, 0.2);
  EXPECT_EQ(none.config.min_keep, kGenerateMinKeep);
  EXPECT_NE(none.source.find("built-in defaults"), std::string::npos) << none.source;
  EXPECT_NE(none.source.find("c.yaml"), std::string::npos) << none.source;
  // A preset with an error is an error, not a silent fallback.
  std::ofstream(root / "two" / "compression" / "bad.yaml") << "min_keep: -3\n";
  EXPECT_THROW(model_defaults({"bad"}, dirs), std::invalid_argument);
  fs::remove_all(root);
}

TEST(ModelPreset, TheDefaultModelFindsItsRepositoryPreset) {
  const std::string configs = kPresetDir + "..";
  const ModelDefaults d = model_defaults(
      model_preset_names("smollm2", "135M", "SmolLM2-135M-Instruct.Q4_1.gguf"), {configs});
  const CompressionConfig m = load_preset(kPresetDir + "smollm2-135m.yaml");
  EXPECT_TRUE(d.config.same_scoring(m));
  EXPECT_EQ(d.config.lookahead, 16u);
  EXPECT_EQ(d.config.min_keep, kGenerateMinKeep);
  EXPECT_NE(d.source.find("smollm2-135m.yaml"), std::string::npos) << d.source;
}

TEST(ModelPreset, QwenCoderFindsItsRepositoryPreset) {
  const ModelDefaults d = model_defaults(
      model_preset_names("Qwen2.5-Coder", "0.5B", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"),
      {kPresetDir + ".."});
  EXPECT_EQ(d.config.context_policy, ContextPolicy::kAdaPyramid);
  EXPECT_EQ(d.config.policy, Policy::kAdaKV);
  EXPECT_EQ(d.config.min_keep, kGenerateMinKeep);
  EXPECT_NE(d.source.find("qwen2.5-coder-0.5b.yaml"), std::string::npos) << d.source;
}

TEST(CompressionPreset, ValuesOfEveryKindParse) {
  const std::string path = write_temp("kinds", R"(policy: PyramidKV
budget: "25%"
window: 16
alpha: 0.5
pooling: avg
pool_kernel: 5
pool_sink: 3
pool_shift: 2
gqa: max
lookahead: 12
lookahead_weight: 2.5
budget_scores: peak
scope: global
rule: waterfill
delta: 8
b_min: 0
pyramid_beta: 4.5
sink: 2
context_policy: snapkv
)");
  const CompressionConfig c = load_preset(path);
  EXPECT_EQ(c.policy, Policy::kPyramidKV);
  EXPECT_DOUBLE_EQ(c.budget_ratio, 0.25);
  EXPECT_EQ(c.window, 16u);
  EXPECT_DOUBLE_EQ(c.alpha, 0.5);
  EXPECT_EQ(c.pooling, Pooling::kAvg);
  EXPECT_EQ(c.pool_kernel, 5u);
  EXPECT_EQ(c.pool_sink, 3u);
  EXPECT_EQ(c.pool_shift, 2u);
  EXPECT_EQ(c.gqa, GqaAggregation::kMax);
  EXPECT_EQ(c.lookahead, 12u);
  EXPECT_DOUBLE_EQ(c.lookahead_weight, 2.5);
  EXPECT_EQ(c.budget_scores, BudgetScores::kPeak);
  EXPECT_EQ(c.scope, Scope::kGlobal);
  EXPECT_EQ(c.rule, Rule::kWaterfill);
  EXPECT_EQ(c.delta, 8u);
  EXPECT_EQ(c.b_min, 0u);
  EXPECT_DOUBLE_EQ(c.pyramid_beta, 4.5);
  EXPECT_EQ(c.sink, 2u);
  EXPECT_EQ(c.context_policy, ContextPolicy::kSnapKV);
  EXPECT_EQ(load_preset(write_temp("empty", "# nothing\n")).policy, Policy::kAdaKV);
}

TEST(CompressionPreset, BadFilesNameTheFileAndKey) {
  struct Case {
    std::string name, text;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"unknown", "policy: adakv\nwindw: 32\n", {"unknown key", "windw", "window"}},
      {"wrongtype", "alpha: high\n", {"alpha", "high"}},
      {"negative", "window: -4\n", {"window", "-4"}},
      {"fraction", "delta: 1.5\n", {"delta", "1.5"}},
      {"mapvalue", "window:\n  size: 32\n", {"window"}},
      {"list", "budget: [1, 2]\n", {"budget"}},
      {"novalue", "alpha:\n", {"alpha"}},
      {"range", "alpha: 2\n", {"alpha", "2"}},
      {"weight", "lookahead_weight: 0\n", {"lookahead_weight", "0"}},
      {"even", "pool_kernel: 4\n", {"pool_kernel", "4"}},
      {"shift", "pool_kernel: 5\npool_shift: 3\n", {"pool_shift", "3", "2"}},
      {"badname", "rule: greedy\n", {"rule", "greedy", "topk|waterfill"}},
      {"budget", "budget: 1.5\n", {"budget", "1.5"}},
      {"toosmall", "budget: 16\n", {"budget", "16", "window"}},
      {"duplicate", "alpha: 0.1\nalpha: 0.3\n", {"duplicate", "alpha"}},
      {"syntax", "policy: [adakv\n", {"YAML"}},
      {"scalar", "adakv\n", {"mapping"}},
  };
  for (const Case& k : cases) {
    const std::string path = write_temp(k.name, k.text);
    const std::string msg = error_of([&] { load_preset(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << k.name << ": " << msg;
    for (const std::string& w : k.words) {
      EXPECT_NE(msg.find(w), std::string::npos) << k.name << ": " << msg;
    }
  }
  const std::string missing = testing::TempDir() + "adakv_no_such_preset.yaml";
  const std::string msg = error_of([&] { load_preset(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
}
