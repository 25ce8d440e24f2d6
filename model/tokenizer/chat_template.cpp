// The ChatML template of SmolLM2-Instruct, as stored in its GGUF (tokenizer.chat_template):
//   {% for message in messages %}
//   {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a
//   helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}
//   {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
//   {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
// so an empty conversation gets no default system turn.
#include "model/tokenizer/tokenizer.h"

namespace adakv::tokenizer {

namespace {
constexpr const char* kDefaultSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
}

std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  if (!messages.empty() && messages.front().role != "system") turn("system", kDefaultSystem);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace adakv::tokenizer
