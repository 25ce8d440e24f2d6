// YAML -> ClusterConfig: strict (unknown keys at any level are errors), every error names the
// file, the line where known, and the key.
#include "launcher/cluster/cluster_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "comm/parallel_layout.h"

namespace adakv::cluster {
namespace {

namespace fs = std::filesystem;

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& key,
                         const std::string& what) const {
    const int line = at.Mark().line;
    if (line >= 0) throw ConfigError(fmt::format("{}:{}: {}: {}", source_, line + 1, key, what));
    throw ConfigError(fmt::format("{}: {}: {}", source_, key, what));
  }

  // Throws on any key of `map` that is not in `known`; `where` names the map in messages.
  void check_keys(const YAML::Node& map, const std::string& where,
                  const std::vector<std::string>& known) const {
    if (!map.IsMap()) fail(map, where.empty() ? "top level" : where, "expected a map of keys");
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(kv.first, where.empty() ? key : where + "." + key,
             fmt::format("unknown key (expected one of: {})", fmt::join(known, ", ")));
      }
    }
  }

  std::string scalar(const YAML::Node& n, const std::string& key) const {
    if (n.IsNull()) fail(n, key, "has no value");
    if (!n.IsScalar()) fail(n, key, "expected a single value, not a list or map");
    return n.Scalar();
  }

  int integer(const YAML::Node& n, const std::string& key) const {
    const std::string s = scalar(n, key);
    const bool digits = !s.empty() && s.size() <= 9 &&
                        std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(),
                                    [](unsigned char c) { return std::isdigit(c) != 0; }) &&
                        s != "-";
    if (!digits) fail(n, key, fmt::format("'{}' is not an integer", s));
    return std::stoi(s);
  }

  bool boolean(const YAML::Node& n, const std::string& key) const {
    const std::string s = scalar(n, key);
    if (s == "true") return true;
    if (s == "false") return false;
    fail(n, key, fmt::format("'{}' is not true or false", s));
  }

  // A list of values, or one comma-separated value.
  std::vector<std::string> list(const YAML::Node& n, const std::string& key) const {
    std::vector<std::string> out;
    if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) {
        out.push_back(scalar(n[i], fmt::format("{}[{}]", key, i)));
      }
      return out;
    }
    std::stringstream ss(scalar(n, key));
    for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
    return out;
  }

  KeyValues key_values(const YAML::Node& n, const std::string& key) const {
    if (n.IsNull()) return {};
    if (!n.IsMap()) fail(n, key, "expected a map of NAME: value");
    KeyValues out;
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      out.emplace_back(k, scalar(kv.second, key + "." + k));
    }
    return out;
  }

 private:
  std::string source_;
};

// A relative path (it has a '/') is taken relative to the config file's folder.
std::string resolve_path(const std::string& value, const std::string& base_dir) {
  if (base_dir.empty() || value.find('/') == std::string::npos || fs::path(value).is_absolute()) {
    return value;
  }
  return (fs::path(base_dir) / value).lexically_normal().string();
}

Node parse_node(const Reader& r, const YAML::Node& n, size_t i) {
  const std::string where = fmt::format("nodes[{}]", i);
  r.check_keys(n, where, {"host", "slots", "gpus"});
  Node node;
  if (!n["host"]) r.fail(n, where, "missing host (the name mpirun reaches the node by)");
  node.host = r.scalar(n["host"], where + ".host");
  if (n["slots"]) node.slots = r.integer(n["slots"], where + ".slots");
  if (n["gpus"]) node.gpus = r.integer(n["gpus"], where + ".gpus");
  if (node.slots == 0 && n["slots"]) r.fail(n["slots"], where + ".slots", "must be at least 1");
  if (node.gpus == 0 && n["gpus"]) r.fail(n["gpus"], where + ".gpus", "must be at least 1");
  return node;
}

MpiSettings parse_mpi(const Reader& r, const YAML::Node& n, const std::string& base_dir) {
  r.check_keys(n, "mpi",
               {"mpirun", "launch_agent", "btl", "tcp_if_include", "bind_to", "oversubscribe",
                "timeout", "mca", "env"});
  MpiSettings m;
  if (n["mpirun"]) m.mpirun = resolve_path(r.scalar(n["mpirun"], "mpi.mpirun"), base_dir);
  if (n["launch_agent"]) {
    m.launch_agent = resolve_path(r.scalar(n["launch_agent"], "mpi.launch_agent"), base_dir);
  }
  if (n["btl"]) m.btl = r.list(n["btl"], "mpi.btl");
  if (n["tcp_if_include"]) m.tcp_if_include = r.scalar(n["tcp_if_include"], "mpi.tcp_if_include");
  if (n["bind_to"]) m.bind_to = r.scalar(n["bind_to"], "mpi.bind_to");
  if (n["oversubscribe"] && r.scalar(n["oversubscribe"], "mpi.oversubscribe") != "auto") {
    m.oversubscribe = r.boolean(n["oversubscribe"], "mpi.oversubscribe");
  }
  if (n["timeout"]) m.timeout_s = r.integer(n["timeout"], "mpi.timeout");
  if (n["mca"]) m.mca = r.key_values(n["mca"], "mpi.mca");
  if (n["env"]) m.env = r.key_values(n["env"], "mpi.env");
  return m;
}

