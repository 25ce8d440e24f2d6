#include "launcher/cluster/mpirun_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <thread>

namespace adakv::cluster {

LaunchHost LaunchHost::current() {
  LaunchHost h;
  h.is_root = geteuid() == 0;
  h.cores = std::max(1u, std::thread::hardware_concurrency());
  return h;
}

std::string hostfile_text(const ClusterConfig& config) {
  std::string out = fmt::format("# adakv cluster '{}' ({}, backend {}, tp {}{}{})\n", config.name,
                                config.source, to_string(config.backend), config.tp,
                                config.pp > 1 ? fmt::format(", pp {}", config.pp) : "",
                                config.dp > 1 ? fmt::format(", dp {}", config.dp) : "");
  for (const auto& n : config.nodes) {
    out += fmt::format("{} slots={}\n", n.host, n.ranks(config.backend));
  }
  return out;
}

bool wants_oversubscribe(const ClusterConfig& config, unsigned cores) {
  if (config.backend == Backend::kCuda) return false;
  if (config.mpi.oversubscribe) return *config.mpi.oversubscribe;
  return std::any_of(config.nodes.begin(), config.nodes.end(),
                     [&](const Node& n) { return n.slots > static_cast<int>(cores); });
}

std::vector<std::string> rank_argv(const std::string& exe, const std::vector<std::string>& args,
                                   const std::string& model, bool takes_model) {
  std::vector<std::string> argv{exe};
  argv.insert(argv.end(), args.begin(), args.end());
  const bool has_model = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == "--model" || a.rfind("--model=", 0) == 0;
  });
  if (takes_model && !model.empty() && !has_model) {
    argv.push_back("--model");
    argv.push_back(model);
  }
  return argv;
}

KeyValues layout_env(const ClusterConfig& config) {
  KeyValues out;
  if (config.pp != 1) out.emplace_back("ADAKV_PP_SIZE", std::to_string(config.pp));
  if (config.dp != 1) out.emplace_back("ADAKV_DP_SIZE", std::to_string(config.dp));
  return out;
}

std::vector<std::string> mpirun_argv(const ClusterConfig& config, const std::string& hostfile_path,
                                     const LaunchHost& host,
                                     const std::vector<std::string>& program) {
  const MpiSettings& m = config.mpi;
  std::vector<std::string> argv{m.mpirun};
  if (host.is_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--hostfile", hostfile_path, "-np", std::to_string(config.job_ranks()),
                           "--map-by", "slot", "--bind-to", m.bind_to});
  if (wants_oversubscribe(config, host.cores)) argv.push_back("--oversubscribe");
  if (m.timeout_s > 0) argv.insert(argv.end(), {"--timeout", std::to_string(m.timeout_s)});

  auto mca = [&](const std::string& key, const std::string& value) {
    argv.insert(argv.end(), {"--mca", key, value});
  };
  if (!m.btl.empty()) mca("btl", fmt::format("{}", fmt::join(m.btl, ",")));
  if (!m.tcp_if_include.empty()) {
    mca("btl_tcp_if_include", m.tcp_if_include);
    mca("oob_tcp_if_include", m.tcp_if_include);
  }
  if (!m.launch_agent.empty()) mca("plm_rsh_agent", m.launch_agent);
  for (const auto& [key, value] : m.mca) mca(key, value);

  auto env = [&](const std::string& key, const std::string& value) {
    argv.insert(argv.end(), {"-x", key + "=" + value});
  };
  // The ranks build the config's backend (runtime::Worker reads ADAKV_BACKEND).
  env("ADAKV_BACKEND", to_string(config.backend));
  // The job splits its ranks into stages and replicas from these (TP is what is left); a job
  // without them is one TP group, so they are passed only when they say otherwise.
  for (const auto& [key, value] : layout_env(config)) env(key, value);
  if (config.threads_per_rank > 0) env("OMP_NUM_THREADS", std::to_string(config.threads_per_rank));
  for (const auto& [key, value] : m.env) env(key, value);
  for (const auto& [key, value] : config.nccl_env) env(key, value);

  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::string shell_quote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || std::string_view("@%+=:,./_-").find(c) != std::string::npos;
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& w : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace adakv::cluster
