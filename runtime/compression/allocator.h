// Ada-KV budget allocation from a gain matrix, deterministic bit for bit on every rank.
//
// Each KV head's window scores (prefix positions only, window excluded), sorted descending,
// form a concave gain curve. The gain matrix holds one row per head of the allocation unit
// (a layer, or every layer for scope global; row = layer_in_unit * n_kv_heads + head) and one
// column per tile of `delta` consecutive sorted scores (the tile's sum). A rank fills the rows
// of the heads it owns and leaves the rest zero; one all-reduce (sum) gives every rank the whole
// matrix, and the functions below then compute the same budgets everywhere, whatever the rank
// layout, because ties break by (row, position) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace adakv::compression {

struct GainMatrix {
  size_t rows = 0;
  size_t prefix = 0;        // scored positions per head (prompt length - window)
  size_t delta = 1;         // tokens per tile
  size_t tiles = 0;         // ceil(prefix / delta)
  std::vector<float> data;  // [rows][tiles], zero-initialised

  // Throws std::invalid_argument when delta == 0.
  GainMatrix(size_t rows, size_t prefix, size_t delta);
  float* row(size_t r) { return data.data() + r * tiles; }
  const float* row(size_t r) const { return data.data() + r * tiles; }
  // Sorts scores[0..prefix) descending (NaN last) and stores the tile sums in row r; the last
  // tile holds prefix % delta scores when delta does not divide prefix. Sums are taken in
  // double, in sorted order, so equal inputs give bit-identical rows.
  void fill_row(size_t r, const float* scores);
};

// Official Ada-KV rule (arXiv 2407.11550), for a matrix with delta == 1: take the `total` largest
// entries of the whole matrix (ties: lower row, then lower column first); count_h of them
// fall in row h; row h keeps round(count_h * (1 - alpha) + floor(base * alpha)) tokens, capped
// at prefix. round() is half-to-even, like torch.round in the official code. Because of the
// rounding (and the floor) the budgets may sum to a little more or less than `total`; with
// total = rows * base they never sum to more than total + rows / 2. Throws
// std::invalid_argument unless delta == 1, total <= rows * prefix and alpha is in [0, 1].
// Returns per-row prefix budgets (window excluded).
std::vector<size_t> allocate_topk(const GainMatrix& gains, size_t total, size_t base, double alpha);

// Water-filling: every row starts at s = min(b_min, prefix) tokens; then, while budget remains,
// the row whose next tile has the largest sum (ties: lower row) gets min(delta, remaining
// budget, tokens left in that row). A row whose budget is not on a tile boundary (b_min not a
// multiple of delta) first completes its current tile, ranked by that tile's whole sum.
// Returns per-row budgets summing to min(total, rows * prefix) exactly. When that is less than
// rows * s the floor cannot be met: the total is split as evenly as possible instead, lower
// rows getting the extra token. With delta == 1 and b_min == 0 the budgets equal the per-row
// counts of the top `total` entries. The result is the optimum of the summed gain over budget
// vectors of whole tiles whenever every award is a whole tile (b_min, prefix and
// total - rows * s multiples of delta); a partial award is ranked by its whole tile's sum.
std::vector<size_t> allocate_waterfill(const GainMatrix& gains, size_t total, size_t b_min);

// PyramidKV layer budgets (window included) for average budget B >= W per head. With
// base = B - W: min = floor(base / beta) (capped at base), max = 2 * base - min; layer l gets
// W + the linear interpolation from max (layer 0) to min (last layer). When prompt_len > 0 and
// max exceeds the prefix prompt_len - W, max becomes the prefix and min = 2 * base - max (the
// official rule); if base alone reaches the prefix every layer keeps the whole prompt.
// Rounding: floors of the linear values plus one token each for the layers with the largest
// fractional parts (ties: lower layer), so the budgets are non-increasing, the first and last
// are exactly W + max and W + min, and their mean is exactly B.
std::vector<size_t> pyramid_layer_budgets(size_t n_layers, size_t B, size_t W, double beta,
                                          size_t prompt_len = 0);

// Which prefix positions of one head to keep: the `keep` highest scores (ties: lower position
// first; NaN ranks below every number), returned in ascending (chronological) order. Throws
// std::invalid_argument when keep > n.
std::vector<uint32_t> select_top_positions(const float* scores, size_t n, size_t keep);

}  // namespace adakv::compression
