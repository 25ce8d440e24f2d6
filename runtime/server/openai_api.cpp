#include "runtime/server/openai_api.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>

#include "runtime/server/api_error.h"
#include "runtime/server/openai_logprobs.h"

namespace adakv::server {
namespace {

using nlohmann::json;

// Nesting beyond this is refused before it is built (hostile bodies nest 100,000 deep).
constexpr int kMaxJsonDepth = 64;
// An SSE comment: clients skip it (the OpenAI clients included).
constexpr const char* kSseKeepAlive = ": keep-alive\n\n";

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json parse_body(const std::string& body) {
  if (body.empty())
    throw runtime::RequestError("the request body is empty: send a JSON object", "");
  return json::parse(body, [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) {
      throw runtime::RequestError(
          "the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", "");
    }
    return true;
  });
}

bool truthy(const json& j) {
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number()) return j.get<double>() != 0;
  return true;
}

std::string new_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, (unsigned long long)rng(),
                (unsigned long long)(rng() & 0xffffffffu));
  return buf;
}

long long unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the request's cache kept (adakv's extension of the response).
json kv_report(const runtime::GenerateResult& r, const compression::CompressionConfig& c,
               const std::string& dtype) {
  return {
      {"policy", compression::to_string(c.policy)},
      {"settings", compression::describe(c)},
      {"dtype", dtype},
      {"full_bytes", r.kv_full_bytes},
      {"kept_bytes", r.kv_kept_bytes},
      {"kept_share", r.kv_full_bytes ? double(r.kv_kept_bytes) / double(r.kv_full_bytes) : 1.0},
      {"kept_tokens_per_head", compression::kept_tokens_per_head(r.compression, r.prompt_tokens)},
      {"preemptions", r.preemptions}};
}

json usage(size_t prompt, size_t completion, size_t cached) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

void reply_error(const std::shared_ptr<Exchange>& ex, int status, const std::string& message,
                 const std::string& param = "", const Exchange::Headers& extra = {}) {
  ex->respond(status, "application/json", error_body(status, message, param), extra);
}

// One choice of a response (n > 1: one per sample).
struct Choice {
  bool started = false;                           // streaming: its first chunk sent
  std::vector<runtime::TokenLogprob> pending;     // streaming: sampled, not yet sent
  std::unique_ptr<CompletionLogprobs> offsets;    // completions: text offsets across chunks
  std::optional<runtime::GenerateResult> result;  // once done
};

// The per-request state the engine thread's callbacks share, and for a stream, the HTTP
// thread that opens it: the entry points (open, text, done, error) hold `mu`, so what they send
// goes out in the order they decided it.
struct Stream {
  std::mutex mu;
  std::shared_ptr<Exchange> ex;
  bool chat = false, streaming = false, include_usage = false;
  double keep_alive_s = 0;
  std::string id, model, dtype;
  long long created = 0;
  compression::CompressionConfig compression;
  bool started = false;  // streaming: the response's header sent
  bool failed = false;   // an error ended the response: later callbacks are ignored
  size_t finished = 0;   // choices done
  std::vector<Choice> choices;
  // Log probabilities and echo (runtime/server/openai_logprobs.h).
  const tokenizer::Tokenizer* tok = nullptr;
  LogprobsRequest lp;
  bool echo_only = false;  // echo with max_tokens 0: the prompt alone, finish_reason length
  std::vector<int32_t> prompt;
  // The prompt's, once its prefill is done (computed once, for the first sample).
  std::vector<runtime::TokenLogprob> prompt_lps;

