// The `adakv` subcommands. Each add_* registers its subcommand and options on the app; when
// the subcommand is parsed, it stores the function that runs it in `selected`. A runner returns
// the exit code: 0 ok, 1 runtime failure, 2 usage.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace adakv::cli {

using Runner = std::function<int()>;

void add_inspect(CLI::App& app, Runner& selected);
void add_generate(CLI::App& app, Runner& selected);
void add_bench(CLI::App& app, Runner& selected);
// `bench batch`, registered by add_bench on its subcommand.
void add_bench_batch(CLI::App* bench_app, Runner& selected);
void add_batch(CLI::App& app, Runner& selected);
void add_profile(CLI::App& app, Runner& selected);
void add_eval(CLI::App& app, Runner& selected);
// `eval ppl`, registered by add_eval on its subcommand.
void add_eval_ppl(CLI::App* eval_app, Runner& selected);
// `launch` needs the whole app: it checks the subcommand it runs on the ranks.
void add_launch(CLI::App& app, Runner& selected);
void add_serve(CLI::App& app, Runner& selected);
void add_router(CLI::App& app, Runner& selected);

}  // namespace adakv::cli
