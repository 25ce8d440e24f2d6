// The query-agnostic retrieval grid (Task::kPasskeyMulti): per (length, trial) one document
// hiding one pass key per depth band; the document alone (the context, no question) is
// prefilled and compressed once per policy, then each key is asked in its own fork of that
// compressed cache (runtime::answer_questions). Runs that score alike share one prefill; a run
// with another scorer ("adakv:output-aware") gets its own.
//
// The records are those of run_eval: one per question, depth_index = the key's band, depth =
// where its needle landed, prompt_tokens = the context's tokens.
#pragma once

#include "runtime/eval/eval_runner.h"

namespace adakv::eval {

// spec.depths: one band per key (their values label the bands), at most kMaxPasskeyDoors.
// Throws std::invalid_argument on an empty grid, a run list not starting with full, too many
// keys, or a length that with its question and max_tokens does not fit the model's context.
EvalResult run_query_agnostic(runtime::Worker& engine, const EvalSpec& spec,
                              const Progress& progress = {});

// Depth band labels for `keys` keys: the centre of each band in percent (12.5, 37.5, ...).
std::vector<double> key_bands(size_t keys);

}  // namespace adakv::eval