  bool wants_logprobs() const { return lp.top >= 0; }
  CompletionLogprobs& offsets_of(Choice& c) {
    if (!c.offsets) c.offsets = std::make_unique<CompletionLogprobs>(*tok);
    return *c.offsets;
  }
  // The echoed prompt's completions logprobs (the first token has none).
  json echo_logprobs(Choice& c, const std::vector<runtime::TokenLogprob>& lps) {
    CompletionLogprobs& o = offsets_of(c);
    o.add_first(prompt[0]);
    for (const auto& p : lps) o.add(p);
    return o.take();
  }
  // The logprobs of `lps` in this endpoint's shape (null when none were asked for).
  json logprobs_of(Choice& c, const std::vector<runtime::TokenLogprob>& lps) {
    if (!wants_logprobs()) return nullptr;
    if (chat) return {{"content", chat_logprobs_content(*tok, lps)}};
    CompletionLogprobs& o = offsets_of(c);
    for (const auto& p : lps) o.add(p);
    return o.take();
  }
  json take_pending(Choice& c) {
    json out = logprobs_of(c, c.pending);
    c.pending.clear();
    return out;
  }

  json chunk(json choice) const {
    json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({std::move(choice)})}};
    if (include_usage) c["usage"] = nullptr;
    return c;
  }
  void event(const json& j) const { ex->send("data: " + dump(j) + "\n\n"); }
  void start_response() {
    if (started) return;
    started = true;
    ex->start_stream("text/event-stream", {}, {kSseKeepAlive, keep_alive_s});
  }
  // Streaming, once the request is queued: the header and the first keep-alive, before any
  // token (a queued request may wait long for a sequence slot).
  void open() {
    std::lock_guard lock(mu);
    if (!failed) start_response();
  }
  void start(size_t index) {
    start_response();
    Choice& c = choices[index];
    if (c.started) return;
    c.started = true;
    if (chat) {
      event(chunk({{"index", index},
                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}}));
    } else if (lp.echo) {
      event(chunk({{"index", index},
                   {"text", tok->decode(prompt)},
                   {"logprobs", wants_logprobs() ? echo_logprobs(c, prompt_lps) : json(nullptr)},
                   {"finish_reason", nullptr}}));
    }
  }
  void text(size_t index, std::string_view t) {
    std::lock_guard lock(mu);
    if (failed) return;
    start(index);
    Choice& c = choices[index];
    json choice = {{"index", index}, {"logprobs", take_pending(c)}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", std::string(t)}};
    } else {
      choice["text"] = std::string(t);
    }
    event(chunk(std::move(choice)));
  }
  std::string finish_of(const runtime::GenerateResult& r) const {
    return echo_only ? "length" : r.finish_reason;
  }
  size_t completion_tokens() const {
    size_t n = 0;
    for (const auto& c : choices) n += echo_only || !c.result ? 0 : c.result->tokens.size();
    return n;
  }
  // The prompt tokens the request found cached (its first sample's: the prompt counts once).
  size_t cached_tokens() const {
    return choices.empty() || !choices[0].result ? 0 : choices[0].result->cached_tokens;
  }
  void done(size_t index, runtime::GenerateResult&& r) {
    std::lock_guard lock(mu);
    if (failed) return;
    Choice& c = choices[index];
    if (!r.prompt_logprobs.empty()) prompt_lps = r.prompt_logprobs;
    c.result = std::move(r);
    ++finished;
    if (streaming) {
      start(index);
      json choice = {{"index", index},
                     {"logprobs", c.pending.empty() ? json(nullptr) : take_pending(c)},
                     {"finish_reason", finish_of(*c.result)}};
      if (chat) {
        choice["delta"] = json::object();
      } else {
        choice["text"] = "";
      }
      json last = chunk(std::move(choice));
      last["kv"] = kv_report(*c.result, compression, dtype);
      event(last);
      if (finished < choices.size()) return;
      if (include_usage) {
        json u = chunk({});
        u["choices"] = json::array();
        u["usage"] = usage(c.result->prompt_tokens, completion_tokens(), cached_tokens());
        event(u);
      }
      ex->send("data: [DONE]\n\n");
      ex->end();
      return;
    }
    if (finished < choices.size()) return;
    json all = json::array();
    for (size_t i = 0; i < choices.size(); ++i) all.push_back(choice_body(i));
    const runtime::GenerateResult& first = *choices[0].result;
    json body = {{"id", id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", model},
                 {"choices", std::move(all)},
                 {"usage", usage(first.prompt_tokens, completion_tokens(), cached_tokens())},
                 {"kv", kv_report(first, compression, dtype)}};
    ex->respond(200, "application/json", dump(body));
  }
  // A finished choice of a non-streaming response.
  json choice_body(size_t index) {
    Choice& c = choices[index];
    const runtime::GenerateResult& r = *c.result;
    json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_of(r)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
      choice["logprobs"] = logprobs_of(c, r.logprobs);
      return choice;
    }
    choice["text"] = (lp.echo ? tok->decode(prompt) : "") + (echo_only ? "" : r.text);
    if (wants_logprobs()) {
      json echoed = lp.echo ? echo_logprobs(c, prompt_lps) : json(nullptr);
      json generated =
          logprobs_of(c, echo_only ? std::vector<runtime::TokenLogprob>{} : r.logprobs);
      if (!echoed.is_null()) {
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (auto& x : generated[k]) echoed[k].push_back(std::move(x));
        }
        generated = std::move(echoed);
      }
      choice["logprobs"] = std::move(generated);
    }
    return choice;
  }
  void error(int status, const std::string& message) {
    std::lock_guard lock(mu);
    if (failed) return;
    failed = true;
    if (!started) return reply_error(ex, status, message);
    // Mid-stream: the status is sent already; the error travels as an event.
    ex->send("data: " + error_body(status, message) + "\n\n");
    ex->send("data: [DONE]\n\n");
    ex->end();
  }
};

}  // namespace

