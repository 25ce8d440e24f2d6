#include "runtime/compression/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <string>

namespace adakv::compression {
namespace {

// Strict weak order "a ranks above b": larger first, NaN below every number. Callers add an
// index tie-break, which makes the order total and so the results independent of the sort
// algorithm's internals.
bool ranks_above(float a, float b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a > b;
}

// Rank of two indexed values: higher value first, then lower index.
bool before(float va, size_t ia, float vb, size_t ib) {
  if (ranks_above(va, vb)) return true;
  if (ranks_above(vb, va)) return false;
  return ia < ib;
}

// Round half to even, as torch.round does in the official Ada-KV code; independent of the
// floating-point rounding mode.
double round_half_even(double x) {
  const double fl = std::floor(x);
  const double diff = x - fl;
  if (diff > 0.5) return fl + 1;
  if (diff < 0.5) return fl;
  return std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1;
}

}  // namespace

GainMatrix::GainMatrix(size_t rows_, size_t prefix_, size_t delta_)
    : rows(rows_), prefix(prefix_), delta(delta_) {
  if (delta == 0) throw std::invalid_argument("GainMatrix: delta must be >= 1 (got 0)");
  tiles = (prefix + delta - 1) / delta;
  data.assign(rows * tiles, 0.0f);
}

void GainMatrix::fill_row(size_t r, const float* scores) {
  if (r >= rows) {
    throw std::invalid_argument("GainMatrix::fill_row: row " + std::to_string(r) +
                                " out of range (rows " + std::to_string(rows) + ")");
  }
  std::vector<float> sorted(scores, scores + prefix);
  std::sort(sorted.begin(), sorted.end(), ranks_above);
  float* out = row(r);
  for (size_t t = 0; t < tiles; ++t) {
    const size_t end = std::min(prefix, (t + 1) * delta);
    double sum = 0.0;
    for (size_t i = t * delta; i < end; ++i) sum += sorted[i];
    out[t] = static_cast<float>(sum);
  }
}

std::vector<size_t> allocate_topk(const GainMatrix& gains, size_t total, size_t base,
                                  double alpha) {
  if (gains.delta != 1) {
    throw std::invalid_argument("allocate_topk: needs a gain matrix with delta 1 (got " +
                                std::to_string(gains.delta) + ")");
  }
  if (!(alpha >= 0.0 && alpha <= 1.0)) {
    throw std::invalid_argument("allocate_topk: alpha must be in [0, 1] (got " +
                                std::to_string(alpha) + ")");
  }
  const size_t n = gains.rows * gains.prefix;
  if (total > n) {
    throw std::invalid_argument("allocate_topk: total " + std::to_string(total) +
                                " exceeds rows * prefix = " + std::to_string(n));
  }
  // Flat index r * prefix + c orders by row, then column: exactly the tie-break we need.
  const float* v = gains.data.data();
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  if (total < n) {
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(total), idx.end(),
                     [v](size_t a, size_t b) { return before(v[a], a, v[b], b); });
  }
  std::vector<size_t> count(gains.rows, 0);
  for (size_t i = 0; i < total; ++i) ++count[idx[i] / gains.prefix];

  const double floor_tokens = std::floor(static_cast<double>(base) * alpha);
  std::vector<size_t> budget(gains.rows);
  for (size_t r = 0; r < gains.rows; ++r) {
    const double b = round_half_even(static_cast<double>(count[r]) * (1.0 - alpha) + floor_tokens);
    budget[r] = std::min(static_cast<size_t>(b), gains.prefix);
  }
  return budget;
}

