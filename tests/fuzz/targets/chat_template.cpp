// Chat messages through every chat template adakv renders: render() gives text or throws
// std::invalid_argument (a role order the template refuses), and encode_chat() on the synthetic
// vocabulary gives ids inside it. The raw input also goes through recognise(), as a GGUF's
// tokenizer.chat_template would.
//
// Input: byte 0 picks the template, byte 1 bit 0 add_generation_prompt; the rest is messages
// separated by 0x00, each a role byte (system, user, assistant, or the content's first line as
// the role) and its content.
#include "model/tokenizer/chat_template.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/targets/fuzz_model.h"

namespace {

using namespace adakv;
using tokenizer::ChatMessage;
using tokenizer::ChatTemplate;

tokenizer::Tokenizer& shared_tokenizer() {
  static tokenizer::Tokenizer tok(tokenizer::vocab_from_gguf(*fuzz::tiny_model({})));
  return tok;
}

std::vector<ChatMessage> messages_from(std::string_view in) {
  static const char* const kRoles[] = {"system", "user", "assistant"};
  std::vector<ChatMessage> out;
  size_t pos = 0;
  while (pos < in.size()) {
    size_t end = in.find('\0', pos);
    if (end == std::string_view::npos) end = in.size();
    std::string_view m = in.substr(pos, end - pos);
    pos = end + 1;
    if (m.empty()) continue;
    const uint8_t r = uint8_t(m[0]);
    m.remove_prefix(1);
    ChatMessage msg;
    if (r % 4 < 3) {
      msg.role = kRoles[r % 4];
      msg.content = std::string(m);
    } else {
      const size_t nl = m.find('\n');
      msg.role = std::string(m.substr(0, nl));
      msg.content = nl == std::string_view::npos ? "" : std::string(m.substr(nl + 1));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  (void)ChatTemplate::recognise(std::string(raw));

  static const std::vector<std::string> names = ChatTemplate::names();
  const ChatTemplate t = ChatTemplate::named(names[data[0] % names.size()]);
  const bool add_generation_prompt = data[1] & 1;
  const std::vector<ChatMessage> messages = messages_from(raw.substr(2));

  std::string text;
  try {
    text = t.render(messages, add_generation_prompt);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  tokenizer::Tokenizer& tok = shared_tokenizer();
  tok.set_chat_template(t);
  const std::vector<int32_t> ids = tok.encode_chat(messages, add_generation_prompt);
  for (int32_t id : ids)
    if (id < 0 || size_t(id) >= tok.vocab_size()) __builtin_trap();
  return 0;
}