OpenAiApi::OpenAiApi(const runtime::Worker& engine, FrontDoor& async, ServerMetrics& metrics,
                     ApiConfig config)
    : engine_(engine),
      async_(async),
      metrics_(metrics),
      config_(std::move(config)),
      started_at_(unix_now()) {}

void OpenAiApi::handle(const std::shared_ptr<Exchange>& ex) {
  const auto& req = ex->request();
  std::string path(req.target());
  if (const auto q = path.find('?'); q != std::string::npos) path.resize(q);
  const auto method = req.method();

  struct Route {
    const char* path;
    http::verb verb;
  };
  static const Route routes[] = {{"/health", http::verb::get},
                                 {"/metrics", http::verb::get},
                                 {"/v1/models", http::verb::get},
                                 {"/v1/completions", http::verb::post},
                                 {"/v1/chat/completions", http::verb::post}};
  const Route* route = nullptr;
  for (const auto& r : routes) {
    if (path == r.path) route = &r;
  }
  if (!route) return reply_error(ex, 404, "no route " + path);
  if (method != route->verb) {
    const char* allowed = route->verb == http::verb::get ? "GET" : "POST";
    return reply_error(ex, 405,
                       "method " + std::string(req.method_string()) + " is not allowed on " + path +
                           "; use " + allowed,
                       "", {{"Allow", allowed}});
  }
  if (path == "/health") {
    if (!async_.accepting()) {
      return reply_error(ex, 503,
                         async_.dead() ? "the engine is dead" : "the server is shutting down");
    }
    return ex->respond(200, "text/plain", "");
  }
  if (path == "/metrics") {
    return ex->respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render());
  }
  if (!config_.api_key.empty()) {
    const auto auth = req.find(http::field::authorization);
    if (auth == req.end() || auth->value() != "Bearer " + config_.api_key) {
      return reply_error(ex, 401, "a valid API key is required: Authorization: Bearer <key>");
    }
  }
  if (path == "/v1/models") return models(ex);
  completion(ex, path == "/v1/chat/completions");
}

