#include "runtime/request_json.h"

#include <cmath>
#include <limits>

#include "runtime/sampling_json.h"

namespace adakv::runtime {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& why) {
  throw RequestError("'" + param + "' " + why, param);
}

double number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) bad(param, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    bad(param, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  }
  return x;
}

long long integer(const json& v, const std::string& param, long long lo, long long hi) {
  if (!v.is_number_integer()) bad(param, "must be an integer");
  const long long x = v.is_number_unsigned() && v.get<unsigned long long>() >
                                                    uint64_t(std::numeric_limits<long long>::max())
                          ? std::numeric_limits<long long>::max()
                          : v.get<long long>();
  if (x < lo || x > hi) {
    bad(param,
        "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  }
  return x;
}

// A message's content: a string, or OpenAI's list of parts of which only text ones are known.
std::string message_content(const json& turn) {
  const auto it = turn.find("content");
  if (it == turn.end() || !(it->is_string() || it->is_array())) {
    bad("messages", "need a 'content' in every message: a string or a list of text parts");
  }
  if (it->is_string()) return it->get<std::string>();
  std::string text;
  for (const auto& part : *it) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad("messages", "content parts must be {\"type\": \"text\", \"text\": \"...\"}");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> prompt_tokens(const json& body, const Worker& engine) {
  const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
  if (has_prompt == has_messages) bad("prompt", "or 'messages' must be given (one of them)");
  if (has_prompt) {
    // OpenAI's batch forms with one prompt: ["text"] or [[ids]].
    const json& p = body["prompt"].is_array() && body["prompt"].size() == 1 &&
                            (body["prompt"][0].is_string() || body["prompt"][0].is_array())
                        ? body["prompt"][0]
                        : body["prompt"];
    if (p.is_string()) {
      const auto ids = engine.tokenizer().encode(p.get<std::string>(), /*parse_special=*/false);
      if (ids.empty()) bad("prompt", "is empty");
      return ids;
    }
    if (p.is_array()) {
      std::vector<int32_t> ids;
      const long long vocab = static_cast<long long>(engine.model().config().vocab_size);
      for (const auto& t : p) ids.push_back(int32_t(integer(t, "prompt", 0, vocab - 1)));
      if (ids.empty()) bad("prompt", "is empty");
      return ids;
    }
    bad("prompt", "must be a string or an array of token ids");
  }
  const json& m = body["messages"];
  if (!m.is_array() || m.empty()) bad("messages", "must be a non-empty array");
  std::vector<tokenizer::ChatMessage> turns;
  for (const auto& turn : m) {
    if (!turn.is_object()) bad("messages", "must hold objects with 'role' and 'content'");
    if (!turn.contains("role") || !turn["role"].is_string()) {
      bad("messages", "need a string 'role' in every message");
    }
    const std::string role = turn["role"];
    if (role != "system" && role != "user" && role != "assistant") {
      bad("messages", "role must be system, user or assistant, got '" + role + "'");
    }
    turns.push_back({role, message_content(turn)});
  }
  try {
    return engine.tokenizer().encode_chat(turns);
  } catch (const std::invalid_argument& e) {
    // The template refuses this role order (Llama 2 and Mistral take alternating turns).
    bad("messages", "do not fit the " + engine.tokenizer().chat_template().name +
                        " chat template: " + e.what());
  }
}

// kv_compress_context: the prompt tokens of the context compressed on its own (0: none). In
// chat, every message before the final user message (the tokens the prompt shares with those
// messages rendered alone); in completions, kv_context_tokens, which it requires.
size_t context_tokens(const json& body, const Worker& engine, const std::vector<int32_t>& prompt) {
  const bool has_tokens =
      body.contains("kv_context_tokens") && !body["kv_context_tokens"].is_null();
  bool compress = false;
  if (body.contains("kv_compress_context") && !body["kv_compress_context"].is_null()) {
    if (!body["kv_compress_context"].is_boolean())
      bad("kv_compress_context", "must be true or false");
    compress = body["kv_compress_context"].get<bool>();
  }
  if (!compress) {
    if (has_tokens) bad("kv_context_tokens", "needs 'kv_compress_context': true");
    return 0;
  }
  const long long n = static_cast<long long>(prompt.size());
  if (!body.contains("messages")) {
    if (!has_tokens) {
      bad("kv_context_tokens",
          "is required with 'kv_compress_context' in a completion: the prompt's first N tokens are "
          "the context");
    }
    if (n < 2) bad("kv_context_tokens", "needs a prompt of at least 2 tokens");
    return size_t(integer(body["kv_context_tokens"], "kv_context_tokens", 1, n - 1));
  }
  if (has_tokens) bad("kv_context_tokens", "is for completions; a chat's context is its messages");
  const json& m = body["messages"];
  size_t last_user = m.size();
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i]["role"] == "user") {
      last_user = i;
      break;
    }
  }
  if (last_user == m.size() || last_user == 0) {
    bad("kv_compress_context", "needs messages before the final user message (the context)");
  }
  std::vector<tokenizer::ChatMessage> turns;
  for (size_t i = 0; i < last_user; ++i) turns.push_back({m[i]["role"], message_content(m[i])});
  const auto alone = engine.tokenizer().encode_chat(turns, /*add_generation_prompt=*/false);
  size_t c = 0;
  while (c < alone.size() && c + 1 < prompt.size() && alone[c] == prompt[c]) ++c;
  if (c == 0) bad("kv_compress_context", "the context renders to no token of the prompt");
  return c;
}

}  // namespace

