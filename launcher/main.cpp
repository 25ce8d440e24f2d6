// adakv: the command-line entry point. One file per subcommand (cmd_*.cpp).
#include <cstdio>
#include <exception>
#include <string>

#include "adakv_version.h"
#include "launcher/commands.h"
#include "launcher/job.h"

namespace {

constexpr const char* kBackends =
#ifdef ADAKV_HAVE_CUDA
    "cpu, cuda";
#else
    "cpu (built without CUDA)";
#endif

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun every rank runs this same main; rank 0 alone prints (see launcher/job.h).
  adakv::cli::Job job(&argc, &argv);
  const bool root = adakv::cli::is_job_root();
  CLI::App app{"adakv: tensor-parallel LLM inference with Ada-KV cache compression"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("adakv ") + ADAKV_VERSION + " (commit " +
                                        ADAKV_COMMIT + "; backends: " + kBackends + ")");

  adakv::cli::Runner selected;
  adakv::cli::add_inspect(app, selected);
  adakv::cli::add_generate(app, selected);
  adakv::cli::add_batch(app, selected);
  adakv::cli::add_bench(app, selected);
  adakv::cli::add_profile(app, selected);
  adakv::cli::add_eval(app, selected);
  adakv::cli::add_launch(app, selected);
  adakv::cli::add_serve(app, selected);
  adakv::cli::add_router(app, selected);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (104 for a value that does not convert...) become the contract's 2.
    const int code = root ? app.exit(e) : e.get_exit_code();
    return code == 0 ? 0 : 2;
  }
  try {
    return selected ? selected() : 2;
  } catch (const std::exception& e) {
    if (root) {
      std::fprintf(stderr, "adakv: error: %s\n", e.what());
    } else {
      std::fprintf(stderr, "adakv rank %d: error: %s\n", adakv::cli::job_world().rank, e.what());
    }
    return 1;
  }
}
