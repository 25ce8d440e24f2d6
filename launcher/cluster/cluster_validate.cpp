// ClusterConfig::validate and the model checks: every rule a config must meet before mpirun
// sees it. Messages start with the file and name the key.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>

#include "launcher/cluster/cluster_config.h"
#include "launcher/cluster/rank_map.h"
#include "model/config.h"
#include "model/gguf/gguf.h"
#include "model/model_file.h"
#include "model/shard.h"

namespace adakv::cluster {
namespace {

bool is_env_name(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::isalnum(c) != 0 || c == '_'; });
}

bool is_mca_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::islower(c) != 0 || std::isdigit(c) != 0 || c == '_';
  });
}

// Host names as OpenMPI accepts them: letters, digits, '-' and '.'; no '_'.
std::string host_problem(const std::string& h) {
  if (h.empty()) return "is empty";
  if (h.find('_') != std::string::npos) return "has a '_' (OpenMPI rejects it in host names)";
  const bool ok = std::all_of(h.begin(), h.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '.' || c == ':';
  });
  return ok ? "" : "may only hold letters, digits, '-', '.' and ':'";
}

class Validator {
 public:
  explicit Validator(const ClusterConfig& c) : c_(c) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError(fmt::format("{}: {}: {}", c_.source, key, what));
  }

  void run() const {
    if (c_.tp < 1) fail("tp", fmt::format("{} must be at least 1", c_.tp));
    if (c_.threads_per_rank < 0) {
      fail("threads_per_rank", fmt::format("{} must be 0 (unset) or more", c_.threads_per_rank));
    }
    if (c_.pp < 1) fail("pipeline_parallel_size", fmt::format("{} must be at least 1", c_.pp));
    if (c_.dp < 1) fail("data_parallel_size", fmt::format("{} must be at least 1", c_.dp));
    nodes();
    // In 64 bits: tp x pp x dp of three 9-digit values overflows an int.
    const long long ranks = static_cast<long long>(c_.tp) * c_.pp * c_.dp;
    if (ranks > c_.total_ranks()) {
      const std::string key = c_.pp > 1   ? "pipeline_parallel_size"
                              : c_.dp > 1 ? "data_parallel_size"
                                          : "tp";
      const std::string layout =
          c_.pp * 1LL * c_.dp > 1
              ? fmt::format(" (tp {} x pipeline_parallel_size {} x data_parallel_size {})", c_.tp,
                            c_.pp, c_.dp)
              : "";
      fail(key, fmt::format("{} ranks{} do not fit: the nodes offer {} {} in all", ranks, layout,
                            c_.total_ranks(), c_.backend == Backend::kCuda ? "GPUs" : "slots"));
    }
    placement();
    mpi();
    env();
  }

 private:
  void nodes() const {
    if (c_.nodes.empty()) fail("nodes", "empty; list at least one node");
    std::set<std::string> seen;
    for (size_t i = 0; i < c_.nodes.size(); ++i) {
      const Node& n = c_.nodes[i];
      const std::string at = fmt::format("nodes[{}]", i);
      if (const std::string p = host_problem(n.host); !p.empty()) {
        fail(at + ".host", fmt::format("'{}' {}", n.host, p));
      }
      if (!seen.insert(n.host).second) fail(at + ".host", fmt::format("'{}' twice", n.host));
      if (n.slots < 0 || n.gpus < 0) fail(at, "slots and gpus must be positive");
      if (c_.backend == Backend::kCpu) {
        if (n.gpus > 0) fail(at + ".gpus", "GPUs need backend: cuda (this config is cpu)");
        if (n.slots == 0) fail(at + ".slots", "missing (the ranks this node may run)");
      } else {
        if (n.slots > 0) fail(at + ".slots", "backend cuda runs one rank per GPU: give gpus");
        if (n.gpus == 0) fail(at + ".gpus", "missing (the GPUs of this node)");
      }
    }
  }

  // Every TP group on one node, unless the file allows otherwise.
  void placement() const {
    if (c_.allow_tp_across_nodes) return;
    const std::string span = tp_group_span(c_, rank_map(c_));
    if (span.empty()) return;
    fail("tp", fmt::format("{}; its all-reduces would cross the network every layer. Keep TP "
                           "inside a node (tp dividing each node's {}, with "
                           "pipeline_parallel_size or data_parallel_size across the nodes), or "
                           "say allow_tp_across_nodes: true",
                           span, c_.backend == Backend::kCuda ? "GPUs" : "slots"));
  }

  void mpi() const {
    const MpiSettings& m = c_.mpi;
    if (m.mpirun.empty()) fail("mpi.mpirun", "is empty");
    static const std::set<std::string> binds = {"none", "core", "socket", "numa", "hwthread"};
    if (!binds.count(m.bind_to)) {
      fail("mpi.bind_to",
           fmt::format("'{}' is not one of none, core, socket, numa, hwthread", m.bind_to));
    }
    if (c_.backend == Backend::kCuda && m.oversubscribe.value_or(false)) {
      fail("mpi.oversubscribe", "backend cuda runs one rank per GPU and never oversubscribes");
    }
    if (m.timeout_s < 0) fail("mpi.timeout", "must be 0 (none) or more seconds");
    for (const auto& b : m.btl) {
      if (!is_mca_name(b)) fail("mpi.btl", fmt::format("'{}' is not a BTL name", b));
    }
    // The --mca keys the typed settings produce; giving them again under mpi.mca is ambiguous.
    std::map<std::string, std::string> typed;
    if (!m.btl.empty()) typed["btl"] = "mpi.btl";
    if (!m.tcp_if_include.empty()) {
      typed["btl_tcp_if_include"] = typed["oob_tcp_if_include"] = "mpi.tcp_if_include";
    }
    if (!m.launch_agent.empty()) typed["plm_rsh_agent"] = "mpi.launch_agent";
    std::set<std::string> mca_seen;
    for (const auto& [key, value] : m.mca) {
      if (!is_mca_name(key)) {
        fail("mpi.mca." + key, "not an MCA parameter name (lower case, digits and '_')");
      }
      if (!mca_seen.insert(key).second) fail("mpi.mca." + key, "given twice");
      if (const auto it = typed.find(key); it != typed.end()) {
        fail("mpi.mca." + key, fmt::format("already set by {}", it->second));
      }
    }
  }

  void env() const {
    std::set<std::string> seen;
    if (c_.threads_per_rank > 0) seen.insert("OMP_NUM_THREADS");
    // The launcher sets these from backend, pipeline_parallel_size and data_parallel_size.
    static const std::map<std::string, std::string> reserved = {
        {"ADAKV_BACKEND", "backend"},
        {"ADAKV_PP_SIZE", "pipeline_parallel_size"},
        {"ADAKV_DP_SIZE", "data_parallel_size"}};
    auto check = [&](const std::string& key, const std::string& name) {
      if (!is_env_name(name)) fail(key, "not an environment variable name");
      if (const auto it = reserved.find(name); it != reserved.end()) {
        fail(key, fmt::format("set by {}", it->second));
      }
      if (name == "OMP_NUM_THREADS" && c_.threads_per_rank > 0) {
        fail(key, "already set by threads_per_rank");
      }
      if (!seen.insert(name).second) fail(key, "set twice (mpi.env and nccl.env share names)");
    };
    for (const auto& kv : c_.mpi.env) check("mpi.env." + kv.first, kv.first);
    if (!c_.nccl_env.empty() && c_.backend != Backend::kCuda) {
      fail("nccl", "NCCL settings need backend: cuda (this config is cpu)");
    }
    for (const auto& kv : c_.nccl_env) {
      if (kv.first.rfind("NCCL_", 0) != 0) fail("nccl.env." + kv.first, "must start with NCCL_");
      check("nccl.env." + kv.first, kv.first);
    }
  }

  const ClusterConfig& c_;
};

}  // namespace

