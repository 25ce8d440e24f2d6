// Log probabilities in the OpenAI API: what a request asks for (completions: `logprobs` 0-20
// and `echo`; chat: `logprobs` true and `top_logprobs` 0-20) and the response shapes
// (completions: choices[].logprobs {tokens, token_logprobs, top_logprobs, text_offset}; chat:
// choices[].logprobs {content: [{token, logprob, bytes, top_logprobs: [...]}]}), whole or one
// stream chunk's tokens at a time.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "runtime/logprobs.h"

namespace adakv::server {

struct LogprobsRequest {
  int top = -1;       // alternatives per token (0-20); -1: no logprobs
  bool echo = false;  // completions: the prompt (its text, and its logprobs with `top`)
};

// Throws runtime::RequestError naming the field (logprobs, top_logprobs, echo).
LogprobsRequest parse_logprobs(const nlohmann::json& body, bool chat);

// Builds a completions logprobs object over tokens given in order; text offsets count bytes
// of the tokens' text from the first token added.
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(const tokenizer::Tokenizer& tok) : tok_(tok) {}
  // A token without a log probability (the first echoed prompt token).
  void add_first(int32_t token);
  void add(const runtime::TokenLogprob& lp);
  bool empty() const { return tokens_.empty(); }
  // The object, and a fresh start for the next chunk (offsets go on counting).
  nlohmann::json take();

 private:
  const tokenizer::Tokenizer& tok_;
  nlohmann::json tokens_ = nlohmann::json::array(), logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();
  size_t offset_ = 0;
};

// Chat's choices[].logprobs.content entries of `lps`.
nlohmann::json chat_logprobs_content(const tokenizer::Tokenizer& tok,
                                     const std::vector<runtime::TokenLogprob>& lps);

}  // namespace adakv::server
