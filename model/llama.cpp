#include "model/llama.h"

#include <cmath>
#include <stdexcept>

#include "kernels/ops.h"
#include "model/gguf/gguf.h"

namespace adakv::model {

namespace k = adakv::kernels;

LlamaModel::LlamaModel(ModelConfig config, Weights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

LlamaModel LlamaModel::load(const std::string& path) {
  const auto file = gguf::GgufFile::open(path);
  auto config = ModelConfig::from_gguf(file);
  auto weights = Weights::load(file, config);
  return LlamaModel(std::move(config), std::move(weights));
}

void LlamaModel::forward(const int32_t* tokens, size_t n, KvCache& cache,
                         std::vector<float>& logits, size_t n_logits) const {
  const auto& c = config_;
  if (n == 0 || n_logits == 0 || n_logits > n) {
    throw std::invalid_argument("forward: need 1 <= n_logits <= n tokens");
  }
  const size_t D = c.d_model, F = c.ffn_dim, QW = c.q_width(), KW = c.kv_width();
  const size_t qkv_width = QW + 2 * KW;
  // Activations, token-major: x, h [n][D]; qkv [n][QW | KW | KW]; attn [n][QW];
  // gate_up [n][2F]; act [n][F].
  std::vector<float> x(n * D), h(n * D), qkv(n * qkv_width), attn(n * QW), gate_up(n * 2 * F),
      act(n * F);
  std::vector<int32_t> positions(n);
  for (size_t t = 0; t < n; ++t) positions[t] = static_cast<int32_t>(cache.next_position() + t);

  k::check(k::embed(x.data(), weights_.token_embd.data(), tokens, n, c.vocab_size, D), "embed");

  for (size_t l = 0; l < c.n_layers; ++l) {
    const auto& w = weights_.layers[l];
    k::check(k::rmsnorm(h.data(), x.data(), w.attn_norm.data(), n, D, c.rms_eps), "rmsnorm");
    k::check(k::matmul(qkv.data(), h.data(), w.wqkv.data(), n, qkv_width, D), "matmul");
    float* q = qkv.data();
    float* kk = q + QW;
    float* v = kk + KW;
    k::check(k::rope_adjacent(q, positions.data(), n, c.n_heads, c.head_dim, c.rope_dim, qkv_width,
                              c.rope_theta),
             "rope");
    k::check(k::rope_adjacent(kk, positions.data(), n, c.n_kv_heads, c.head_dim, c.rope_dim,
                              qkv_width, c.rope_theta),
             "rope");
    cache.append_and_attend(l, q, qkv_width, kk, v, qkv_width, n, attn.data());
    k::check(k::matmul(x.data(), attn.data(), w.wo.data(), n, D, QW, /*accumulate=*/true),
             "matmul");

    k::check(k::rmsnorm(h.data(), x.data(), w.ffn_norm.data(), n, D, c.rms_eps), "rmsnorm");
    k::check(k::matmul(gate_up.data(), h.data(), w.w_gate_up.data(), n, 2 * F, D), "matmul");
    k::check(k::swiglu(act.data(), gate_up.data(), n, F), "swiglu");
    k::check(k::matmul(x.data(), act.data(), w.w_down.data(), n, D, F, /*accumulate=*/true),
             "matmul");
  }
  cache.commit(n);

  const float* last = x.data() + (n - n_logits) * D;
  k::check(k::rmsnorm(h.data(), last, weights_.output_norm.data(), n_logits, D, c.rms_eps),
           "rmsnorm");
  logits.resize(n_logits * c.vocab_size);
  k::check(k::matmul(logits.data(), h.data(), weights_.lm_head().data(), n_logits, c.vocab_size, D),
           "matmul");
}

}  // namespace adakv::model
