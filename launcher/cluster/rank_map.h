// Where each rank of a cluster config runs and what it holds: its node, local rank, device and
// tp/pp/dp coordinates. Pure functions of the config, testable without MPI.
//
// Ranks fill the nodes' slots in the order the config lists the nodes, as mpirun does with the
// generated hostfile and --map-by slot (and srun with its default block distribution): node 0
// gets ranks 0 .. slots-1, and so on. A rank's device is its local rank on the cuda backend.
// The coordinates follow comm::ParallelLayout (TP fastest, then PP, then DP).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/parallel_layout.h"
#include "launcher/cluster/cluster_config.h"

namespace adakv::cluster {

struct RankPlacement {
  int rank = 0;
  int node = 0;        // index into ClusterConfig::nodes
  std::string host;    // that node's host
  int local_rank = 0;  // rank on its node
  int device = -1;     // GPU ordinal on the cuda backend; -1 = cpu
  int tp_rank = 0;
  int pp_rank = 0;
  int dp_rank = 0;
  std::optional<comm::LayerRange> layers;  // the rank's pipeline stage's layers, when known
};

// The layout of the config's job: config.job_ranks() ranks in config.pp stages and config.dp
// replicas. Throws ConfigError naming pipeline_parallel_size or data_parallel_size when it does
// not exist.
comm::ParallelLayout job_layout(const ClusterConfig& config);

// One entry per rank of the job, in rank order. model_layers > 0 fills `layers` (each stage's
// contiguous range, comm::stage_layers); 0 = not known, left out. Throws ConfigError when the
// nodes offer fewer ranks than the job has, or the model has fewer layers than stages.
std::vector<RankPlacement> rank_map(const ClusterConfig& config, int model_layers = 0);

// "" when every TP group of `map` runs on one node; otherwise why not, naming the layout, the
// first group that spans nodes, and its nodes with their ranks.
std::string tp_group_span(const ClusterConfig& config, const std::vector<RankPlacement>& map);

// The map as an aligned table with a header line:
//   rank  node   local  device  tp  pp  dp  layers
// device is the GPU ordinal or "cpu"; the layers column (first-last) only when known.
std::string rank_map_table(const std::vector<RankPlacement>& map);

}  // namespace adakv::cluster
