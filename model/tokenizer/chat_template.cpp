// Which family a Jinja source belongs to, by markers every version of the family's template
// carries (its special tokens, the pieces it wraps messages in, its default system line) rather
// than by the exact text, which model files vary in whitespace, tool sections and comments.
#include "model/tokenizer/chat_template.h"

#include <initializer_list>
#include <stdexcept>

#include "model/tokenizer/chat_template_render.h"

namespace adakv::tokenizer {

namespace {

constexpr const char* kSmolLmSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
constexpr const char* kQwenSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool has(const std::string& source, std::initializer_list<const char*> markers) {
  for (const char* m : markers) {
    if (source.find(m) == std::string::npos) return false;
  }
  return true;
}

// Either quoting of a Jinja string literal holding `text`.
bool has_literal(const std::string& source, const std::string& text) {
  return source.find('\'' + text + '\'') != std::string::npos ||
         source.find('"' + text + '"') != std::string::npos;
}

std::optional<ChatTemplate> recognise_inst(const std::string& source) {
  if (has(source, {"<<SYS>>", "<</SYS>>", "Conversation roles must alternate"})) {
    // A fine-tune's template that supplies its own default system message renders text that
    // llama2() does not.
    if (has(source, {"set system_message = '"}) || has(source, {"set system_message = \""})) {
      return std::nullopt;
    }
    return ChatTemplate::llama2();
  }
  if (has_literal(source, " [INST] ") && has_literal(source, " [/INST]")) {
    return ChatTemplate::mistral_v1();
  }
  if (has_literal(source, "[/INST]") && has(source, {"loop.last and system_message is defined"})) {
    if (has_literal(source, "[INST] ")) return ChatTemplate::mistral_v3();
    if (has_literal(source, "[INST]")) return ChatTemplate::mistral_tekken();
  }
  return std::nullopt;
}

}  // namespace

ChatTemplate ChatTemplate::smollm2() {
  return {"smollm2", ChatFamily::kChatMl, kSmolLmSystem, false, "<|im_end|>"};
}
ChatTemplate ChatTemplate::qwen25() {
  return {"qwen2.5", ChatFamily::kChatMl, kQwenSystem, true, "<|im_end|>"};
}
ChatTemplate ChatTemplate::llama2() {
  return {"llama2", ChatFamily::kLlama2, "", false, "</s>"};
}
ChatTemplate ChatTemplate::llama3() {
  return {"llama3", ChatFamily::kLlama3, "", false, "<|eot_id|>"};
}
ChatTemplate ChatTemplate::llama31() {
  return {"llama3.1", ChatFamily::kLlama31, "", false, "<|eot_id|>"};
}
ChatTemplate ChatTemplate::mistral_v1() {
  return {"mistral-v1", ChatFamily::kMistralV1, "", false, "</s>"};
}
ChatTemplate ChatTemplate::mistral_v3() {
  return {"mistral-v3", ChatFamily::kMistralV3, "", false, "</s>"};
}
ChatTemplate ChatTemplate::mistral_tekken() {
  return {"mistral-tekken", ChatFamily::kMistralTekken, "", false, "</s>"};
}

std::optional<ChatTemplate> ChatTemplate::recognise(const std::string& source) {
  if (source.empty()) return smollm2();
  if (has(source, {"<|im_start|>", "<|im_end|>"})) {
    // Each ChatML family by its whole default system turn (the text the template renders, so a
    // template with another line is another template: SmolLM3's starts like SmolLM2's).
    if (source.find(std::string(kSmolLmSystem) + "<|im_end|>") != std::string::npos) {
      return smollm2();
    }
    if (source.find(std::string(kQwenSystem) + "<|im_end|>") != std::string::npos) {
      return qwen25();
    }
    return std::nullopt;
  }
  if (has(source, {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})) {
    // Llama 3.2 Vision's template renders text messages untrimmed.
    if (has(source, {"<|image|>"})) return std::nullopt;
    if (has(source, {"Cutting Knowledge Date", "Today Date"})) return llama31();
    // Llama 3's own template has no system turn of its own and no tools; fine-tunes that add
    // function calling (Firefunction, Functionary) render more than llama3() does.
    const bool extended = has(source, {"Cutting Knowledge Date"}) || has(source, {"function"}) ||
                          has(source, {"tool"});
    return extended ? std::nullopt : std::optional<ChatTemplate>(llama3());
  }
  if (has(source, {"[INST]", "[/INST]"})) return recognise_inst(source);
  return std::nullopt;
}

std::vector<std::string> ChatTemplate::names() {
  return {"smollm2",  "qwen2.5",    "llama2",     "llama3",
          "llama3.1", "mistral-v1", "mistral-v3", "mistral-tekken"};
}

ChatTemplate ChatTemplate::named(const std::string& name) {
  for (const ChatTemplate& t : {smollm2(), qwen25(), llama2(), llama3(), llama31(), mistral_v1(),
                                mistral_v3(), mistral_tekken()}) {
    if (t.name == name) return t;
  }
  throw std::invalid_argument("unknown chat template '" + name + "'; known: " + known_names());
}

std::string ChatTemplate::known_names() {
  return "smollm2 (SmolLM2-Instruct's ChatML), qwen2.5 (Qwen2.5-Instruct's ChatML), llama2 "
         "(Llama 2 chat), llama3 (Llama 3 Instruct), llama3.1 (Llama 3.1/3.2/3.3 Instruct), "
         "mistral-v1 (Mistral 7B Instruct v0.1/v0.2), mistral-v3 (Mistral 7B Instruct v0.3, "
         "Mistral Large 2407), mistral-tekken (Mistral Nemo)";
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  switch (family) {
    case ChatFamily::kChatMl:
      return chat::render_chatml(*this, messages, add_generation_prompt);
    case ChatFamily::kLlama2:
      return chat::render_llama2(messages);
    case ChatFamily::kLlama3:
      return chat::render_llama3(messages, add_generation_prompt);
    case ChatFamily::kLlama31:
      return chat::render_llama31(messages, add_generation_prompt);
    case ChatFamily::kMistralV1:
      return chat::render_mistral_v1(messages);
    case ChatFamily::kMistralV3:
      return chat::render_mistral_v3(messages);
    case ChatFamily::kMistralTekken:
      return chat::render_mistral_tekken(messages);
  }
  throw std::logic_error("chat template: unknown family");
}

std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return ChatTemplate::smollm2().render(messages, add_generation_prompt);
}

}  // namespace adakv::tokenizer
