#include "runtime/compression/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace adakv::compression {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// Strict parses: the whole string must be the number, nothing else.
bool parse_unsigned(const std::string& s, size_t& out) {
  if (s.empty() ||
      !std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; })) {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno == ERANGE || v > std::numeric_limits<size_t>::max()) return false;
  out = static_cast<size_t>(v);
  return true;
}

bool parse_real(const std::string& s, double& out) {
  // Digits, sign, dot and exponent only: rejects strtod's "inf", "nan" and hex forms.
  if (s.empty() || s.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
  out = v;
  return true;
}

template <typename E, size_t N>
E parse_name(const std::string& s, const char* what, const std::pair<const char*, E> (&names)[N]) {
  const std::string key = lower(trim(s));
  std::string accepted;
  for (const auto& [name, value] : names) {
    if (key == name) return value;
    accepted += accepted.empty() ? name : std::string("|") + name;
  }
  throw std::invalid_argument(std::string("unknown ") + what + " \"" + s + "\" (expected " +
                              accepted + ")");
}

constexpr std::pair<const char*, Policy> kPolicies[] = {
    {"full", Policy::kFull},     {"streaming", Policy::kStreaming},
    {"snapkv", Policy::kSnapKV}, {"pyramidkv", Policy::kPyramidKV},
    {"adakv", Policy::kAdaKV},   {"ada-pyramid", Policy::kAdaPyramid}};
constexpr std::pair<const char*, Scope> kScopes[] = {{"layer", Scope::kLayer},
                                                     {"global", Scope::kGlobal}};
constexpr std::pair<const char*, Rule> kRules[] = {{"topk", Rule::kTopK},
                                                   {"waterfill", Rule::kWaterfill}};
constexpr std::pair<const char*, Pooling> kPoolings[] = {{"maxpool", Pooling::kMax},
                                                         {"avgpool", Pooling::kAvg},
                                                         {"max", Pooling::kMax},
                                                         {"avg", Pooling::kAvg}};
constexpr std::pair<const char*, GqaAggregation> kGqa[] = {{"mean", GqaAggregation::kMean},
                                                           {"max", GqaAggregation::kMax}};
constexpr std::pair<const char*, BudgetScores> kBudgetScores[] = {{"sum", BudgetScores::kSum},
                                                                  {"peak", BudgetScores::kPeak}};
constexpr std::pair<const char*, Scoring> kScorings[] = {{"window", Scoring::kWindow},
                                                         {"output-aware", Scoring::kOutputAware},
                                                         {"reconstruct", Scoring::kReconstruct}};
constexpr std::pair<const char*, ReconstructKeys> kReconstructKeys[] = {
    {"context", ReconstructKeys::kContext}, {"piece", ReconstructKeys::kPiece}};
constexpr std::pair<const char*, ContextPolicy> kContextPolicies[] = {
    {"policy", ContextPolicy::kAsPolicy},
    {"snapkv", ContextPolicy::kSnapKV},
    {"pyramidkv", ContextPolicy::kPyramidKV},
    {"adakv", ContextPolicy::kAdaKV},
    {"ada-pyramid", ContextPolicy::kAdaPyramid}};

template <typename E, size_t N>
const char* name_of(E e, const std::pair<const char*, E> (&names)[N]) {
  for (const auto& [name, value] : names) {
    if (value == e) return name;
  }
  return "?";
}

}  // namespace

const char* to_string(Policy p) {
  return name_of(p, kPolicies);
}
const char* to_string(Scope s) {
  return name_of(s, kScopes);
}
const char* to_string(Rule r) {
  return name_of(r, kRules);
}
const char* to_string(Pooling p) {
  return name_of(p, kPoolings);
}
const char* to_string(GqaAggregation g) {
  return name_of(g, kGqa);
}
const char* to_string(BudgetScores b) {
  return name_of(b, kBudgetScores);
}
const char* to_string(Scoring s) {
  return name_of(s, kScorings);
}
const char* to_string(ContextPolicy p) {
  return name_of(p, kContextPolicies);
}
const char* to_string(ReconstructKeys k) {
  return name_of(k, kReconstructKeys);
}

