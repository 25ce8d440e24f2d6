// adakv launch --cluster FILE [--dry-run] [--exec PROGRAM] -- SUBCOMMAND ARGS...
// Reads a cluster config (configs/cluster/*.yaml, schema in cluster/DEPLOY.md), checks it (and
// tp against the model's heads when the model file is on this machine), writes the hostfile to
// $TMPDIR (named after its content, reused by later runs) and execs mpirun, which runs this
// same adakv binary with SUBCOMMAND ARGS on every rank.
// `--model` from the config is appended when the subcommand takes one and ARGS do not give it.
// With --dry-run it prints the hostfile and the command as a shell script instead, followed by
// the rank map (node, local rank, device, tp/pp/dp coordinates, and each pipeline stage's layers
// when the model file is here) as comments. --exec runs
// PROGRAM ARGS on the ranks instead of an adakv subcommand (MPI test programs, probes).
// The exit code is mpirun's; so is the handling of Ctrl-C, except for `serve`, whose SIGINT and
// SIGTERM become a drain (run_forwarding_signals).
#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_config.h"
#include "launcher/cluster/mpirun_command.h"
#include "launcher/cluster/rank_map.h"
#include "launcher/commands.h"
#include "runtime/model_registry.h"

namespace adakv::cli {
namespace {

namespace fs = std::filesystem;

struct LaunchOptions {
  std::string cluster;
  bool dry_run = false;
  std::string exec;
  std::vector<std::string> args;
};

// The subcommand of `app` named args[0]; throws when there is none or it is `launch`.
CLI::App* find_subcommand(CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty()) {
    throw std::invalid_argument("adakv launch: give the subcommand after --, e.g. -- generate ...");
  }
  const auto found = app.get_subcommands([&](CLI::App* s) { return s->get_name() == args[0]; });
  if (found.empty() || args[0] == "launch") {
    throw std::invalid_argument(
        fmt::format("adakv launch: '{}' is not an adakv subcommand to run on the ranks", args[0]));
  }
  return found.front();
}

// Checks tp (and the pipeline stages) against the model when the model file is here and returns
// its layer count; says so and returns 0 when it is not.
int check_model_here(const cluster::ClusterConfig& config) {
  std::string path;
  try {
    path = runtime::resolve_model(config.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adakv launch: note: not checking tp against the model here: %s\n",
                 e.what());
    return 0;
  }
  return cluster::check_model_fits(config, path);
}

// The rank map as shell comments, so that the dry run stays a script that can be pasted.
std::string rank_map_comment(const cluster::ClusterConfig& config, int model_layers) {
  const auto map = cluster::rank_map(config, model_layers);
  std::string out = fmt::format(
      "# {} on {} node(s){}\n", cluster::job_layout(config).describe(), map.back().node + 1,
      config.allow_tp_across_nodes && !cluster::tp_group_span(config, map).empty()
          ? ", TP across nodes (allow_tp_across_nodes)"
          : "");
  const std::string table = cluster::rank_map_table(map);
  for (size_t at = 0; at < table.size();) {
    const size_t nl = table.find('\n', at);
    out += "#   " + table.substr(at, nl - at) + "\n";
    at = nl + 1;
  }
  return out;
}

// The config's name as part of a file name: anything but [A-Za-z0-9._-] becomes '_'.
std::string file_safe(std::string name) {
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return name;
}

// FNV-1a: names the hostfile after its content, so that equal configs share one file.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Writes the hostfile to $TMPDIR (or /tmp) as adakv-UID-NAME-HASH.hostfile and returns the path.
// The name depends only on the user and the content, so the file outlives the exec'd mpirun
// without piling up; it is written to a fresh temporary and renamed into place (atomic, and
// never through a planted link).
std::string write_hostfile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TMPDIR");
  const std::string base = fmt::format("{}/adakv-{}-{}-{:016x}", dir && *dir ? dir : "/tmp",
                                       getuid(), file_safe(name), fnv1a(text));
  std::string tmp = base + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  const std::string path = base + ".hostfile";
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write the hostfile " + path + ": " + std::strerror(errno));
  }
  return path;
}

// Replaces this process with argv (PATH lookup): mpirun then gets the terminal's signals
// itself and its exit code is ours. Returns only when exec fails.
int exec_command(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(cargv[0], cargv.data());
  std::fprintf(stderr, "adakv launch: cannot run %s: %s\n", cargv[0], std::strerror(errno));
  return 127;
}

