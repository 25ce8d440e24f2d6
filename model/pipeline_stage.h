// The part of the model one pipeline stage runs: a contiguous range of layers (comm::
// stage_layers), the token embedding on the first stage, the final norm and LM head on the last,
// and the channel that carries the residual stream [rows][d_model] between neighbouring stages.
// The default is the whole model on one stage.
#pragma once

#include <cstddef>

#include "comm/pipeline_channel.h"

namespace adakv::model {

struct PipelineStage {
  size_t index = 0, count = 1;               // this stage, of `count`
  size_t layer_begin = 0, layer_end = 0;     // layer_end 0: every layer
  comm::PipelineChannel* channel = nullptr;  // not owned; null on one stage

  bool first() const { return index == 0; }
  bool last() const { return index + 1 == count; }
  // One past the stage's last layer of a model of n_layers.
  size_t end(size_t n_layers) const { return layer_end == 0 ? n_layers : layer_end; }
  bool holds(size_t layer, size_t n_layers) const {
    return layer >= layer_begin && layer < end(n_layers);
  }
};

}  // namespace adakv::model
