#include "runtime/eval/niah.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace adakv::eval {
namespace {

// Collapses runs of whitespace into one space and trims the ends.
std::string collapse(const std::string& s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
    } else {
      if (space) out += ' ';
      out += c;
      space = false;
    }
  }
  return out;
}

// Prose: at least eight words, and letters make up most of the non-space characters.
bool is_prose(const std::string& paragraph) {
  size_t letters = 0, other = 0, words = 1;
  for (char c : paragraph) {
    if (c == ' ') {
      ++words;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      ++letters;
    } else {
      ++other;
    }
  }
  return words >= 8 && letters >= 4 * other;
}

// Splits after '.', '?' or '!' followed by a space and a capital letter.
void split_sentences(const std::string& p, std::vector<std::string>& out) {
  size_t start = 0;
  for (size_t i = 0; i + 2 < p.size(); ++i) {
    const bool end = (p[i] == '.' || p[i] == '?' || p[i] == '!') && p[i + 1] == ' ' &&
                     std::isupper(static_cast<unsigned char>(p[i + 2]));
    if (end) {
      out.push_back(p.substr(start, i + 1 - start));
      start = i + 2;
    }
  }
  if (start < p.size()) out.push_back(p.substr(start));
}

}  // namespace

std::vector<std::string> default_haystack_files() {
  static const char* names[] = {"GPL-3",    "Apache-2.0", "MPL-2.0", "GFDL-1.3",
                                "LGPL-2.1", "Artistic",   "CC0-1.0", "GPL-2"};
  std::vector<std::string> out;
  for (const char* n : names) {
    const std::string path = std::string("/usr/share/common-licenses/") + n;
    if (std::filesystem::is_regular_file(path)) out.push_back(path);
  }
  return out;
}

std::vector<std::string> load_sentences(const std::vector<std::string>& paths) {
  std::vector<std::string> sentences;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read haystack file " + path);
    std::string line, paragraph;
    auto flush = [&] {
      const std::string p = collapse(paragraph);
      if (is_prose(p)) split_sentences(p, sentences);
      paragraph.clear();
    };
    while (std::getline(in, line)) {
      if (collapse(line).empty()) {
        flush();
      } else {
        paragraph += line + "\n";
      }
    }
    flush();
  }
  if (sentences.empty()) {
    std::string names;
    for (const auto& p : paths) names += (names.empty() ? "" : ", ") + p;
    throw std::runtime_error("no English prose found in the haystack files: " +
                             (names.empty() ? std::string("(none given or found)") : names));
  }
  return sentences;
}

Sample make_niah(const std::vector<std::string>& sentences, size_t target_tokens, double depth,
                 uint64_t seed, const TokenCounter& count) {
  if (sentences.empty()) throw std::invalid_argument("make_niah: no haystack sentences");
  static const char* cities[] = {
      "Lisbon",   "Nairobi", "Oslo",    "Lima",     "Hanoi",   "Toronto", "Kyoto",   "Dakar",
      "Quito",    "Tallinn", "Perth",   "Valencia", "Osaka",   "Bergen",  "Cairo",   "Havana",
      "Montreal", "Krakow",  "Seville", "Manila",   "Zagreb",  "Porto",   "Accra",   "Santiago",
      "Helsinki", "Bogota",  "Dublin",  "Lyon",     "Chennai", "Denver",  "Glasgow", "Istanbul",
      "Jakarta",  "Munich",  "Nagoya",  "Riga",     "Seattle", "Tbilisi", "Vienna",  "Windhoek",
  };
  Rng rng(seed);
  const std::string city = cities[rng.uniform(0, std::size(cities) - 1)];
  const std::string number = std::to_string(rng.uniform(1000000, 9999999));
  const size_t first = rng.uniform(0, sentences.size() - 1);
  TaskText t;
  t.needle = "The special magic number of " + city + " is " + number + ".";
  t.question = "What is the special magic number of " + city + "? Answer with the number.";
  t.answer = number;
  t.reference = t.needle;
  return build_sample(t, sentences, first, target_tokens, depth, count);
}

}  // namespace adakv::eval