const char* to_string(Backend b) {
  return b == Backend::kCuda ? "cuda" : "cpu";
}

int ClusterConfig::total_ranks() const {
  int total = 0;
  for (const auto& n : nodes) total += std::max(n.ranks(backend), 0);
  return total;
}

void ClusterConfig::validate() const {
  Validator(*this).run();
}

void check_tp_fits(const ClusterConfig& config, const model::ModelConfig& model,
                   const std::string& model_label) {
  try {
    model::ShardLayout::make(model, 0, static_cast<size_t>(std::max(config.tp, 1)));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(fmt::format(
        "{}: tp: {} does not fit model {} ({} attention heads, {} KV heads): {}", config.source,
        config.tp, model_label, model.n_heads, model.n_kv_heads, e.what()));
  }
  if (model.n_layers > 0 && config.pp > static_cast<int>(model.n_layers)) {
    throw ConfigError(fmt::format(
        "{}: pipeline_parallel_size: {} stages need at least as many layers; model {} has {}",
        config.source, config.pp, model_label, model.n_layers));
  }
}

int check_model_fits(const ClusterConfig& config, const std::string& model_path) {
  model::ModelConfig m;
  try {
    m = model::ModelConfig::from_gguf(
        *model::open_model_file(model_path, model::ModelParts::kWeights));
  } catch (const std::exception& e) {
    throw ConfigError(
        fmt::format("{}: model: cannot read {}: {}", config.source, model_path, e.what()));
  }
  check_tp_fits(config, m, model_path);
  return static_cast<int>(m.n_layers);
}

}  // namespace adakv::cluster