void OpenAiApi::models(const std::shared_ptr<Exchange>& ex) {
  const json model = {{"id", config_.model_name},   {"object", "model"},
                      {"created", started_at_},     {"owned_by", "adakv"},
                      {"root", config_.model_name}, {"max_model_len", engine_.context_length()}};
  ex->respond(200, "application/json", dump({{"object", "list"}, {"data", json::array({model})}}));
}

void OpenAiApi::completion(const std::shared_ptr<Exchange>& ex, bool chat) {
  if (!async_.accepting()) {
    return reply_error(ex, 503,
                       async_.dead() ? "the engine is dead" : "the server is shutting down");
  }
  auto state = std::make_shared<Stream>();
  runtime::Request request;
  size_t n_samples = 1;
  try {
    json body;
    try {
      body = parse_body(ex->request().body());
    } catch (const json::exception& e) {
      throw runtime::RequestError(std::string("the body is not valid JSON: ") + e.what(), "");
    }
    if (!body.is_object()) throw runtime::RequestError("the body must be a JSON object", "");
    if (body.contains("model") && !body["model"].is_null()) {
      if (!body["model"].is_string())
        throw runtime::RequestError("'model' must be a string", "model");
      if (body["model"] != config_.model_name) {
        return reply_error(ex, 404,
                           "the model '" + body["model"].get<std::string>() +
                               "' does not exist; this server serves '" + config_.model_name + "'",
                           "model");
      }
    }
    const char* input = chat ? "messages" : "prompt";
    if (!body.contains(input))
      throw runtime::RequestError(std::string("'") + input + "' is required", input);
    body.erase(chat ? "prompt" : "messages");
    // response_format {"type": "text"} is the default some clients send.
    if (body.contains("response_format") && !body["response_format"].is_null() &&
        body["response_format"] != json{{"type", "text"}}) {
      throw runtime::RequestError("only 'response_format' {\"type\": \"text\"} is supported",
                                  "response_format");
    }
    state->lp = parse_logprobs(body, chat);
    // echo with max_tokens 0 (lm-evaluation-harness's log-likelihood requests): one token is
    // generated, as vLLM does, and left out of the answer.
    if (state->lp.echo && body.contains("max_tokens") && body["max_tokens"] == 0) {
      body["max_tokens"] = 1;
      state->echo_only = true;
    }
    for (const char* unsupported : {"suffix", "tools", "functions"}) {
      if (body.contains(unsupported) && truthy(body[unsupported])) {
        throw runtime::RequestError(std::string("'") + unsupported + "' is not supported",
                                    unsupported);
      }
    }
    if (body.contains("best_of") && !body["best_of"].is_null() && body["best_of"] != 1) {
      throw runtime::RequestError(
          "'best_of' is not supported: it must be 1 (ask for several samples with 'n')", "best_of");
    }
    if (body.contains("stream") && !body["stream"].is_null()) {
      if (!body["stream"].is_boolean())
        throw runtime::RequestError("'stream' must be true or false", "stream");
      state->streaming = body["stream"].get<bool>();
    }
    if (body.contains("stream_options") && !body["stream_options"].is_null()) {
      const json& o = body["stream_options"];
      if (!o.is_object())
        throw runtime::RequestError("'stream_options' must be an object", "stream_options");
      if (o.contains("include_usage") && !o["include_usage"].is_null()) {
        if (!o["include_usage"].is_boolean()) {
          throw runtime::RequestError("'stream_options.include_usage' must be true or false",
                                      "stream_options");
        }
        state->include_usage = o["include_usage"].get<bool>();
      }
    }

    request = runtime::request_from_json(body, engine_, config_.defaults);
    n_samples = runtime::samples_from_json(body);
    const size_t context = engine_.context_length(), n_prompt = request.generate.prompt.size();
    if (n_prompt >= context) {
      throw runtime::RequestError(
          "the prompt has " + std::to_string(n_prompt) + " tokens; this model's context holds " +
              std::to_string(context) + " (the prompt plus at least one generated token)",
          input);
    }
    const bool explicit_max =
        (body.contains("max_tokens") && !body["max_tokens"].is_null()) ||
        (body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null());
    if (explicit_max && n_prompt + request.generate.max_tokens > context) {
      throw runtime::RequestError(
          "the prompt has " + std::to_string(n_prompt) + " tokens and max_tokens asks for " +
              std::to_string(request.generate.max_tokens) + " more; this model's context holds " +
              std::to_string(context),
          body.contains("max_tokens") ? "max_tokens" : "max_completion_tokens");
    }
    // OpenAI's defaults: 16 tokens for a completion, the rest of the context for a chat.
    if (!explicit_max)
      request.generate.max_tokens =
          chat ? context - n_prompt : std::min<size_t>(16, context - n_prompt);
  } catch (const runtime::RequestError& e) {
    return reply_error(ex, 400, e.what(), e.param());
  } catch (const std::invalid_argument& e) {
    return reply_error(ex, 400, e.what());
  }

  state->ex = ex;
  state->chat = chat;
  state->id = new_id(chat ? "chatcmpl-" : "cmpl-");
  state->model = config_.model_name;
  state->dtype = config_.kv_dtype;
  state->created = unix_now();
  state->keep_alive_s = config_.stream_keep_alive_s;
  state->compression = request.generate.compression;
  state->tok = &engine_.tokenizer();
  state->prompt = request.generate.prompt;
  state->choices.resize(n_samples);
  request.generate.logprobs = state->lp.top;
  request.generate.prompt_logprobs = state->lp.echo && state->wants_logprobs();
  if (state->streaming && request.generate.prompt_logprobs) {
    request.on_prompt_logprobs = [state](const std::vector<runtime::TokenLogprob>& lps) {
      state->prompt_lps = lps;
    };
  }
  Submission s;
  s.arrived_s = FrontDoor::now_s();
  s.on_error = [state](int status, const std::string& message) { state->error(status, message); };
  // Sample i draws from seed + i: n distinct samples, reproducible with the request's seed.
  for (size_t i = 0; i < n_samples; ++i) {
    runtime::Request r;
    r.generate = request.generate;
    r.stop = request.stop;
    r.generate.sampling.seed = request.generate.sampling.seed + i;
    if (i == 0) {
      r.on_prompt_logprobs = std::move(request.on_prompt_logprobs);
    } else {
      r.generate.prompt_logprobs = false;  // the first sample's prefill computes them
    }
    if (state->streaming && !state->echo_only) {
      r.on_text = [state, i](std::string_view t) { state->text(i, t); };
      if (state->wants_logprobs()) {
        r.on_logprob = [state, i](const runtime::TokenLogprob& lp) {
          state->choices[i].pending.push_back(lp);
        };
      }
    }
    r.on_done = [state, i](runtime::GenerateResult&& g) { state->done(i, std::move(g)); };
    if (i == 0) {
      s.request = std::move(r);
    } else {
      s.samples.push_back(std::move(r));
    }
  }
  // What the engine would refuse is a 400 now, before a stream's 200 goes out.
  try {
    async_.check(s);
  } catch (const std::invalid_argument& e) {
    return reply_error(ex, 400, e.what());
  }
  const uint64_t ticket = async_.new_ticket();
  switch (async_.submit(ticket, std::move(s))) {
    case SubmitStatus::kQueued:
      ex->on_disconnect([this, ticket] { async_.abort(ticket); });
      if (state->streaming) state->open();
      break;
    case SubmitStatus::kQueueFull:
      return reply_error(ex, 429, "too many requests are waiting; retry later", "",
                         {{"Retry-After", "1"}});
    case SubmitStatus::kClosed:
      return reply_error(ex, 503,
                         async_.dead() ? "the engine is dead" : "the server is shutting down");
  }
}

}  // namespace adakv::server
