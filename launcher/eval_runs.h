// The runs of an eval grid (eval passkey / niah / ppl) from the command line: one policy and
// budget (--policy, --budget) or lists (--policies, --budgets), never both forms of either.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/compression_flags.h"
#include "runtime/eval/eval_runner.h"

namespace adakv::cli {

inline std::vector<eval::PolicyRun> eval_runs(const CompressionFlags& flags,
                                              const std::vector<std::string>& policies,
                                              const std::vector<std::string>& budgets) {
  const bool one_policy = flags.app->count("--policy") > 0;
  const bool one_budget = flags.app->count("--budget") > 0;
  if (one_policy && flags.app->count("--policies") > 0) {
    throw std::invalid_argument("give --policy or --policies, not both");
  }
  if (one_budget && flags.app->count("--budgets") > 0) {
    throw std::invalid_argument("give --budget or --budgets, not both");
  }
  return eval::make_runs(flags.config(),
                         one_policy ? std::vector<std::string>{flags.policy} : policies,
                         one_budget ? std::vector<std::string>{flags.budget} : budgets);
}

}  // namespace adakv::cli
