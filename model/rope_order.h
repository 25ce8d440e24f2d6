// Reordering q and k rows between the two ways RoPE pairs a head's dimensions. The forward
// rotates adjacent pairs (x[2i], x[2i+1]); a file that stores q and k for halves (x[i],
// x[i + rot_dim/2]: Hugging Face's order, kept by qwen2 GGUFs) gets its rows reordered at load so
// that row 2i of a head is its row i and row 2i+1 its row i + rot_dim/2. Both q and k move the
// same way, so every q.k product, and hence attention, is unchanged; the rows past rot_dim stay.
#pragma once

#include <cstddef>
#include <vector>

namespace adakv::model {

// For each row r of n_heads consecutive heads of head_dim rows, the row that goes there: the
// order that turns halves into adjacent pairs. rot_dim is even and at most head_dim.
std::vector<size_t> halves_to_adjacent(size_t n_heads, size_t head_dim, size_t rot_dim);

}  // namespace adakv::model
