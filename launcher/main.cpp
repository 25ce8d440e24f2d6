// adakv: the command-line entry point. One file per subcommand (cmd_*.cpp).
#include <cstdio>
#include <exception>

#include "launcher/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"adakv: tensor-parallel LLM inference with Ada-KV cache compression"};
  app.require_subcommand(1);

  adakv::cli::Runner selected;
  adakv::cli::add_inspect(app, selected);
  adakv::cli::add_generate(app, selected);
  adakv::cli::add_bench(app, selected);
  adakv::cli::add_profile(app, selected);
  adakv::cli::add_eval(app, selected);
  adakv::cli::add_not_built_yet(app, selected);

  CLI11_PARSE(app, argc, argv);
  try {
    return selected ? selected() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adakv: error: %s\n", e.what());
    return 1;
  }
}