Policy parse_policy(const std::string& s) {
  return parse_name(s, "policy", kPolicies);
}
Scope parse_scope(const std::string& s) {
  return parse_name(s, "scope", kScopes);
}
Rule parse_rule(const std::string& s) {
  return parse_name(s, "rule", kRules);
}
Pooling parse_pooling(const std::string& s) {
  return parse_name(s, "pooling", kPoolings);
}
GqaAggregation parse_gqa(const std::string& s) {
  return parse_name(s, "gqa", kGqa);
}
BudgetScores parse_budget_scores(const std::string& s) {
  return parse_name(s, "budget_scores", kBudgetScores);
}
Scoring parse_scoring(const std::string& s) {
  return parse_name(s, "scoring", kScorings);
}
ContextPolicy parse_context_policy(const std::string& s) {
  return parse_name(s, "context policy", kContextPolicies);
}
ReconstructKeys parse_reconstruct_keys(const std::string& s) {
  return parse_name(s, "reconstruct_keys", kReconstructKeys);
}

Policy CompressionConfig::context_allocation() const {
  if (policy == Policy::kFull) return policy;
  switch (context_policy) {
    case ContextPolicy::kAsPolicy:
      return policy;
    case ContextPolicy::kSnapKV:
      return Policy::kSnapKV;
    case ContextPolicy::kPyramidKV:
      return Policy::kPyramidKV;
    case ContextPolicy::kAdaKV:
      return Policy::kAdaKV;
    case ContextPolicy::kAdaPyramid:
      return Policy::kAdaPyramid;
  }
  return policy;
}

size_t CompressionConfig::budget_per_head(size_t n) const {
  size_t b = 0;
  if (budget_tokens > 0) {
    b = std::min(budget_tokens, n);
  } else {
    const double want = std::round(budget_ratio * static_cast<double>(n));
    b = want > 0 ? static_cast<size_t>(std::min(want, static_cast<double>(n))) : 0;
    b = std::clamp(b, std::min(window, n), n);
  }
  return std::max(b, std::min(min_keep, n));
}

bool CompressionConfig::keeps_everything(size_t n) const {
  return policy == Policy::kFull || budget_per_head(n) >= n;
}

bool CompressionConfig::same_scoring(const CompressionConfig& o) const {
  return window == o.window && pooling == o.pooling && pool_kernel == o.pool_kernel &&
         pool_sink == o.pool_sink && pool_shift == o.pool_shift && gqa == o.gqa &&
         lookahead == o.lookahead && lookahead_weight == o.lookahead_weight &&
         budget_scores == o.budget_scores && scoring == o.scoring &&
         (scoring != Scoring::kReconstruct || reconstruct_keys == o.reconstruct_keys);
}

void CompressionConfig::validate(size_t n) const {
  auto fail = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (budget_tokens == 0) {
    if (!(budget_ratio > 0.0)) fail("budget ratio must be > 0 (got " + num(budget_ratio) + ")");
    if (!(budget_ratio <= 1.0)) {
      fail("budget ratio must be <= 1 (got " + num(budget_ratio) +
           "); give tokens per head as an integer");
    }
  }
  if (window == 0) fail("window must be >= 1 (got 0)");
  if (!(alpha >= 0.0 && alpha <= 1.0)) fail("alpha must be in [0, 1] (got " + num(alpha) + ")");
  if (pool_kernel == 0 || pool_kernel % 2 == 0) {
    fail("pool_kernel must be odd (got " + std::to_string(pool_kernel) + ")");
  }
  if (pool_shift > pool_kernel / 2) {
    fail("pool_shift must be at most pool_kernel / 2 = " + std::to_string(pool_kernel / 2) +
         " (got " + std::to_string(pool_shift) + ")");
  }
  if (lookahead > kMaxLookahead) {
    fail("lookahead must be at most " + std::to_string(kMaxLookahead) + " tokens (got " +
         std::to_string(lookahead) + ")");
  }
  if (!(lookahead_weight > 0.0 && std::isfinite(lookahead_weight))) {
    fail("lookahead_weight must be > 0 (got " + num(lookahead_weight) + ")");
  }
  if (scoring != Scoring::kWindow && lookahead > 0) {
    fail(std::string("scoring ") + to_string(scoring) +
         " does not combine with lookahead (got lookahead " + std::to_string(lookahead) + ")");
  }
  if (delta == 0) fail("delta must be >= 1 (got 0)");
  if (!(pyramid_beta > 0.0 && std::isfinite(pyramid_beta))) {
    fail("pyramid_beta must be > 0 (got " + num(pyramid_beta) + ")");
  }
  if (policy == Policy::kFull) return;
  if (budget_tokens > 0 && budget_tokens < window) {
    fail("budget of " + std::to_string(budget_tokens) + " tokens per head is less than window " +
         std::to_string(window) + " (the budget includes the window)");
  }
  if (n > 0 && window >= n) {
    fail("window " + std::to_string(window) + " must be shorter than the prompt (" +
         std::to_string(n) + " tokens) unless the policy is full");
  }
  // Streaming keeps `sink` first tokens plus the most recent ones: it needs room for both.
  if (policy == Policy::kStreaming) {
    const size_t b = budget_tokens > 0 ? budget_tokens : budget_per_head(n);
    if ((budget_tokens > 0 || (n > 0 && !keeps_everything(n))) && sink >= b) {
      fail("sink " + std::to_string(sink) + " must be less than the budget (" + std::to_string(b) +
           " tokens per head)");
    }
  }
}

