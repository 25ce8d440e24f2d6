#include "model/output_projection.h"

#include <stdexcept>
#include <string>

#include "model/weights.h"

namespace adakv::model {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::weak_ptr<const OutputProjection>>& registry() {
  static std::vector<std::weak_ptr<const OutputProjection>> r;
  return r;
}

bool same_heads(const ModelConfig& a, const ModelConfig& b) {
  return a.n_layers == b.n_layers && a.n_heads == b.n_heads && a.n_kv_heads == b.n_kv_heads &&
         a.head_dim == b.head_dim && a.d_model == b.d_model;
}

}  // namespace

OutputProjection::OutputProjection(const ModelConfig& local, const Weights& weights,
                                   kernels::Backend& backend)
    : local_(local), backend_(&backend), grams_(local.n_layers) {
  for (const auto& layer : weights.layers) wo_.push_back(layer.wo);
  wo_.resize(local.n_layers);
}

const std::vector<float>& OutputProjection::grams(size_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (layer >= wo_.size() || wo_[layer].empty() || !wo_[layer].uploaded()) {
    throw std::out_of_range("output projection: layer " + std::to_string(layer) +
                            " is not held by this shard");
  }
  std::vector<float>& g = grams_[layer];
  if (!g.empty()) return g;
  const Linear& wo = wo_[layer];
  const size_t Hq = local_.n_heads, Dh = local_.head_dim, QW = Hq * Dh, D = wo.out_features();
  if (wo.in_features() != QW) {
    throw std::logic_error("output projection: W_o of layer " + std::to_string(layer) + " takes " +
                           std::to_string(wo.in_features()) + " inputs, the heads give " +
                           std::to_string(QW));
  }
  // W_o's columns through the layer's own product: row i of I W_o^T is column i of W_o. Each
  // output sums one nonzero term, so a column is the same whatever shard holds it.
  std::vector<float> eye(QW * QW, 0.0f);
  for (size_t i = 0; i < QW; ++i) eye[i * QW + i] = 1.0f;
  const kernels::Buffer x = backend_->allocate(eye.size() * sizeof(float));
  const kernels::Buffer y = backend_->allocate(QW * D * sizeof(float));
  backend_->upload(x.data(), eye.data(), eye.size() * sizeof(float));
  wo.forward(*backend_, y.as<float>(), x.as<float>(), QW);
  std::vector<float> cols(QW * D);
  backend_->download(cols.data(), y.data(), cols.size() * sizeof(float));
  g.assign(Hq * Dh * Dh, 0.0f);
  for (size_t h = 0; h < Hq; ++h) {
    for (size_t a = 0; a < Dh; ++a) {
      const float* ca = cols.data() + (h * Dh + a) * D;
      for (size_t b = a; b < Dh; ++b) {
        const float* cb = cols.data() + (h * Dh + b) * D;
        double s = 0;
        for (size_t n = 0; n < D; ++n) s += double(ca[n]) * double(cb[n]);
        g[(h * Dh + a) * Dh + b] = g[(h * Dh + b) * Dh + a] = float(s);
      }
    }
  }
  return g;
}

void publish_output_projection(const std::shared_ptr<const OutputProjection>& projection) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  std::erase_if(r, [](const auto& w) { return w.expired(); });
  r.push_back(projection);
}

std::shared_ptr<const OutputProjection> find_output_projection(const kernels::Backend& backend,
                                                               const ModelConfig& local) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::shared_ptr<const OutputProjection> found;
  size_t matches = 0;
  for (const auto& w : registry()) {
    auto p = w.lock();
    if (!p || &p->backend() != &backend || !same_heads(p->local_config(), local)) continue;
    found = std::move(p);
    ++matches;
  }
  if (matches == 0) {
    throw std::runtime_error(
        "output-aware scoring: no model on this backend publishes its output projection");
  }
  if (matches > 1) {
    throw std::runtime_error("output-aware scoring: " + std::to_string(matches) +
                             " live models on this backend have the cache's head shape");
  }
  return found;
}

}  // namespace adakv::model
