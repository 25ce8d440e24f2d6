// The attention output projections (W_o) of the models alive in this process, for scorers that
// weigh a token by what its value adds to a head's output (compression::Scoring::kOutputAware).
// A LlamaModel publishes its shard's W_o when it is built; a KV cache, which sees only queries,
// keys and values, finds it by the backend it runs on and its local head shape.
//
// Gram matrices: for local query head h of a layer, G_h = (W_o^h)^T W_o^h [Dh][Dh], where W_o^h is
// the [d_model][Dh] block of W_o's columns that head h's output goes through; then
// ||W_o^h v|| = sqrt(v^T G_h v), for any value row v of the KV head that h reads. Under tensor
// parallelism a rank holds W_o's columns of its own heads (RowParallel), so G_h is the same on
// every rank that holds head h, whatever the TP size.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/linear.h"

namespace adakv::model {

struct Weights;

class OutputProjection {
 public:
  // `local`: this shard's heads; `weights`: uploaded to `backend` (W_o of the layers the shard
  // holds; the others empty). The Linears are shared, not copied.
  OutputProjection(const ModelConfig& local, const Weights& weights, kernels::Backend& backend);

  const ModelConfig& local_config() const { return local_; }
  const kernels::Backend& backend() const { return *backend_; }
  // [local q head][Dh][Dh] of `layer`, row-major, computed on first use (thread-safe: the
  // serving loop and a profile may score at once). Throws std::out_of_range for a layer this
  // shard does not hold.
  const std::vector<float>& grams(size_t layer) const;

 private:
  ModelConfig local_;
  kernels::Backend* backend_;
  std::vector<Linear> wo_;  // [layer]
  mutable std::mutex mutex_;
  mutable std::vector<std::vector<float>> grams_;  // [layer], empty until computed
};

// Registers `projection` while it lives (the registry holds it weakly).
void publish_output_projection(const std::shared_ptr<const OutputProjection>& projection);

// The live projection whose shard runs on `backend` with `local`'s layers, heads and head_dim.
// Throws std::runtime_error when no live model matches or several do.
std::shared_ptr<const OutputProjection> find_output_projection(const kernels::Backend& backend,
                                                               const ModelConfig& local);

}  // namespace adakv::model
