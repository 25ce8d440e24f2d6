// What generate prints about one result, shared with batch: the JSON object of `generate
// --json` (one line of batch's output), the human-readable summary and settings lines, and the
// names the model's compression preset may go by.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/compression/config.h"
#include "runtime/worker.h"

namespace adakv::cli {

double per_second(size_t n, double s);
// Prompt tokens kept per KV head, averaged over every head of the model.
double kept_tokens_per_head(const runtime::GenerateResult& r);
// The settings in force, as JSON.
nlohmann::json settings_json(const compression::CompressionConfig& c, const std::string& source);
// The object `generate --json` prints for one result under `policy` (KV stored as `dtype`;
// `source`: where the compression settings came from).
nlohmann::json result_json(const runtime::GenerateResult& r,
                           const compression::CompressionConfig& policy, const std::string& dtype,
                           const std::string& source);
// stderr: timings, and the KV line (tokens kept and evicted, bytes held).
void print_summary(const runtime::GenerateResult& r, const compression::CompressionConfig& policy,
                   const std::string& dtype);
// stderr: the compression settings in force and where they came from.
void print_settings(const compression::CompressionConfig& c, const std::string& source);
// The names the model's preset may have: GGUF general.basename / size_label, then the file name.
std::vector<std::string> model_names(const std::string& path);

}  // namespace adakv::cli
