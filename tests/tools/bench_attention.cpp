// Micro benchmark of the CPU attention kernels on the SmolLM2-135M shapes (Hq = 9, Hkv = 3,
// Dh = 64), per dispatch level and at 1 and 2 threads:
//  - attention_paged decode (1 new query) over 1k and 8k tokens per head, f32 / bf16 / e4m3
//    blocks of 16 tokens, in GB/s of K/V bytes read. Each call reads another "layer" of a set
//    whose total is twice the size of a large L3, as decode of a many-layer model does.
//  - attention_paged with 16 new queries (a prefill chunk over a paged cache) at 8k, GFLOP/s.
//  - attention_causal prefill of 8k tokens over a contiguous float32 cache, GFLOP/s.
// Every figure is the median time of several calls.
//   adakv_bench_attention [prefill_tokens]   (default 8192)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace k = adakv::kernels;

namespace {

constexpr size_t kHq = 9, kHkv = 3, kDh = 64, kBlockTokens = 16;
constexpr size_t kColdBytes = size_t{96} << 20;  // data touched per round of calls

// Median seconds of one call: calls until 0.5 s have passed (at least 5; at most 200).
double median_seconds(const std::function<void()>& call) {
  call();  // warm-up
  std::vector<double> times;
  double total = 0;
  while ((total < 0.5 || times.size() < 5) && times.size() < 200) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(t);
    total += t;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// `layers` independent paged caches of one sequence whose Hkv heads hold `length` tokens each,
// with block ids shuffled over the pool.
struct PagedSet {
  k::KvBlockLayout layout;
  size_t layers = 0, n_queries = 0;
  std::vector<uint8_t> pool;
  std::vector<std::vector<int32_t>> ids;  // [layer * Hkv + head]
  std::vector<const int32_t*> id_ptrs;
  std::vector<uint32_t> lengths;
  std::vector<float> q, out;
  std::vector<k::PagedSequence> seqs;  // [layer]
  size_t next = 0;

  PagedSet(k::KvDtype dtype, size_t length, size_t nq, std::mt19937& rng) {
    layout = {kBlockTokens, kDh, dtype};
    n_queries = nq;
    const size_t blocks_per_head = (length + kBlockTokens - 1) / kBlockTokens;
    const size_t layer_bytes = kHkv * blocks_per_head * layout.block_bytes();
    layers = std::max<size_t>(1, kColdBytes / layer_bytes);
    const size_t n_blocks = layers * kHkv * blocks_per_head;
    pool.resize(n_blocks * layout.block_bytes());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> kv(kBlockTokens * kDh);
    for (size_t b = 0; b < n_blocks; ++b) {
      for (auto& x : kv) x = normal(rng);
      k::check(k::kv_block_write(pool.data() + b * layout.block_bytes(), layout, 0, kv.data(),
                                 kv.data(), kBlockTokens, kDh),
               "kv_block_write");
    }
    std::vector<int32_t> order(n_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    ids.resize(layers * kHkv);
    for (size_t h = 0; h < ids.size(); ++h) {
      ids[h].assign(order.begin() + h * blocks_per_head, order.begin() + (h + 1) * blocks_per_head);
      id_ptrs.push_back(ids[h].data());
    }
    lengths.assign(kHkv, static_cast<uint32_t>(length));
    q.resize(nq * kHq * kDh);
    for (auto& x : q) x = normal(rng);
    out.resize(nq * kHq * kDh);
    for (size_t l = 0; l < layers; ++l) {
      seqs.push_back({id_ptrs.data() + l * kHkv, lengths.data(), nq, q.data(), kHq * kDh,
                      out.data(), kHq * kDh});
    }
  }

  void call() {
    k::check(k::attention_paged(&seqs[next], 1, pool.data(), layout, kHq, kHkv,
                                1.0f / std::sqrt(float(kDh))),
             "attention_paged");
    next = (next + 1) % layers;
  }

  // K and V bytes one call reads (the blocks of one layer, scales included).
  double bytes_per_call() const {
    return double(kHkv) * ((lengths[0] + kBlockTokens - 1) / kBlockTokens) * layout.block_bytes();
  }
  // Multiply-adds of QK and PV, counted as 2 flops each.
  double flops_per_call() const {
    return 4.0 * kHq * kDh * n_queries * (lengths[0] - (n_queries - 1) / 2.0);
  }
};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

}  // namespace

int main(int argc, char** argv) {
  const size_t prefill = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8192;
  std::mt19937 rng(1);
  const k::QuantLevel levels[] = {k::QuantLevel::kScalar, k::QuantLevel::kAvx2,
                                  k::QuantLevel::kAvx512};

  std::printf("attention_paged decode (Hq %zu, Hkv %zu, Dh %zu, block %zu)\n", kHq, kHkv, kDh,
              kBlockTokens);
  std::printf("%-5s %-7s %-6s %-3s %10s %10s\n", "dtype", "context", "level", "thr", "us/call",
              "KV GB/s");
  for (k::KvDtype dtype : {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3}) {
    for (size_t length : {size_t{1024}, size_t{8192}}) {
      PagedSet set(dtype, length, 1, rng);
      for (k::QuantLevel level : levels) {
        if (!k::set_quant_level(level)) continue;
        for (int threads : {1, 2}) {
          k::set_num_threads(threads);
          const double t = median_seconds([&] { set.call(); });
          std::printf("%-5s %-7zu %-6s %-3d %10.1f %10.2f\n", dtype_name(dtype), length,
                      k::quant_level_name(level), threads, t * 1e6, set.bytes_per_call() / t / 1e9);
        }
      }
    }
  }

  std::printf("\nattention_paged, 16 new queries over 8192 tokens per head\n");
  std::printf("%-5s %-6s %-3s %10s %10s\n", "dtype", "level", "thr", "ms/call", "GFLOP/s");
  for (k::KvDtype dtype : {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3}) {
    PagedSet set(dtype, 8192, 16, rng);
    for (k::QuantLevel level : levels) {
      if (!k::set_quant_level(level)) continue;
      for (int threads : {1, 2}) {
        k::set_num_threads(threads);
        const double t = median_seconds([&] { set.call(); });
        std::printf("%-5s %-6s %-3d %10.3f %10.1f\n", dtype_name(dtype), k::quant_level_name(level),
                    threads, t * 1e3, set.flops_per_call() / t / 1e9);
      }
    }
  }

  std::printf("\nattention_causal prefill, %zu tokens (contiguous float32 cache)\n", prefill);
  std::printf("%-6s %-3s %10s %10s\n", "level", "thr", "s/call", "GFLOP/s");
  {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(prefill * kHq * kDh), kc(prefill * kHkv * kDh), vc(kc.size()),
        out(q.size());
    for (auto* v : {&q, &kc, &vc}) {
      for (auto& x : *v) x = normal(rng);
    }
    const double flops = 4.0 * kHq * kDh * prefill * (prefill + 1) / 2.0;
    for (k::QuantLevel level : levels) {
      if (!k::set_quant_level(level)) continue;
      for (int threads : {1, 2}) {
        k::set_num_threads(threads);
        const double t = median_seconds([&] {
          k::check(k::attention_causal(out.data(), q.data(), kc.data(), vc.data(), prefill, prefill,
                                       kHq, kHkv, kDh, kHq * kDh, kHkv * kDh, kHq * kDh,
                                       1.0f / std::sqrt(float(kDh))),
                   "attention_causal");
        });
        std::printf("%-6s %-3d %10.3f %10.1f\n", k::quant_level_name(level), threads, t,
                    flops / t / 1e9);
      }
    }
  }
  return 0;
}
