// SentencePiece-style BPE of llama / mistral GGUF files (tokenizer.ggml.model = "llama").
//
// Unlike byte-level BPE there are no merges: the vocabulary's scores decide. A piece of text is
// split into UTF-8 characters, and the adjacent pair whose concatenation is a token with the
// highest score merges first (ties: leftmost), as llama.cpp's SPM tokenizer and sentencepiece
// do. A character that is not a token falls back to its UTF-8 bytes as <0xXX> tokens, or to the
// unknown token when the vocabulary has no byte tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace adakv::tokenizer {

class SpmModel {
 public:
  // tokens in SentencePiece spelling ("▁" for a space, "<0x0A>" for a byte); scores parallel to
  // tokens (empty: all zero); unk_id -1 when there is none.
  SpmModel(const std::vector<std::string>& tokens, std::vector<float> scores, int32_t unk_id);

  // Appends the ids of `text`, already in SentencePiece spelling (spaces as "▁").
  void encode_piece(std::string_view text, std::vector<int32_t>& out) const;

  // The id of the <0xXX> token of byte b, -1 when the vocabulary has none.
  int32_t byte_token(uint8_t b) const { return byte_ids_[b]; }

 private:
  int32_t find(std::string_view s) const;
  void emit(std::string_view symbol, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> ids_;
  std::vector<float> scores_;
  int32_t unk_id_;
  int32_t byte_ids_[256];
};

// " " becomes "▁"; with add_space_prefix a "▁" goes in front, as sentencepiece's normalizer
// does for llama / mistral vocabularies.
std::string spm_normalize(std::string_view text, bool add_space_prefix);

// The bytes a SentencePiece token stands for: "▁" back to " ", "<0xXX>" to the byte when
// is_byte, anything else as written.
std::string spm_token_bytes(const std::string& token, bool is_byte);

}  // namespace adakv::tokenizer
