// Byte-level BPE merging of one pre-tokenized piece.
//
// Every byte starts as the token spelling it in the byte-level alphabet; then the adjacent pair
// whose merge has the lowest rank is merged, the leftmost first among equal ranks, until no
// ranked pair is left (HF tokenizers' BPE and llama.cpp agree on this order).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace adakv::tokenizer {

class BpeModel {
 public:
  // token_ids maps each token's spelling to its id. Merges are "A B" in rank order; a merge
  // whose parts or result are not tokens is ignored. Throws std::runtime_error if a merge line
  // has no space. A byte whose single-character token is missing (SmolLM2 lacks 21 of them,
  // e.g. 0x04, 0xC0, 0xFF) cannot be encoded: it is dropped, as HF tokenizers and llama.cpp do.
  // With ignore_merges a piece that is a token whole is that token, whatever the merges would
  // make of it (HF tokenizers' BPE option, set in Llama 3's tokenizer.json: some of its tokens
  // are not what its merges produce, e.g. " việc").
  BpeModel(const std::unordered_map<std::string, int32_t>& token_ids,
           const std::vector<std::string>& merges, bool ignore_merges = false);

  // Appends the ids of one piece (raw bytes, any values). Thread-safe.
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find(int32_t left, int32_t right) const;

  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_map<std::string, int32_t> whole_;  // every token, with ignore_merges only
};

}  // namespace adakv::tokenizer
