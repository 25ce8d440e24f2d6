// The chat templates adakv renders, chosen from the GGUF's tokenizer.chat_template by
// recognising the family it belongs to. Both known ones are ChatML: each message
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n" when a generation
// prompt is asked for, after a default system turn when the first message is not a system
// message; they differ in that turn's text and in whether an empty conversation gets it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace adakv::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatTemplate {
  std::string name;                // "smollm2" or "qwen2.5"
  std::string default_system;      // the system turn's text when the first message is not "system"
  bool system_when_empty = false;  // an empty conversation still gets the default system turn

  // SmolLM2-Instruct's template (also what files without a template get, the synthetic test
  // models among them).
  static ChatTemplate smollm2();
  // Qwen2.5-Instruct's (Qwen2.5-Coder's too) without tools.
  static ChatTemplate qwen25();
  // The known template whose Jinja source is `source`; smollm2() for an empty source (no
  // tokenizer.chat_template); nullopt for a template adakv does not render.
  static std::optional<ChatTemplate> recognise(const std::string& source);
  // The names recognise() knows, for errors.
  static std::string known_names();

  // The text the template renders for `messages` (as transformers' apply_chat_template(...,
  // tokenize=False)).
  std::string render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt = true) const;
};

// SmolLM2's template: ChatTemplate::smollm2().render(messages, add_generation_prompt).
std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt = true);

}  // namespace adakv::tokenizer