std::vector<size_t> allocate_waterfill(const GainMatrix& gains, size_t total, size_t b_min) {
  const size_t rows = gains.rows, prefix = gains.prefix, delta = gains.delta;
  std::vector<size_t> budget(rows, 0);
  if (rows == 0) return budget;
  total = std::min(total, rows * prefix);
  const size_t start = std::min(b_min, prefix);
  if (total < rows * start) {
    // The floor cannot be met: an even split is the least surprising fallback.
    for (size_t r = 0; r < rows; ++r) budget[r] = total / rows + (r < total % rows ? 1 : 0);
    return budget;
  }
  std::fill(budget.begin(), budget.end(), start);
  size_t remaining = total - rows * start;

  struct Candidate {
    float gain;
    size_t row;
  };
  // priority_queue pops the "largest": here the highest gain, then the lowest row.
  auto lower_priority = [](const Candidate& a, const Candidate& b) {
    return before(b.gain, b.row, a.gain, a.row);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower_priority)> heap(
      lower_priority);
  for (size_t r = 0; r < rows; ++r) {
    if (budget[r] < prefix) heap.push({gains.row(r)[budget[r] / delta], r});
  }
  // remaining > 0 implies some row is below prefix, because total <= rows * prefix.
  while (remaining > 0) {
    const size_t r = heap.top().row;
    heap.pop();
    const size_t b = budget[r];
    const size_t tile_end = std::min(prefix, (b / delta + 1) * delta);
    const size_t award = std::min(tile_end - b, remaining);
    budget[r] += award;
    remaining -= award;
    if (budget[r] < prefix) heap.push({gains.row(r)[budget[r] / delta], r});
  }
  return budget;
}

std::vector<size_t> pyramid_layer_budgets(size_t n_layers, size_t B, size_t W, double beta,
                                          size_t prompt_len) {
  if (B < W) {
    throw std::invalid_argument("pyramid_layer_budgets: budget " + std::to_string(B) +
                                " is smaller than the window " + std::to_string(W));
  }
  if (!(beta > 0.0)) {
    throw std::invalid_argument("pyramid_layer_budgets: beta must be > 0 (got " +
                                std::to_string(beta) + ")");
  }
  if (n_layers == 0) return {};
  const size_t base = B - W;
  if (prompt_len > 0) {
    const size_t prefix = prompt_len > W ? prompt_len - W : 0;
    if (base >= prefix) return std::vector<size_t>(n_layers, prompt_len);
  }
  // beta < 1 would make min exceed base (and max negative): cap at uniform.
  const double min_real = std::floor(static_cast<double>(base) / beta);
  size_t mn = min_real >= static_cast<double>(base) ? base : static_cast<size_t>(min_real);
  size_t mx = 2 * base - mn;
  if (prompt_len > 0 && mx > prompt_len - W) {
    mx = prompt_len - W;
    mn = 2 * base - mx;
  }
  if (n_layers == 1) return {W + base};

  // Exact integer interpolation: value_l = (mx * (L - 1) - l * (mx - mn)) / (L - 1).
  const size_t steps = n_layers - 1;
  std::vector<size_t> out(n_layers);
  std::vector<size_t> rem(n_layers);
  size_t rem_sum = 0;
  for (size_t l = 0; l < n_layers; ++l) {
    const size_t num = mx * steps - l * (mx - mn);
    out[l] = num / steps;
    rem[l] = num % steps;
    rem_sum += rem[l];
  }
  // The values sum to n_layers * base exactly, so the remainders sum to a multiple of steps.
  const size_t extra = rem_sum / steps;
  std::vector<size_t> order(n_layers);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&rem](size_t a, size_t b) { return rem[a] != rem[b] ? rem[a] > rem[b] : a < b; });
  for (size_t i = 0; i < extra; ++i) ++out[order[i]];
  for (size_t& b : out) b += W;
  return out;
}

std::vector<uint32_t> select_top_positions(const float* scores, size_t n, size_t keep) {
  if (keep > n) {
    throw std::invalid_argument("select_top_positions: keep " + std::to_string(keep) +
                                " exceeds n " + std::to_string(n));
  }
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument("select_top_positions: n " + std::to_string(n) +
                                " does not fit 32-bit positions");
  }
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), uint32_t{0});
  if (keep < n) {
    std::nth_element(
        idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(),
        [scores](uint32_t a, uint32_t b) { return before(scores[a], a, scores[b], b); });
    idx.resize(keep);
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace adakv::compression
