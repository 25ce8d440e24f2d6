#include "launcher/chat_template_flag.h"

#include <stdexcept>

#include "model/tokenizer/chat_template.h"
#include "runtime/worker.h"

namespace adakv::cli {

void ChatTemplateFlag::add_to(CLI::App* app) {
  const CLI::Validator known(
      [](std::string& value) -> std::string {
        try {
          tokenizer::ChatTemplate::named(value);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "NAME");
  app->add_option("--chat-template", name,
                  "Render chats with this template instead of the model's own (recognised from "
                  "tokenizer.chat_template): " +
                      tokenizer::ChatTemplate::known_names())
      ->check(known);
}

void ChatTemplateFlag::apply(runtime::Worker& engine, bool renders_chats) const {
  tokenizer::Tokenizer& tok = engine.tokenizer();
  if (!name.empty()) {
    tok.set_chat_template(tokenizer::ChatTemplate::named(name));
    return;
  }
  if (!renders_chats) return;
  try {
    tok.chat_template();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) +
                             "; name the one to use with --chat-template NAME");
  }
}

}  // namespace adakv::cli