std::string describe(const CompressionConfig& c) {
  if (c.policy == Policy::kFull) return "policy full (nothing evicted)";
  std::ostringstream os;
  os << "policy " << to_string(c.policy) << ", budget ";
  if (c.budget_tokens > 0) {
    os << c.budget_tokens << " tokens/head";
  } else {
    os << std::round(c.budget_ratio * 1000) / 10 << "%";
  }
  os << ", min_keep " << c.min_keep << ", window " << c.window;
  if (c.policy == Policy::kStreaming) {
    os << ", sink " << c.sink;
    return os.str();
  }
  os << ", pooling " << to_string(c.pooling) << " " << c.pool_kernel;
  if (c.pool_sink > 0 || c.pool_shift > 0) {
    os << " (sink " << c.pool_sink << ", shift " << c.pool_shift << ")";
  }
  if (c.scoring != Scoring::kWindow) os << ", scoring " << to_string(c.scoring);
  if (c.context_scoring != CompressionConfig{}.context_scoring) {
    os << ", context_scoring " << to_string(c.context_scoring);
  }
  if (c.reconstruct_keys != CompressionConfig{}.reconstruct_keys) {
    os << ", reconstruct_keys " << to_string(c.reconstruct_keys);
  }
  if (c.context_policy != ContextPolicy::kAsPolicy) {
    os << ", context_policy " << to_string(c.context_policy);
  }
  os << ", gqa " << to_string(c.gqa) << ", lookahead " << c.lookahead;
  if (c.lookahead > 0 && c.lookahead_weight != 1.0) os << " (weight " << c.lookahead_weight << ")";
  if (c.policy == Policy::kAdaKV || c.policy == Policy::kAdaPyramid) {
    os << ", alpha " << c.alpha << ", budget_scores " << to_string(c.budget_scores) << ", rule "
       << to_string(c.rule);
  }
  if (c.policy == Policy::kPyramidKV || c.policy == Policy::kAdaPyramid) {
    os << ", pyramid_beta " << c.pyramid_beta;
  }
  os << ", scope " << to_string(c.scope);
  return os.str();
}

void parse_budget(const std::string& text, CompressionConfig& c) {
  const std::string s = trim(text);
  auto fail = [&text](const std::string& why) {
    throw std::invalid_argument("invalid budget \"" + text + "\": " + why +
                                "; expected a ratio in (0, 1] (\"0.2\", \"20%\") or tokens per "
                                "head as an integer >= 1 (\"128\")");
  };
  if (s.empty()) fail("empty");
  size_t tokens = 0;
  if (s.back() != '%' && parse_unsigned(s, tokens)) {
    if (tokens == 0) fail("zero tokens");
    c.budget_tokens = tokens;
    return;
  }
  const bool percent = s.back() == '%';
  double r = 0.0;
  if (!parse_real(percent ? trim(s.substr(0, s.size() - 1)) : s, r)) fail("not a number");
  if (percent) r /= 100.0;
  if (!(r > 0.0)) fail("must be > 0");
  if (r > 1.0) fail("a ratio must be <= 1");
  c.budget_ratio = r;
  c.budget_tokens = 0;
}

