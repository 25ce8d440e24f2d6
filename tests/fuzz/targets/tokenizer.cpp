// The tokenizer on a small synthetic vocabulary (fuzz_model.h), every pre-tokenizer family and
// SentencePiece: encode gives ids inside the vocabulary, decode(encode(s)) == s (every byte
// string for byte-level BPE, as tokenizer.h promises; for SentencePiece, valid UTF-8 without a
// literal "▁", whose spelling cannot tell that character from a space, and without a
// user-defined token, after which it adds a space), the stream decoder
// agrees with decode, and decoding arbitrary ids never fails.
//
// Input: byte 0 picks the vocabulary, byte 1 bit 0 parse_special, the rest is the text.
#include "model/tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tests/fuzz/targets/fuzz_model.h"

namespace {

using namespace adakv;

const std::vector<fuzz::TinyModel>& variants() {
  static const std::vector<fuzz::TinyModel> v = {{.pre = "default"},   {.pre = "smollm"},
                                                 {.pre = "qwen2"},     {.pre = "gpt2"},
                                                 {.pre = "llama-bpe"}, {.spm = true}};
  return v;
}

const tokenizer::Tokenizer& tokenizer_for(size_t i) {
  static std::vector<std::unique_ptr<tokenizer::Tokenizer>> cache(variants().size());
  if (!cache[i]) {
    const auto file = fuzz::tiny_model(variants()[i]);
    cache[i] = std::make_unique<tokenizer::Tokenizer>(tokenizer::vocab_from_gguf(*file));
  }
  return *cache[i];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t which = data[0] % variants().size();
  const bool spm = variants()[which].spm;
  const bool parse_special = data[1] & 1;
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  const tokenizer::Tokenizer& tok = tokenizer_for(which);
  const size_t vocab = tok.vocab_size();

  const std::vector<int32_t> ids = tok.encode(text, parse_special);
  for (int32_t id : ids)
    if (id < 0 || size_t(id) >= vocab) __builtin_trap();
  const std::string back = tok.decode(ids);
  // SentencePiece puts a "▁" after a user-defined token, as llama.cpp and HF's legacy
  // tokenizers do: text around one does not come back unchanged.
  bool plain_ids = true;
  for (int32_t id : ids)
    plain_ids &=
        tok.vocab().token_types[size_t(id)] == 1 || tok.vocab().token_types[size_t(id)] == 6;
  const bool round_trips =
      !parse_special && (!spm || (plain_ids && fuzz::valid_utf8(text) &&
                                  text.find("\xE2\x96\x81") == std::string::npos));
  if (round_trips && back != text) __builtin_trap();

  if (!spm) {
    tokenizer::StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != back) __builtin_trap();
  }

  // The same bytes read as ids, some of them outside the vocabulary.
  std::vector<int32_t> arbitrary;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    arbitrary.push_back(int32_t((uint8_t(text[i]) << 8 | uint8_t(text[i + 1])) % (vocab + 4)));
  }
  bool in_range = true;
  for (int32_t id : arbitrary) in_range &= size_t(id) < vocab;
  try {
    (void)tok.decode(arbitrary);
  } catch (const std::exception&) {
    // A bad id may be refused, but only by throwing, and never an id inside the vocabulary.
    if (in_range) __builtin_trap();
  }
  return 0;
}