// A server under mpirun: SIGINT and SIGTERM to mpirun itself would kill every rank a second
// later (mpirun's own policy) and exit 1. So mpirun runs as a child in its own process group
// (the terminal's Ctrl-C reaches only this process) with stdin from /dev/null, and each SIGINT or
// SIGTERM here becomes a SIGUSR1 to mpirun, which forwards it to every rank: `adakv serve`
// drains for --drain-s (a second signal ends what is left) and every rank exits 0. The exit code
// is mpirun's.
volatile sig_atomic_t g_signals = 0;

void count_signal(int) {
  g_signals = g_signals + 1;
}

int run_forwarding_signals(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  struct sigaction sa {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));
  if (child == 0) {
    setpgid(0, 0);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    for (int sig : {SIGINT, SIGTERM}) signal(sig, SIG_DFL);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "adakv launch: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  // Polled rather than woken by EINTR: a signal between a check and a blocking wait would
  // otherwise wait for the child's end.
  int forwarded = 0, status = 0;
  for (;;) {
    while (forwarded < g_signals) {
      ++forwarded;
      std::fprintf(stderr, "[adakv launch] signal: asking the ranks to %s (SIGUSR1 to mpirun)\n",
                   forwarded == 1 ? "drain" : "stop now");
      kill(child, SIGUSR1);
    }
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    }
    usleep(50 * 1000);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int run_launch(CLI::App& app, const LaunchOptions& o) {
  cluster::ClusterConfig config = cluster::load_cluster_config(o.cluster);
  const int model_layers = check_model_here(config);
  // A server runs until it is stopped: the config's job timeout is for batch work.
  if (!o.args.empty() && o.args[0] == "serve") config.mpi.timeout_s = 0;

  std::vector<std::string> program;
  if (!o.exec.empty()) {
    program = {o.exec};
    program.insert(program.end(), o.args.begin(), o.args.end());
  } else {
    CLI::App* sub = find_subcommand(app, o.args);
    const bool takes_model = sub->get_option_no_throw("--model") != nullptr;
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    program = cluster::rank_argv(self, o.args, config.model, takes_model);
  }
  const std::string hostfile = cluster::hostfile_text(config);
  const cluster::LaunchHost host = cluster::LaunchHost::current();

  if (o.dry_run) {
    const std::string path = fmt::format("/tmp/adakv-{}.hostfile", file_safe(config.name));
    std::printf("cat > %s <<'EOF'\n%sEOF\n%s\n%s", cluster::shell_quote(path).c_str(),
                hostfile.c_str(),
                cluster::shell_join(cluster::mpirun_argv(config, path, host, program)).c_str(),
                rank_map_comment(config, config.pp > 1 ? model_layers : 0).c_str());
    return 0;
  }
  const auto argv =
      cluster::mpirun_argv(config, write_hostfile(config.name, hostfile), host, program);
  std::fprintf(stderr, "[adakv launch] %s\n", cluster::shell_join(argv).c_str());
  if (o.exec.empty() && o.args[0] == "serve") return run_forwarding_signals(argv);
  return exec_command(argv);
}

}  // namespace

void add_launch(CLI::App& app, Runner& selected) {
  auto* sub = app.add_subcommand(
      "launch", "Run a subcommand as the ranks of an mpirun job described by a cluster config");
  auto o = std::make_shared<LaunchOptions>();
  sub->add_option("--cluster", o->cluster, "Cluster config (configs/cluster/*.yaml)")->required();
  sub->add_flag("--dry-run", o->dry_run,
                "Print the hostfile, the mpirun command and the rank map; run nothing");
  sub->add_option("--exec", o->exec,
                  "Run PROGRAM ARGS on the ranks instead of an adakv subcommand");
  sub->add_option("ARGS", o->args, "After --: the adakv subcommand and its arguments");
  sub->callback([o, &app, &selected] {
    selected = [o, &app] {
      try {
        return run_launch(app, *o);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
      } catch (const cluster::ConfigError& e) {
        std::fprintf(stderr, "adakv launch: %s\n", e.what());
        return 2;
      }
    };
  });
}

}  // namespace adakv::cli