ClusterConfig parse_root(const Reader& r, const YAML::Node& root, const std::string& source,
                         const std::string& base_dir) {
  if (!root || root.IsNull()) {
    throw ConfigError(source + ": empty config (expected a map with backend, tp and nodes)");
  }
  r.check_keys(root, "",
               {"name", "backend", "tp", "pipeline_parallel_size", "data_parallel_size",
                "allow_tp_across_nodes", "model", "threads_per_rank", "nodes", "mpi", "nccl"});
  ClusterConfig c;
  c.source = source;
  c.name = root["name"] ? r.scalar(root["name"], "name") : fs::path(source).stem().string();

  if (!root["backend"]) r.fail(root, "backend", "missing (cpu or cuda)");
  const std::string backend = r.scalar(root["backend"], "backend");
  if (backend == "cpu") {
    c.backend = Backend::kCpu;
  } else if (backend == "cuda") {
    c.backend = Backend::kCuda;
  } else {
    r.fail(root["backend"], "backend", fmt::format("'{}' is not cpu or cuda", backend));
  }

  // tp left out stays 0 here: parse_cluster_config derives it from the nodes.
  if (root["tp"]) c.tp = r.integer(root["tp"], "tp");
  if (root["pipeline_parallel_size"]) {
    c.pp = r.integer(root["pipeline_parallel_size"], "pipeline_parallel_size");
  }
  if (root["data_parallel_size"]) {
    c.dp = r.integer(root["data_parallel_size"], "data_parallel_size");
  }
  if (root["allow_tp_across_nodes"]) {
    c.allow_tp_across_nodes = r.boolean(root["allow_tp_across_nodes"], "allow_tp_across_nodes");
  }
  if (root["model"]) c.model = resolve_path(r.scalar(root["model"], "model"), base_dir);
  if (root["threads_per_rank"]) {
    c.threads_per_rank = r.integer(root["threads_per_rank"], "threads_per_rank");
  }

  if (!root["nodes"]) r.fail(root, "nodes", "missing (a list of {host, slots} or {host, gpus})");
  const YAML::Node nodes = root["nodes"];
  if (!nodes.IsNull() && !nodes.IsSequence()) r.fail(nodes, "nodes", "expected a list of nodes");
  for (size_t i = 0; i < nodes.size(); ++i) c.nodes.push_back(parse_node(r, nodes[i], i));

  if (root["mpi"] && !root["mpi"].IsNull()) c.mpi = parse_mpi(r, root["mpi"], base_dir);
  if (root["nccl"] && !root["nccl"].IsNull()) {
    r.check_keys(root["nccl"], "nccl", {"env"});
    if (root["nccl"]["env"]) c.nccl_env = r.key_values(root["nccl"]["env"], "nccl.env");
  }
  return c;
}

// The TP size of a file without `tp`: every rank the nodes offer, split into pp x dp groups.
// Where the nodes or the sizes are themselves wrong, 1 lets validate() name that key instead.
int implied_tp(const ClusterConfig& c) {
  const int ranks = c.total_ranks();
  if (ranks < 1 || c.pp < 1 || c.dp < 1) return 1;
  try {
    // pp x dp larger than the ranks (checked in 64 bits: the file may hold any 9-digit value).
    if (static_cast<long long>(c.pp) * c.dp > ranks) {
      throw std::invalid_argument(fmt::format(
          "{} ranks do not split into {} data-parallel replica(s) of {} pipeline stage(s)", ranks,
          c.dp, c.pp));
    }
    return comm::ParallelLayout::from_world(ranks, c.pp, c.dp).tp;
  } catch (const std::invalid_argument& e) {
    const std::string key = c.pp > 1 && c.dp > 1 ? "pipeline_parallel_size x data_parallel_size"
                            : c.pp > 1           ? "pipeline_parallel_size"
                                                 : "data_parallel_size";
    throw ConfigError(
        fmt::format("{}: {}: {} (tp is left out, so the job runs all {} {} of the nodes)", c.source,
                    key, e.what(), ranks, c.backend == Backend::kCuda ? "GPUs" : "slots"));
  }
}

}  // namespace

ClusterConfig parse_cluster_config(const std::string& yaml_text, const std::string& source_name,
                                   const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}: invalid YAML: {}", source_name, e.mark.line + 1, e.msg));
  }
  const Reader reader(source_name);
  ClusterConfig c = parse_root(reader, root, source_name, base_dir);
  if (!root["tp"]) c.tp = implied_tp(c);
  c.validate();
  return c;
}

ClusterConfig load_cluster_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the cluster config", path));
  std::stringstream text;
  text << in.rdbuf();
  const std::string dir = fs::absolute(fs::path(path)).parent_path().string();
  return parse_cluster_config(text.str(), path, dir);
}

}  // namespace adakv::cluster
