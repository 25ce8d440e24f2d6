// A cluster config (configs/cluster/*.yaml): where the ranks of one adakv job run and how mpirun
// starts them. The schema, key by key, is in cluster/DEPLOY.md:
//   name, backend (cpu|cuda), tp, pipeline_parallel_size, data_parallel_size,
//   allow_tp_across_nodes, model, threads_per_rank,
//   nodes: [{host, slots (cpu) | gpus (cuda)}],
//   mpi: {mpirun, launch_agent, btl, tcp_if_include, bind_to, oversubscribe, timeout, mca, env},
//   nccl: {env}
// Every error is a ConfigError whose message starts with the file name and names the key.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace adakv::model {
struct ModelConfig;
}

namespace adakv::cluster {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Backend { kCpu, kCuda };
const char* to_string(Backend b);

// Ordered key/value pairs: mpirun gets them in the order the file lists them.
using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct Node {
  std::string host;  // name mpirun reaches the node by (hostfile entry)
  int slots = 0;     // cpu backend: ranks this node may run; 0 = not given
  int gpus = 0;      // cuda backend: GPUs on this node, one rank each; 0 = not given

  // Ranks the node offers on the given backend.
  int ranks(Backend b) const { return b == Backend::kCuda ? gpus : slots; }
};

struct MpiSettings {
  std::string mpirun = "mpirun";      // program that starts the job
  std::string launch_agent;           // --mca plm_rsh_agent; "" = OpenMPI's default (ssh)
  std::vector<std::string> btl;       // --mca btl a,b,c; empty = OpenMPI's choice
  std::string tcp_if_include;         // --mca btl_tcp_if_include and oob_tcp_if_include
  std::string bind_to = "none";       // --bind-to: none|core|socket|numa|hwthread
  std::optional<bool> oversubscribe;  // unset = auto (slots exceed this machine's cores)
  int timeout_s = 0;                  // --timeout; 0 = none
  KeyValues mca;                      // further --mca key value
  KeyValues env;                      // -x KEY=VALUE
};

struct ClusterConfig {
  std::string source;  // the file (or label) it came from, for messages
  std::string name;    // display name; defaults to the file's stem
  Backend backend = Backend::kCpu;
  int tp = 0;  // ranks of one tensor-parallel group; left out of the file, it is the nodes'
               // ranks / (pp x dp)
  int pp = 1;  // pipeline_parallel_size: pipeline stages per replica
  int dp = 1;  // data_parallel_size: independent replicas
  // A TP group's all-reduces run every layer: spanning two nodes puts them on the network, so
  // the validation refuses it unless the file says so.
  bool allow_tp_across_nodes = false;
  std::string model;         // name or path (relative paths resolved against the file's folder);
                             // "" = the subcommand's default model
  int threads_per_rank = 0;  // OMP_NUM_THREADS of every rank; 0 = not set
  std::vector<Node> nodes;
  MpiSettings mpi;
  KeyValues nccl_env;  // NCCL_* variables, cuda backend only

  int total_ranks() const;                        // sum of the nodes' slots (cpu) or gpus (cuda)
  int job_ranks() const { return tp * pp * dp; }  // mpirun -np
  // Checks the whole config; throws ConfigError naming the file and the bad key.
  void validate() const;
};

// Parses YAML text; relative paths in it (model, mpi.launch_agent) are resolved against
// base_dir when it is not empty. Validates. Throws ConfigError.
ClusterConfig parse_cluster_config(const std::string& yaml_text, const std::string& source_name,
                                   const std::string& base_dir = "");
// Reads and parses a file; relative paths resolve against the file's folder. Throws ConfigError.
ClusterConfig load_cluster_config(const std::string& path);

// Checks that config.tp can shard the model (model/shard.h: tp divides the attention heads and the
// ffn width; tp divides the KV heads, or is a multiple of them when KV heads are replicated) and
// that every pipeline stage gets a layer. Throws ConfigError naming the file, the key and the
// model.
void check_tp_fits(const ClusterConfig& config, const model::ModelConfig& model,
                   const std::string& model_label);
// Reads the GGUF header at model_path and runs check_tp_fits; returns the model's layer count.
// Throws ConfigError.
int check_model_fits(const ClusterConfig& config, const std::string& model_path);

}  // namespace adakv::cluster
