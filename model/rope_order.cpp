#include "model/rope_order.h"

#include <numeric>
#include <stdexcept>

namespace adakv::model {

std::vector<size_t> halves_to_adjacent(size_t n_heads, size_t head_dim, size_t rot_dim) {
  if (rot_dim % 2 != 0 || rot_dim > head_dim) {
    throw std::invalid_argument("halves_to_adjacent: rot_dim " + std::to_string(rot_dim) +
                                " does not fit a head of " + std::to_string(head_dim));
  }
  std::vector<size_t> order(n_heads * head_dim);
  std::iota(order.begin(), order.end(), size_t{0});
  const size_t half = rot_dim / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    size_t* head = order.data() + h * head_dim;
    for (size_t i = 0; i < half; ++i) {
      head[2 * i] = h * head_dim + i;
      head[2 * i + 1] = h * head_dim + i + half;
    }
  }
  return order;
}

}  // namespace adakv::model
