// ChatML as SmolLM2-Instruct's and Qwen2.5-Instruct's templates render it:
//  SmolLM2-Instruct:
//   {% for message in messages %}
//   {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a
//   helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}
//   {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
//   {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
//  so an empty conversation gets no default system turn.
//  Qwen2.5-Instruct, without tools: before the loop, messages[0] as the system turn when it is
//  one, else '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful
//  assistant.<|im_end|>\n'; in the loop, user messages, system messages other than the first and
//  assistant messages without tool calls as ChatML turns; then the generation prompt.
#include "model/tokenizer/chat_template_render.h"

namespace adakv::tokenizer::chat {

std::string render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  const bool opens_with_system = !messages.empty() && messages.front().role == "system";
  if (!opens_with_system && (t.system_when_empty || !messages.empty())) {
    turn("system", t.default_system);
  }
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace adakv::tokenizer::chat
