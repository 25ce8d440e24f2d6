#include "runtime/server/openai_logprobs.h"

#include <cmath>

#include "runtime/request_json.h"

namespace adakv::server {
namespace {

using nlohmann::json;

// JSON has no -inf: a token the processing removed gets vLLM's stand-in.
double finite(double lp) {
  return std::isfinite(lp) ? lp : -9999.0;
}

int top_count(const json& v, const char* param) {
  if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 20) {
    throw runtime::RequestError(
        std::string("'") + param + "' must be an integer in [0, 20], got " + v.dump(), param);
  }
  return int(v.get<long long>());
}

const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

LogprobsRequest parse_logprobs(const json& body, bool chat) {
  LogprobsRequest r;
  const json* logprobs = field(body, "logprobs");
  if (chat) {
    if (logprobs && !logprobs->is_boolean()) {
      throw runtime::RequestError("'logprobs' must be true or false", "logprobs");
    }
    const bool on = logprobs && logprobs->get<bool>();
    if (const json* top = field(body, "top_logprobs")) {
      const int n = top_count(*top, "top_logprobs");
      if (!on && n > 0) {
        throw runtime::RequestError("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      }
      r.top = n;
    }
    if (on && r.top < 0) r.top = 0;
    if (!on) r.top = -1;
    if (field(body, "echo")) throw runtime::RequestError("'echo' is for completions", "echo");
    return r;
  }
  // Completions: an integer; false (as some clients send) is none.
  if (logprobs && !(logprobs->is_boolean() && !logprobs->get<bool>())) {
    r.top = top_count(*logprobs, "logprobs");
  }
  if (const json* echo = field(body, "echo")) {
    if (!echo->is_boolean()) throw runtime::RequestError("'echo' must be true or false", "echo");
    r.echo = echo->get<bool>();
  }
  return r;
}

void CompletionLogprobs::add_first(int32_t token) {
  const std::string text = tok_.token_bytes(token);
  tokens_.push_back(text);
  logprobs_.push_back(nullptr);
  top_.push_back(nullptr);
  offsets_.push_back(offset_);
  offset_ += text.size();
}

void CompletionLogprobs::add(const runtime::TokenLogprob& lp) {
  const std::string text = tok_.token_bytes(lp.token);
  tokens_.push_back(text);
  logprobs_.push_back(finite(lp.logprob));
  json top = json::object();
  for (const auto& t : lp.top) {
    // Two ids with the same text share one key (the likelier, listed first, stays).
    const std::string key = tok_.token_bytes(t.token);
    if (!top.contains(key)) top[key] = finite(t.logprob);
  }
  top_.push_back(std::move(top));
  offsets_.push_back(offset_);
  offset_ += text.size();
}

json CompletionLogprobs::take() {
  json out = {{"tokens", std::move(tokens_)},
              {"token_logprobs", std::move(logprobs_)},
              {"top_logprobs", std::move(top_)},
              {"text_offset", std::move(offsets_)}};
  tokens_ = logprobs_ = top_ = offsets_ = json::array();
  return out;
}

json chat_logprobs_content(const tokenizer::Tokenizer& tok,
                           const std::vector<runtime::TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& lp : lps) {
    const std::string text = tok.token_bytes(lp.token);
    json top = json::array();
    for (const auto& t : lp.top) {
      const std::string alt = tok.token_bytes(t.token);
      top.push_back({{"token", alt}, {"logprob", finite(t.logprob)}, {"bytes", byte_list(alt)}});
    }
    content.push_back({{"token", text},
                       {"logprob", finite(lp.logprob)},
                       {"bytes", byte_list(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

}  // namespace adakv::server
