#include "runtime/eval/prompt_builder.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace adakv::eval {
namespace {

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(std::move(w));
  return words;
}

std::string compose(const TaskText& t, const std::string& haystack) {
  std::string s;
  if (!t.intro.empty()) s += t.intro + "\n\n";
  return s + haystack + "\n\n" + t.question;
}

// The haystack words available to the search, with the estimated token cost of each unit.
struct Words {
  std::vector<std::string> words;
  std::vector<size_t> unit_of;      // words[i] belongs to unit unit_of[i] (0, 1, ... in order)
  std::vector<size_t> unit_start;   // first word of each unit
  std::vector<double> unit_cost;    // estimated tokens of each unit
  std::vector<double> unit_before;  // estimated tokens of the units before each unit
};

// The first m words with the needle at the unit boundary nearest the requested depth.
struct Layout {
  std::string haystack;
  double tokens = 0;  // estimated haystack tokens without the needle
  double offset = 0;  // estimated tokens before the needle
};

Layout layout(const Words& w, size_t m, const std::string& needle, double depth) {
  // Estimated token offset of word i: whole units before it, then its share of its own unit.
  auto offset_of = [&](size_t i) {
    if (i == 0) return 0.0;
    const size_t u = w.unit_of[i - 1];
    const size_t end = u + 1 < w.unit_start.size() ? w.unit_start[u + 1] : w.words.size();
    const double share = double(i - w.unit_start[u]) / double(end - w.unit_start[u]);
    return w.unit_before[u] + share * w.unit_cost[u];
  };
  Layout l;
  l.tokens = offset_of(m);
  // Candidate boundaries: every unit start inside the first m words, and the end.
  size_t best = m;
  double best_err = std::abs(l.tokens - depth * l.tokens);
  for (size_t u = 0; u < w.unit_start.size() && w.unit_start[u] <= m; ++u) {
    const double err = std::abs(offset_of(w.unit_start[u]) - depth * l.tokens);
    if (err < best_err) best = w.unit_start[u], best_err = err;
  }
  l.offset = offset_of(best);
  for (size_t i = 0; i <= m; ++i) {
    if (i == best) l.haystack += (l.haystack.empty() ? "" : " ") + needle;
    if (i < m) l.haystack += (l.haystack.empty() ? "" : " ") + w.words[i];
  }
  return l;
}

}  // namespace

Sample build_sample(const TaskText& text, const std::vector<std::string>& units, size_t first_unit,
                    size_t target_tokens, double depth, const TokenCounter& count) {
  const bool has_words = std::any_of(units.begin(), units.end(), [](const std::string& u) {
    return u.find_first_not_of(" \t\r\n") != std::string::npos;
  });
  if (!has_words) throw std::invalid_argument("build_sample: the haystack has no words");
  if (!(depth >= 0 && depth <= 1)) {
    throw std::invalid_argument("depth must be in [0, 1], got " + std::to_string(depth));
  }
  const size_t base = count(compose(text, text.needle));
  if (base > target_tokens) {
    throw std::invalid_argument("a prompt of " + std::to_string(target_tokens) +
                                " tokens is too short: the question and needle alone take " +
                                std::to_string(base));
  }
  const double budget = double(target_tokens - base);

  // A unit's estimated cost is what it adds after another unit (the space before it
  // included); units repeat when the haystack cycles, so costs are cached by unit.
  std::vector<double> cost_of(units.size(), -1);
  auto unit_cost = [&](size_t i) {
    if (cost_of[i] < 0) {
      const double one = double(count(compose(text, units[i])));
      const double two = double(count(compose(text, units[i] + " " + units[i])));
      cost_of[i] = std::max(1.0, two - one);
    }
    return cost_of[i];
  };
  Words w;
  double total = 0;
  size_t next_unit = 0;
  // Takes whole units until their estimated cost reaches `limit` tokens.
  auto take_units = [&](double limit) {
    while (total < limit) {
      const size_t i = (first_unit + next_unit++) % units.size();
      auto words = split_words(units[i]);
      if (words.empty()) continue;
      w.unit_start.push_back(w.words.size());
      w.unit_before.push_back(total);
      w.unit_cost.push_back(unit_cost(i));
      total += w.unit_cost.back();
      for (auto& word : words) {
        w.words.push_back(std::move(word));
        w.unit_of.push_back(w.unit_start.size() - 1);
      }
    }
  };

  // The largest word count whose prompt still fits: tokens grow with words (the pre-tokenizer
  // splits at the space before each word, so no merge spans two words), so a binary search
  // finds it. Should every word taken fit (the estimate was low), take more and search again.
  size_t lo = 0;
  for (double limit = budget * 1.1 + 64;; limit *= 2) {
    take_units(limit);
    size_t hi = w.words.size();
    while (lo < hi) {
      const size_t mid = (lo + hi + 1) / 2;
      if (count(compose(text, layout(w, mid, text.needle, depth).haystack)) <= target_tokens) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo < w.words.size()) break;
  }
  const Layout l = layout(w, lo, text.needle, depth);
  Sample s;
  s.user_text = compose(text, l.haystack);
  s.answer = text.answer;
  s.reference = text.reference;
  s.prompt_tokens = count(s.user_text);
  s.haystack_tokens = size_t(std::lround(l.tokens));
  s.needle_offset = size_t(std::lround(l.offset));
  s.depth = l.tokens > 0 ? l.offset / l.tokens : depth;
  return s;
}

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rng::uniform(uint64_t lo, uint64_t hi) {
  // The modulo bias is below 2^-40 for the small ranges used here.
  return lo + next() % (hi - lo + 1);
}

uint64_t prompt_seed(uint64_t seed, size_t length, size_t depth_index, size_t trial) {
  Rng r(seed);
  uint64_t h = r.next();
  for (uint64_t v : {uint64_t(length), uint64_t(depth_index), uint64_t(trial)}) {
    Rng step(h ^ (v * 0x9e3779b97f4a7c15ull));
    h = step.next();
  }
  return h;
}

}  // namespace adakv::eval
