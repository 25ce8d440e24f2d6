// Tokenizer: special-token splitting, pre-tokenization, byte-level BPE, and decoding.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/special_tokens.h"
#include "model/tokenizer/spm.h"

namespace adakv::tokenizer {

namespace {

constexpr int32_t kUnknown = 2;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
constexpr int32_t kByte = 6;

std::unordered_map<std::string, int32_t> index_tokens(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(tokens.size());
  // A spelling listed twice maps to its last id, as in llama.cpp and HF's GGUF loader.
  for (size_t i = 0; i < tokens.size(); ++i) ids[tokens[i]] = static_cast<int32_t>(i);
  return ids;
}

const Vocab& checked(const Vocab& v) {
  if (v.tokens.empty()) throw std::runtime_error("tokenizer: the vocabulary has no tokens");
  if (v.model != "gpt2" && v.model != "llama") {
    throw std::runtime_error("tokenizer: model '" + v.model +
                             "' is not one adakv implements (gpt2, llama)");
  }
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    throw std::runtime_error("tokenizer: " + std::to_string(v.token_types.size()) +
                             " token types for " + std::to_string(v.tokens.size()) + " tokens");
  }
  const auto n = static_cast<int64_t>(v.tokens.size());
  for (auto [name, id] : {std::pair{"bos", v.bos_id},
                          {"eos", v.eos_id},
                          {"pad", v.pad_id},
                          {"unk", v.unk_id},
                          {"eot", v.eot_id},
                          {"eom", v.eom_id}}) {
    if (id < -1 || id >= n) {
      throw std::runtime_error(std::string("tokenizer: ") + name + " id " + std::to_string(id) +
                               " is outside the vocabulary of " + std::to_string(n));
    }
  }
  if (v.add_bos && v.bos_id < 0) {
    throw std::runtime_error("tokenizer: add_bos is set but there is no bos token");
  }
  return v;
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  BpeModel bpe;
  std::optional<SpmModel> spm;  // set for "llama" vocabularies, which then bypass bpe and pre
  PreTokenizer pre;
  SpecialTokenMatcher specials;      // control and user-defined tokens
  SpecialTokenMatcher user_defined;  // user-defined tokens alone: matched in any text
  std::vector<std::string> bytes;    // what each token decodes to
  std::optional<ChatTemplate> chat;  // null when adakv does not render the file's template
  std::vector<int32_t> stop;         // Tokenizer::stop_ids()

  explicit Impl(Vocab v)
      : vocab(std::move(v)),
        bpe(index_tokens(checked(vocab).tokens), vocab.merges,
            pretokenizer_ignores_merges(vocab.pre)),
        // SentencePiece vocabularies have no pre-tokenizer, whatever tokenizer.ggml.pre says.
        pre(vocab.model == "llama" ? "default" : vocab.pre),
        chat(ChatTemplate::recognise(vocab.chat_template)) {
    if (vocab.model == "llama") spm.emplace(vocab.tokens, vocab.scores, vocab.unk_id);
    bytes.reserve(vocab.tokens.size());
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      const int32_t type = type_of(static_cast<int32_t>(i));
      // The unknown token written in the text ("<unk>") is that token when special tokens are
      // parsed, as in HF tokenizers (an added special token) and llama.cpp.
      if (type == kUnknown) specials.add(vocab.tokens[i], static_cast<int32_t>(i));
      // Control and user-defined tokens are stored as plain text, not in the byte alphabet.
      if (type == kControl || type == kUserDefined) {
        bytes.push_back(vocab.tokens[i]);
        specials.add(vocab.tokens[i], static_cast<int32_t>(i));
        if (type == kUserDefined) user_defined.add(vocab.tokens[i], static_cast<int32_t>(i));
      } else if (spm) {
        bytes.push_back(spm_token_bytes(vocab.tokens[i], type == kByte));
      } else {
        bytes.push_back(unicode_to_bytes(vocab.tokens[i]));
      }
    }
    update_stop();
  }