CompressionConfig load_preset(const std::string& path, const CompressionConfig& defaults) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(path + ": cannot open the compression preset");
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(path + ": YAML error: " + e.what());
  }
  CompressionConfig c = defaults;
  if (root.IsNull()) return c;
  if (!root.IsMap()) throw std::invalid_argument(path + ": expected a mapping of keys to values");

  auto size_value = [](size_t CompressionConfig::*field) {
    return [field](const std::string& v, CompressionConfig& cfg) {
      if (!parse_unsigned(v, cfg.*field)) {
        throw std::invalid_argument("expected a non-negative integer, got \"" + v + "\"");
      }
    };
  };
  auto real_value = [](double CompressionConfig::*field) {
    return [field](const std::string& v, CompressionConfig& cfg) {
      if (!parse_real(v, cfg.*field)) {
        throw std::invalid_argument("expected a number, got \"" + v + "\"");
      }
    };
  };
  using Setter = std::function<void(const std::string&, CompressionConfig&)>;
  const std::map<std::string, Setter> setters = {
      {"policy",
       [](const std::string& v, CompressionConfig& cfg) { cfg.policy = parse_policy(v); }},
      {"budget", [](const std::string& v, CompressionConfig& cfg) { parse_budget(v, cfg); }},
      {"min_keep", size_value(&CompressionConfig::min_keep)},
      {"window", size_value(&CompressionConfig::window)},
      {"alpha", real_value(&CompressionConfig::alpha)},
      {"pooling",
       [](const std::string& v, CompressionConfig& cfg) { cfg.pooling = parse_pooling(v); }},
      {"pool_kernel", size_value(&CompressionConfig::pool_kernel)},
      {"pool_sink", size_value(&CompressionConfig::pool_sink)},
      {"pool_shift", size_value(&CompressionConfig::pool_shift)},
      {"lookahead", size_value(&CompressionConfig::lookahead)},
      {"lookahead_weight", real_value(&CompressionConfig::lookahead_weight)},
      {"gqa", [](const std::string& v, CompressionConfig& cfg) { cfg.gqa = parse_gqa(v); }},
      {"budget_scores", [](const std::string& v,
                           CompressionConfig& cfg) { cfg.budget_scores = parse_budget_scores(v); }},
      {"scoring",
       [](const std::string& v, CompressionConfig& cfg) { cfg.scoring = parse_scoring(v); }},
      {"context_scoring", [](const std::string& v,
                             CompressionConfig& cfg) { cfg.context_scoring = parse_scoring(v); }},
      {"reconstruct_keys",
       [](const std::string& v, CompressionConfig& cfg) {
         cfg.reconstruct_keys = parse_reconstruct_keys(v);
       }},
      {"context_policy",
       [](const std::string& v, CompressionConfig& cfg) {
         cfg.context_policy = parse_context_policy(v);
       }},
      {"scope", [](const std::string& v, CompressionConfig& cfg) { cfg.scope = parse_scope(v); }},
      {"rule", [](const std::string& v, CompressionConfig& cfg) { cfg.rule = parse_rule(v); }},
      {"delta", size_value(&CompressionConfig::delta)},
      {"b_min", size_value(&CompressionConfig::b_min)},
      {"pyramid_beta", real_value(&CompressionConfig::pyramid_beta)},
      {"sink", size_value(&CompressionConfig::sink)},
  };

  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) throw std::invalid_argument(path + ": keys must be plain names");
    const std::string key = kv.first.Scalar();
    const auto it = setters.find(key);
    if (it == setters.end()) {
      std::string known;
      for (const auto& [name, setter] : setters) known += (known.empty() ? "" : ", ") + name;
      throw std::invalid_argument(path + ": unknown key '" + key + "' (known keys: " + known + ")");
    }
    if (!seen.insert(key).second) {
      throw std::invalid_argument(path + ": duplicate key '" + key + "'");
    }
    if (!kv.second.IsScalar()) {
      throw std::invalid_argument(path + ": key '" + key + "': expected a single value");
    }
    try {
      it->second(kv.second.Scalar(), c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": key '" + key + "': " + e.what());
    }
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
  return c;
}

}  // namespace adakv::compression
