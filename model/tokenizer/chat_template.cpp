// The templates as their GGUF files store them (tokenizer.chat_template), in the parts that
// adakv renders:
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
//  assistant messages without tool calls as ChatML turns; then the generation prompt. Its tool
//  sections (tools, tool_calls, the "tool" role) are not rendered: requests cannot carry them.
#include "model/tokenizer/chat_template.h"

namespace adakv::tokenizer {

namespace {

constexpr const char* kSmolLmSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
constexpr const char* kQwenSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace

ChatTemplate ChatTemplate::smollm2() {
  return {"smollm2", kSmolLmSystem, false};
}

ChatTemplate ChatTemplate::qwen25() {
  return {"qwen2.5", kQwenSystem, true};
}

std::optional<ChatTemplate> ChatTemplate::recognise(const std::string& source) {
  if (source.empty()) return smollm2();
  // Each family by its ChatML markers and its default system line (the line the template
  // renders, so a template with another line is another template).
  const bool chatml = source.find("<|im_start|>") != std::string::npos &&
                      source.find("<|im_end|>") != std::string::npos;
  if (!chatml) return std::nullopt;
  if (source.find(kSmolLmSystem) != std::string::npos) return smollm2();
  if (source.find(kQwenSystem) != std::string::npos) return qwen25();
  return std::nullopt;
}

std::string ChatTemplate::known_names() {
  return "smollm2 (SmolLM2-Instruct's ChatML), qwen2.5 (Qwen2.5-Instruct's ChatML)";
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  std::string out;
  auto turn = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>";
    out += role;
    out += '\n';
    out += content;
    out += "<|im_end|>\n";
  };
  const bool opens_with_system = !messages.empty() && messages.front().role == "system";
  if (!opens_with_system && (system_when_empty || !messages.empty())) {
    turn("system", default_system);
  }
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return ChatTemplate::smollm2().render(messages, add_generation_prompt);
}

}  // namespace adakv::tokenizer
