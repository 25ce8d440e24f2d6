#include "launcher/cluster/rank_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace adakv::cluster {
namespace {

// "3" or "0-7": a contiguous run of ranks.
std::string rank_span(int first, int last) {
  return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

}  // namespace

comm::ParallelLayout job_layout(const ClusterConfig& config) {
  try {
    return comm::ParallelLayout::from_world(config.job_ranks(), config.pp, config.dp);
  } catch (const std::invalid_argument& e) {
    const std::string key = config.pp < 1   ? "pipeline_parallel_size"
                            : config.dp < 1 ? "data_parallel_size"
                                            : "tp";
    throw ConfigError(fmt::format("{}: {}: {}", config.source, key, e.what()));
  }
}

std::vector<RankPlacement> rank_map(const ClusterConfig& config, int model_layers) {
  const comm::ParallelLayout layout = job_layout(config);
  if (model_layers > 0 && model_layers < layout.pp) {
    throw ConfigError(
        fmt::format("{}: pipeline_parallel_size: {} stages need at least as many "
                    "layers, the model has {}",
                    config.source, layout.pp, model_layers));
  }
  std::vector<RankPlacement> map;
  for (size_t n = 0; n < config.nodes.size() && static_cast<int>(map.size()) < layout.world_size();
       ++n) {
    const int slots = config.nodes[n].ranks(config.backend);
    for (int local = 0; local < slots && static_cast<int>(map.size()) < layout.world_size();
         ++local) {
      comm::World w;
      w.rank = static_cast<int>(map.size());
      w = layout.place(w);
      RankPlacement p;
      p.rank = w.rank;
      p.node = static_cast<int>(n);
      p.host = config.nodes[n].host;
      p.local_rank = local;
      p.device = config.backend == Backend::kCuda ? local : -1;
      p.tp_rank = w.tp_rank;
      p.pp_rank = w.pp_rank;
      p.dp_rank = w.dp_rank;
      if (model_layers > 0) p.layers = comm::stage_layers(model_layers, layout.pp, w.pp_rank);
      map.push_back(p);
    }
  }
  if (static_cast<int>(map.size()) < layout.world_size()) {
    throw ConfigError(fmt::format("{}: nodes: {} ranks ({}) do not fit: the nodes offer {}",
                                  config.source, layout.world_size(), layout.describe(),
                                  map.size()));
  }
  return map;
}

std::string tp_group_span(const ClusterConfig& config, const std::vector<RankPlacement>& map) {
  const comm::ParallelLayout layout = job_layout(config);
  for (size_t first = 0; first < map.size(); first += layout.tp) {
    const size_t end = std::min(map.size(), first + layout.tp);
    if (map[first].node == map[end - 1].node) continue;  // ranks fill nodes in order
    std::vector<std::string> nodes;
    for (size_t i = first; i < end;) {
      size_t j = i;
      while (j + 1 < end && map[j + 1].node == map[i].node) ++j;
      nodes.push_back(
          fmt::format("{} (ranks {})", map[i].host, rank_span(map[i].rank, map[j].rank)));
      i = j + 1;
    }
    return fmt::format("layout {} puts TP group {} (ranks {}) on {} nodes: {}", layout.describe(),
                       first / layout.tp, rank_span(map[first].rank, map[end - 1].rank),
                       nodes.size(), fmt::join(nodes, ", "));
  }
  return "";
}

std::string rank_map_table(const std::vector<RankPlacement>& map) {
  const bool layers = !map.empty() && map.front().layers.has_value();
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "node", "local", "device", "tp", "pp", "dp"});
  if (layers) rows.front().push_back("layers");
  for (const auto& p : map) {
    rows.push_back({std::to_string(p.rank), p.host, std::to_string(p.local_rank),
                    p.device < 0 ? "cpu" : std::to_string(p.device), std::to_string(p.tp_rank),
                    std::to_string(p.pp_rank), std::to_string(p.dp_rank)});
    if (layers) rows.back().push_back(rank_span(p.layers->begin, p.layers->end - 1));
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      // The host column is text (left-aligned); the others are numbers (right-aligned).
      if (c > 0) line += "  ";
      line += c == 1 ? fmt::format("{:<{}}", row[c], width[c])
                     : fmt::format("{:>{}}", row[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace adakv::cluster
