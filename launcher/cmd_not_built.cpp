// Subcommands of the command-line contract that are not built yet: they exist so that the
// contract is visible, say what is missing, and exit 2.
#include <cstdio>
#include <string>

#include "launcher/commands.h"

namespace adakv::cli {

void add_not_built_yet(CLI::App& app, Runner& selected) {
  struct Pending {
    const char* name;
    const char* what;
  };
  static const Pending pending[] = {
      {"serve", "OpenAI-compatible HTTP server"},
  };
  for (const auto& p : pending) {
    auto* sub = app.add_subcommand(p.name, std::string(p.what) + " (not built yet)");
    sub->allow_extras();
    sub->callback([p, &selected] {
      selected = [p] {
        std::fprintf(stderr, "adakv %s: not built yet (%s)\n", p.name, p.what);
        return 2;
      };
    });
  }
}

}  // namespace adakv::cli
