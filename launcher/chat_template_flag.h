// --chat-template NAME, for the commands that render chats (generate --chat, profile --chat,
// batch, serve, eval): renders with the named template instead of the one recognised from the model
// file, and checks at load that the command's chats can be rendered at all.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace adakv::runtime {
class Worker;
}

namespace adakv::cli {

struct ChatTemplateFlag {
  std::string name;  // empty: the model file's template

  // An unknown NAME fails parsing with the list of known names.
  void add_to(CLI::App* app);
  // Sets the named template on the worker's tokenizer. With `renders_chats`, a model whose
  // template adakv does not recognise (and no NAME) is an error here, at load, naming the
  // known templates and the flag.
  void apply(runtime::Worker& engine, bool renders_chats) const;
};

}  // namespace adakv::cli
