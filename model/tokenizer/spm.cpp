#include "model/tokenizer/spm.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>

namespace adakv::tokenizer {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's space

size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;  // a stray continuation or invalid byte is a character of its own
}

std::string byte_token_text(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

// A character or a merged run of characters of the text being encoded; a doubly linked list
// so that merging is O(1).
struct Symbol {
  size_t begin;
  size_t len;  // 0 once merged into its left neighbour
  int prev;
  int next;
};

struct Bigram {
  float score;
  int left;
  size_t len;  // the merged length when queued: a stale entry no longer matches
  bool operator<(const Bigram& o) const {
    // priority_queue pops the largest: highest score first, then the leftmost.
    if (score != o.score) return score < o.score;
    return left > o.left;
  }
};

}  // namespace

SpmModel::SpmModel(const std::vector<std::string>& tokens, std::vector<float> scores,
                   int32_t unk_id)
    : scores_(std::move(scores)), unk_id_(unk_id) {
  if (!scores_.empty() && scores_.size() != tokens.size()) {
    throw std::runtime_error("tokenizer: " + std::to_string(scores_.size()) + " scores for " +
                             std::to_string(tokens.size()) + " tokens");
  }
  if (scores_.empty()) scores_.assign(tokens.size(), 0.0f);
  ids_.reserve(tokens.size());
  // A spelling listed twice maps to its first id, as sentencepiece's piece index does.
  for (size_t i = 0; i < tokens.size(); ++i) ids_.emplace(tokens[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) byte_ids_[b] = find(byte_token_text(static_cast<uint8_t>(b)));
}

int32_t SpmModel::find(std::string_view s) const {
  auto it = ids_.find(std::string(s));
  return it == ids_.end() ? -1 : it->second;
}

void SpmModel::emit(std::string_view symbol, std::vector<int32_t>& out) const {
  const int32_t id = find(symbol);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  // Only single characters can be missing (merges only make tokens): byte fallback.
  for (char c : symbol) {
    const int32_t b = byte_ids_[static_cast<uint8_t>(c)];
    if (b >= 0) {
      out.push_back(b);
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    } else {
      throw std::runtime_error("tokenizer: no token, byte token or unknown token for '" +
                               std::string(symbol) + "'");
    }
  }
}

void SpmModel::encode_piece(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> syms;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_len(static_cast<uint8_t>(text[i])), text.size() - i);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({i, n, idx - 1, idx + 1});
    i += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = syms[left].len + syms[right].len;
    const int32_t id = find(text.substr(syms[left].begin, len));
    if (id >= 0) queue.push({scores_[id], left, len});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) try_pair(i, i + 1);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = syms[top.left];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = syms[left.next];
    if (left.len + right.len != top.len) continue;  // one side changed since it was queued
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.left;
    try_pair(left.prev, top.left);
    try_pair(top.left, left.next);
  }
  for (int i = 0; i >= 0; i = syms[i].next) emit(text.substr(syms[i].begin, syms[i].len), out);
}

std::string spm_normalize(std::string_view text, bool add_space_prefix) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  if (add_space_prefix) out += kSpace;
  for (char c : text) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out += c;
    }
  }
  return out;
}

std::string spm_token_bytes(const std::string& token, bool is_byte) {
  if (is_byte && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
    return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace adakv::tokenizer
