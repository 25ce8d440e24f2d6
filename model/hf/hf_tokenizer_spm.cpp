#include "model/hf/hf_tokenizer_spm.h"

#include <unordered_map>

namespace adakv::hf {

std::vector<float> scores_from_merges(
    const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, size_t> id_of;
  id_of.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], i);
  std::vector<float> scores(tokens.size(), kUnmergedScore);
  std::vector<bool> made(tokens.size(), false);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto it = id_of.find(merges[rank].first + merges[rank].second);
    if (it == id_of.end() || made[it->second]) continue;
    made[it->second] = true;
    scores[it->second] = 0.0f - static_cast<float>(rank);  // +0 for rank 0
  }
  return scores;
}

}  // namespace adakv::hf
