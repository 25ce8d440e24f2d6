// Byte-level BPE tokenizer of llama-family GGUF files (tokenizer.ggml.model = "gpt2"), and
// the SentencePiece-style BPE of llama / mistral files ("llama": model/tokenizer/spm.h).
//
// Text is bytes (UTF-8, possibly invalid). encode() splits it with the pre-tokenizer named by
// tokenizer.ggml.pre ("smollm": every digit its own piece, then the GPT-2 regex; "qwen2"; ...:
// model/tokenizer/pretokenizer.h), maps each
// piece's bytes to GPT-2's byte-to-unicode spelling and applies the merges by rank.
// decode() returns bytes; decode(encode(s)) == s for every byte string s.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/chat_template.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::tokenizer {

// What the GGUF file says about the vocabulary.
struct Vocab {
  std::string model = "gpt2";       // tokenizer.ggml.model: "gpt2" or "llama" (SentencePiece)
  std::vector<std::string> tokens;  // gpt2: GPT-2 byte-to-unicode spelling; llama: "▁" spaces
  std::vector<std::string> merges;  // "A B", in rank order (gpt2 only)
  std::vector<float> scores;        // tokenizer.ggml.scores (llama only; higher merges first)
  std::vector<int32_t>
      token_types;              // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::string pre = "default";  // tokenizer.ggml.pre
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  int32_t eot_id = -1;  // tokenizer.ggml.eot_token_id: end of turn (Llama 3's <|eot_id|>)
  int32_t eom_id = -1;  // tokenizer.ggml.eom_token_id: end of message (Llama 3.1's <|eom_id|>)
  bool add_bos = false;
  bool add_space_prefix = true;  // llama only: a "▁" before the text (and after special tokens)
  std::string chat_template;     // tokenizer.chat_template (Jinja source), "" when absent
};

// Reads tokenizer.ggml.* from the file; throws std::runtime_error naming a missing/bad key.
Vocab vocab_from_gguf(const gguf::GgufFile& file);

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // With parse_special, control and user-defined tokens written in the text (e.g.
  // "<|im_start|>") become their ids; otherwise control tokens are ordinary text and
  // user-defined ones (Qwen's "<tool_call>") still become their ids, as in HF tokenizers (added
  // tokens that are not special) and llama.cpp. Adds BOS only when add_bos is set in the
  // vocabulary.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = false) const;
  // For "llama" vocabularies the space that add_space_prefix puts before the first token is
  // dropped when that token starts the ids, as HF tokenizers and llama.cpp decode.
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes one token stands for (control tokens give their text). Throws on a bad id.
  std::string token_bytes(int32_t id) const;

  size_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_control(int32_t id) const;
  const Vocab& vocab() const;

  // The ids that end generation, ascending: eos, the file's eot and eom tokens, and the chat
  // template's end-of-turn token (ChatTemplate::end_of_turn) when the vocabulary has it as a
  // control or user-defined token.
  const std::vector<int32_t>& stop_ids() const;
  bool is_stop(int32_t id) const;

  // The file's chat template (ChatTemplate::recognise), or the one set_chat_template() chose.
  // Throws std::runtime_error naming the known templates when adakv does not render the file's.
  const ChatTemplate& chat_template() const;
  // Renders chats with `t` instead of the file's template (--chat-template); stop_ids() follow.
  void set_chat_template(ChatTemplate t);
  // The token ids of `messages` as the chat template renders them, special tokens parsed
  // (throws as chat_template(), and std::invalid_argument for a role order the template
  // refuses). A BOS the template writes as text is not added a second time.
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt = true) const;

 private:
  struct Impl;
  Impl* impl_;
};

// Turns a stream of token ids into text without ever emitting a broken UTF-8 sequence: bytes
// of an incomplete character are held back until the character completes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);  // complete characters available so far
  std::string flush();           // whatever is held back, even if incomplete

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace adakv::tokenizer