size_t samples_from_json(const json& body) {
  if (!body.is_object() || !body.contains("n") || body["n"].is_null()) return 1;
  return size_t(integer(body["n"], "n", 1, kMaxSamples));
}

Request request_from_json(const json& body, const Worker& engine, const RequestDefaults& defaults) {
  if (!body.is_object()) throw RequestError("the request must be a JSON object", "");
  Request r;
  GenerateRequest& g = r.generate;
  g.prompt = prompt_tokens(body, engine);
  g.max_tokens = defaults.max_tokens;
  g.kv_dtype = defaults.kv_dtype;
  g.block_tokens = defaults.block_tokens;
  const long long context = static_cast<long long>(engine.context_length());
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (body.contains(key) && !body[key].is_null())
      g.max_tokens = integer(body[key], key, 1, context);
  }
  if (body.contains("temperature") && !body["temperature"].is_null()) {
    g.sampling.temperature = float(number(body["temperature"], "temperature", 0, 100));
  }
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    g.sampling.top_p = float(number(body["top_p"], "top_p", 1e-9, 1));
  }
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    // vLLM's -1 and OpenAI's absent field both mean no limit.
    const long long k = integer(body["top_k"], "top_k", -1, 1 << 30);
    g.sampling.top_k = k < 0 ? 0 : int(k);
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    g.sampling.seed = uint64_t(integer(body["seed"], "seed", std::numeric_limits<long long>::min(),
                                       std::numeric_limits<long long>::max()));
  }
  sampling_from_json(body, g.sampling, engine.model().config().vocab_size, size_t(context));
  if (body.contains("n") && !body["n"].is_null()) {
    integer(body["n"], "n", 1, kMaxSamples);
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s);
    } else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) bad("stop", "must be a string or a list of strings");
        r.stop.push_back(x);
      }
    } else {
      bad("stop", "must be a string or a list of strings");
    }
    for (const auto& x : r.stop) {
      if (x.empty()) bad("stop", "must not hold an empty string");
    }
  }
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {
    if (!body["ignore_eos"].is_boolean()) bad("ignore_eos", "must be true or false");
    g.stop_at_eos = !body["ignore_eos"].get<bool>();
  }

  g.compression = defaults.compression;
  // A named choice (a string the compression parser knows): its parser's error names the field.
  auto named = [&](const char* field, const auto& parse) {
    if (!body.contains(field) || body[field].is_null()) return;
    if (!body[field].is_string()) bad(field, "must be a string");
    try {
      parse(body[field].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw RequestError(std::string("'") + field + "': " + e.what(), field);
    }
  };
  named("kv_policy",
        [&](const std::string& v) { g.compression.policy = compression::parse_policy(v); });
  try {
    if (body.contains("kv_budget") && !body["kv_budget"].is_null()) {
      const json& b = body["kv_budget"];
      if (b.is_string()) {
        compression::parse_budget(b.get<std::string>(), g.compression);
      } else if (b.is_number_integer() && b.get<long long>() > 1) {
        compression::parse_budget(std::to_string(b.get<long long>()), g.compression);
      } else if (b.is_number()) {
        compression::parse_budget(json(b.get<double>()).dump(), g.compression);
      } else {
        bad("kv_budget", "must be a ratio (0.2), a percentage (\"20%\") or tokens per head (128)");
      }
    }
  } catch (const RequestError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw RequestError(std::string("'kv_budget': ") + e.what(), "kv_budget");
  }
  if (body.contains("kv_window") && !body["kv_window"].is_null()) {
    g.compression.window = size_t(integer(body["kv_window"], "kv_window", 1, context));
  }
  named("kv_context_scoring", [&](const std::string& v) {
    g.compression.context_scoring = compression::parse_scoring(v);
  });
  named("kv_context_policy", [&](const std::string& v) {
    g.compression.context_policy = compression::parse_context_policy(v);
  });
  try {
    g.compression.validate();
  } catch (const std::invalid_argument& e) {
    throw RequestError(std::string("compression settings: ") + e.what(), "kv_budget");
  }
  g.context_tokens = context_tokens(body, engine, g.prompt);
  try {
    g.sampling.validate();
  } catch (const std::invalid_argument& e) {
    throw RequestError(e.what(), "temperature");
  }
  return r;
}

}  // namespace adakv::runtime
