// ClusterConfig -> the hostfile and the mpirun command line of one adakv job. Pure functions:
// what they need to know about the launching machine comes in a LaunchHost value.
//
// The command, in order:
//   mpirun [--allow-run-as-root] --hostfile H -np TPxPPxDP --map-by slot --bind-to B
//          [--oversubscribe] [--timeout S] [--mca k v]... [-x K=V]... PROGRAM ARGS...
// --map-by slot fills each node before the next, so ranks are contiguous per node and a rank's
// local rank (OMPI_COMM_WORLD_LOCAL_RANK) is its GPU on the cuda backend (rank_map.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/cluster/cluster_config.h"

namespace adakv::cluster {

struct LaunchHost {
  bool is_root = false;  // mpirun refuses root without --allow-run-as-root
  unsigned cores = 1;    // cores of this machine; nodes are taken to have as many
  static LaunchHost current();
};

// OpenMPI hostfile: a comment naming the config, then "HOST slots=N" per node.
std::string hostfile_text(const ClusterConfig& config);

// mpi.oversubscribe when given; otherwise (auto) true when a cpu node has more slots than
// `cores`. Always false on the cuda backend: a GPU runs one rank.
bool wants_oversubscribe(const ClusterConfig& config, unsigned cores);

// The argv every rank runs: exe, args, then `--model MODEL` when takes_model, model is not ""
// and args do not already give --model.
std::vector<std::string> rank_argv(const std::string& exe, const std::vector<std::string>& args,
                                   const std::string& model, bool takes_model);

// The layout's environment for every rank: ADAKV_PP_SIZE when pipeline_parallel_size is not 1,
// ADAKV_DP_SIZE when data_parallel_size is not 1 (in that order); empty for a plain TP job.
KeyValues layout_env(const ClusterConfig& config);

// The full mpirun argv (argv[0] is config.mpi.mpirun); program is what rank_argv returned.
std::vector<std::string> mpirun_argv(const ClusterConfig& config, const std::string& hostfile_path,
                                     const LaunchHost& host,
                                     const std::vector<std::string>& program);

// POSIX-shell quoting, for printing a command that can be pasted back.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace adakv::cluster
