#include "model/tokenizer/bpe.h"

#include <queue>
#include <stdexcept>

#include "model/tokenizer/byte_unicode.h"

namespace adakv::tokenizer {

namespace {

// A candidate merge of the symbol at `left` with the one after it, valid while both still
// hold the ids recorded here (merged symbols only ever get longer, so ids never come back).
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

struct Symbol {
  int32_t id;
  int32_t prev;  // -1 at the start
  int32_t next;  // -1 at the end
};

}  // namespace

BpeModel::BpeModel(const std::unordered_map<std::string, int32_t>& token_ids,
                   const std::vector<std::string>& merges, bool ignore_merges) {
  if (ignore_merges) whole_ = token_ids;
  for (int b = 0; b < 256; ++b) {
    const auto it = token_ids.find(std::string(byte_to_unicode(static_cast<uint8_t>(b))));
    byte_ids_[b] = it == token_ids.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos) {
      throw std::runtime_error("tokenizer: merge " + std::to_string(rank) + " ('" + m +
                               "') is not of the form 'A B'");
    }
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    const auto l = token_ids.find(left), r = token_ids.find(right),
               res = token_ids.find(left + right);
    if (l == token_ids.end() || r == token_ids.end() || res == token_ids.end()) continue;
    // The first (lowest-rank) line wins if a pair is listed twice.
    merges_.try_emplace(key(l->second, r->second), Merge{static_cast<int32_t>(rank), res->second});
  }
}

const BpeModel::Merge* BpeModel::find(int32_t left, int32_t right) const {
  const auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  if (!whole_.empty()) {
    std::string spelled;
    for (char c : bytes) spelled += byte_to_unicode(static_cast<uint8_t>(c));
    if (const auto it = whole_.find(spelled); it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Bytes without a token are dropped before merging, so their neighbours may merge with each
  // other: what HF tokenizers' BPE does with no unknown token (llama.cpp instead keeps such a
  // byte as a barrier and drops it afterwards).
  std::vector<Symbol> sym;
  sym.reserve(bytes.size());
  for (char c : bytes) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back({id, i - 1, i + 1});
  }
  const auto n = static_cast<int32_t>(sym.size());
  if (n == 0) return;
  sym.back().next = -1;
  if (n == 1) {
    out.push_back(sym[0].id);
    return;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0 || sym[left].next < 0) return;
    const Symbol& r = sym[sym[left].next];
    if (const Merge* m = find(sym[left].id, r.id)) {
      queue.push({m->rank, left, sym[left].id, r.id, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  std::vector<bool> dead(n, false);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    if (dead[c.left] || l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;
    const int32_t right = l.next;
    l.id = c.result;
    l.next = sym[right].next;
    if (l.next >= 0) sym[l.next].prev = c.left;
    dead[right] = true;
    consider(l.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace adakv::tokenizer