  void update_stop() {
    stop.clear();
    for (int32_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
      if (id >= 0) stop.push_back(id);
    }
    // Only a token spelled as text can be the template's: a byte-level BPE token that happens
    // to read "</s>" is not the special one.
    if (chat) {
      for (size_t i = 0; i < vocab.tokens.size(); ++i) {
        const int32_t type = type_of(static_cast<int32_t>(i));
        if (vocab.tokens[i] == chat->end_of_turn && (type == kControl || type == kUserDefined)) {
          stop.push_back(static_cast<int32_t>(i));
        }
      }
    }
    std::sort(stop.begin(), stop.end());
    stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
  }

  int32_t type_of(int32_t id) const {
    return vocab.token_types.empty() ? 1 : vocab.token_types[id];
  }

  const std::string& bytes_of(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= bytes.size()) {
      throw std::out_of_range("tokenizer: token id " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(bytes.size()));
    }
    return bytes[id];
  }

  // `after_start` is true for text at the start or right after a special token: where
  // sentencepiece's add_space_prefix puts its "▁" (llama.cpp does the same).
  void encode_text(std::string_view text, bool after_start, std::vector<int32_t>& out) const {
    if (spm) {
      spm->encode_piece(spm_normalize(text, vocab.add_space_prefix && after_start), out);
      return;
    }
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    for (std::string_view p : pieces) bpe.encode_piece(p, out);
  }
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(new Impl(std::move(vocab))) {}
Tokenizer::~Tokenizer() {
  delete impl_;
}
Tokenizer::Tokenizer(Tokenizer&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
Tokenizer& Tokenizer::operator=(Tokenizer&& o) noexcept {
  if (this != &o) {
    delete impl_;
    impl_ = std::exchange(o.impl_, nullptr);
  }
  return *this;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (impl_->vocab.add_bos) out.push_back(impl_->vocab.bos_id);
  // Text between special tokens is pre-tokenized on its own, as in HF tokenizers and llama.cpp.
  // User-defined tokens (Qwen's <tool_call>) are matched even in plain text, as both do.
  const SpecialTokenMatcher& matcher = parse_special ? impl_->specials : impl_->user_defined;
  bool after_start = true;
  matcher.split(
      text,
      [&](std::string_view t) {
        impl_->encode_text(t, after_start, out);
        after_start = false;
      },
      [&](int32_t id) {
        out.push_back(id);
        after_start = true;
      });
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += impl_->bytes_of(id);
  const bool prefixed = impl_->spm && impl_->vocab.add_space_prefix && !ids.empty() &&
                        impl_->type_of(ids[0]) != kControl;
  if (prefixed && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  return impl_->bytes_of(id);
}

size_t Tokenizer::vocab_size() const {
  return impl_->vocab.tokens.size();
}
int32_t Tokenizer::bos_id() const {
  return impl_->vocab.bos_id;
}
int32_t Tokenizer::eos_id() const {
  return impl_->vocab.eos_id;
}
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->bytes.size() && impl_->type_of(id) == kControl;
}
const Vocab& Tokenizer::vocab() const {
  return impl_->vocab;
}

const std::vector<int32_t>& Tokenizer::stop_ids() const {
  return impl_->stop;
}
bool Tokenizer::is_stop(int32_t id) const {
  return std::binary_search(impl_->stop.begin(), impl_->stop.end(), id);
}

void Tokenizer::set_chat_template(ChatTemplate t) {
  impl_->chat = std::move(t);
  impl_->update_stop();
}

const ChatTemplate& Tokenizer::chat_template() const {
  if (!impl_->chat) {
    throw std::runtime_error(
        "tokenizer: the model's chat template (tokenizer.chat_template) is not one adakv "
        "renders; known: " +
        ChatTemplate::known_names());
  }
  return *impl_->chat;
}

std::vector<int32_t> Tokenizer::encode_chat(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) const {
  std::string text = chat_template().render(messages, add_generation_prompt);
  // Templates that write BOS themselves (Llama, Mistral) would get a second one from add_bos.
  const Vocab& v = impl_->vocab;
  if (v.add_bos && v.bos_id >= 0) {
    const std::string& bos = impl_->bytes[v.bos_id];
    if (!bos.empty() && text.compare(0, bos.size(), bos) == 0) text.erase(0, bos.size());
  }
  return encode(text, /*parse_special=*/true);
}

}  // namespace adakv::tokenizer
