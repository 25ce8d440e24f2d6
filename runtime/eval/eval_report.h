// Eval results read back from the JSON that to_json writes, and grids that ran separately (one
// length per process, or more trials with another seed) merged into one, so a long grid can be
// split across processes or sessions and still be reported as one table and one picture.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/eval/eval_runner.h"

namespace adakv::eval {

// Inverse of to_json for what the tables and pictures need: the grid, the runs (policy,
// budget and the scorer knobs) and every prompt's record. Throws std::invalid_argument naming
// the field that is missing or malformed.
EvalResult from_json(const nlohmann::json& j);

// One result holding every part's prompts: lengths are the sorted union, records keep their
// cells. The parts must share the task, the depths, max_tokens and the runs (same labels in the
// same order, same window, pooling, kernel, GQA aggregation, alpha, scope and rule); two parts
// with the same length must have different seeds (else they hold the same prompts). Throws
// std::invalid_argument naming the first difference.
EvalResult merge_results(const std::vector<EvalResult>& parts);

}  // namespace adakv::eval
