#include "model/hf/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "model/hf/hf_tokenizer_pre.h"
#include "model/hf/hf_tokenizer_spm.h"
#include "model/tokenizer/pretokenizer.h"

namespace adakv::hf {

namespace {

using nlohmann::json;
using Metadata = std::vector<std::pair<std::string, gguf::Value>>;
using Merge = std::pair<std::string, std::string>;

// tokenizer.ggml.token_type values.
constexpr int32_t kNormal = 1;
constexpr int32_t kUnknown = 2;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
constexpr int32_t kUnused = 5;
constexpr int32_t kByte = 6;

constexpr const char* kMetaSpace = "\xE2\x96\x81";  // U+2581

// The file's JSON, or nullopt when the file does not exist and is optional.
std::optional<json> read_json(const std::string& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!required) return std::nullopt;
    throw std::runtime_error(path + ": cannot open it (a Hugging Face tokenizer needs it)");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

gguf::Value string_value(const std::string& s) {
  gguf::Value v;
  v.type = gguf::ValueType::STRING;
  v.s = s;
  return v;
}

gguf::Value u32_value(int64_t x) {
  gguf::Value v;
  v.type = gguf::ValueType::U32;
  v.u = static_cast<uint64_t>(x);
  return v;
}

gguf::Value bool_value(bool b) {
  gguf::Value v;
  v.type = gguf::ValueType::BOOL;
  v.u = b ? 1 : 0;
  return v;
}

gguf::Value array_value(gguf::ValueType elem_type, std::vector<gguf::Value> elems) {
  gguf::Value v;
  v.type = gguf::ValueType::ARRAY;
  v.elem_type = elem_type;
  v.arr = std::move(elems);
  return v;
}

gguf::Value string_array(const std::vector<std::string>& items) {
  std::vector<gguf::Value> elems;
  elems.reserve(items.size());
  for (const std::string& s : items) elems.push_back(string_value(s));
  return array_value(gguf::ValueType::STRING, std::move(elems));
}

gguf::Value i32_array(const std::vector<int32_t>& items) {
  std::vector<gguf::Value> elems(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    elems[i].type = gguf::ValueType::I32;
    elems[i].i = items[i];
  }
  return array_value(gguf::ValueType::I32, std::move(elems));
}

gguf::Value f32_array(const std::vector<float>& items) {
  std::vector<gguf::Value> elems(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    elems[i].type = gguf::ValueType::F32;
    elems[i].f = items[i];
  }
  return array_value(gguf::ValueType::F32, std::move(elems));
}

// An entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
};

// Everything read from the checkpoint directory.
struct Sources {
  std::string tokenizer_path;
  std::string config_path;
  json tokenizer;
  json config;        // tokenizer_config.json, null when absent
  json model_config;  // config.json, null when absent
  std::string dir;
};

// Names special the way llama.cpp's converter guesses it for added tokens not marked special.
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

bool is_byte_token(const std::string& t) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

std::vector<AddedToken> added_tokens(const Sources& src) {
  std::vector<AddedToken> out;
  const json& list = src.tokenizer.value("added_tokens", json::array());
  if (!list.is_array()) {
    throw std::runtime_error(src.tokenizer_path + ": added_tokens is not an array");
  }
  for (const json& t : list) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"] < 0 ||
        !t.contains("content") || !t["content"].is_string()) {
      throw std::runtime_error(src.tokenizer_path + ": added_tokens entry " + t.dump() +
                               " lacks an integer id or a string content");
    }
    out.push_back(
        {t["id"].get<int64_t>(), t["content"].get<std::string>(), t.value("special", false)});
  }
  return out;
}

// Tokens by id: model.vocab, added tokens over it, gaps (up to config.json's vocab_size when
// larger) as "[PAD<id>]" of type unused, as llama.cpp's converter writes them.
struct TokenList {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

TokenList token_list(const Sources& src, const json& model, const std::vector<AddedToken>& added) {
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) {
    throw std::runtime_error(src.tokenizer_path + ": model.vocab is missing or not an object");
  }
  int64_t n = 0;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      throw std::runtime_error(src.tokenizer_path + ": model.vocab['" + token +
                               "'] is not a non-negative integer id");
    }
    n = std::max(n, id.get<int64_t>() + 1);
  }
  for (const AddedToken& t : added) n = std::max(n, t.id + 1);
  if (src.model_config.is_object()) {
    const json& size = src.model_config.value("vocab_size", json());
    if (size.is_number_integer()) n = std::max(n, size.get<int64_t>());
  }
  if (n > (int64_t{1} << 31) - 1) {
    throw std::runtime_error(src.tokenizer_path + ": vocabulary of " + std::to_string(n) +
                             " ids is too large");
  }
  TokenList list;
  list.tokens.resize(static_cast<size_t>(n));
  list.types.assign(static_cast<size_t>(n), kUnused);
  std::vector<bool> filled(static_cast<size_t>(n), false);
  for (const auto& [token, id] : vocab.items()) {
    const auto i = static_cast<size_t>(id.get<int64_t>());
    list.tokens[i] = token;
    list.types[i] = kNormal;
    filled[i] = true;
  }
  for (const AddedToken& t : added) {
    const auto i = static_cast<size_t>(t.id);
    list.tokens[i] = t.content;
    list.types[i] = t.special || looks_special(t.content) ? kControl : kUserDefined;
    filled[i] = true;
  }
  for (size_t i = 0; i < list.tokens.size(); ++i) {
    if (!filled[i]) list.tokens[i] = "[PAD" + std::to_string(i) + "]";
  }
  return list;
}

std::vector<Merge> merges_of(const Sources& src, const json& model) {
  const json& list = model.value("merges", json::array());
  if (!list.is_array()) {
    throw std::runtime_error(src.tokenizer_path + ": model.merges is not an array");
  }
  std::vector<Merge> out;
  out.reserve(list.size());
  for (const json& m : list) {
    if (m.is_string()) {
      // "left right": the pieces themselves hold no space in this form.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw std::runtime_error(src.tokenizer_path + ": model.merges entry '" + s +
                                 "' is not two pieces separated by one space");
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw std::runtime_error(src.tokenizer_path + ": model.merges entry " + m.dump() +
                               " is neither \"left right\" nor [left, right]");
    }
  }
  return out;
}

// GGUF merges are "left right"; a space inside a piece is written as U+0120 ('Ġ', the space's
// byte-level spelling), as llama.cpp's converter does.
std::vector<std::string> gguf_merges(const std::vector<Merge>& merges) {
  auto encode = [](const std::string& piece) {
    std::string out;
    for (char c : piece) {
      if (c == ' ') {
        out += "\xC4\xA0";
      } else {
        out += c;
      }
    }
    return out;
  };
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) out.push_back(encode(m.first) + " " + encode(m.second));
  return out;
}

// The content of tokenizer_config.json's `<kind>_token`: a string or {"content": ...}.
std::optional<std::string> config_token(const Sources& src, const std::string& kind) {
  if (!src.config.is_object()) return std::nullopt;
  auto it = src.config.find(kind + "_token");
  if (it == src.config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

int64_t id_of(const Sources& src, const std::string& field, const std::string& content,
              const std::vector<AddedToken>& added, const TokenList& list) {
  for (const AddedToken& t : added) {
    if (t.content == content) return t.id;
  }
  for (size_t i = 0; i < list.tokens.size(); ++i) {
    if (list.tokens[i] == content) return static_cast<int64_t>(i);
  }
  throw std::runtime_error(src.config_path + ": " + field + " '" + content +
                           "' is not a token of " + src.tokenizer_path);
}

// The special tokens of the post_processor's single-sequence template: the first and the last
// element when they are special tokens (llama.cpp's converter reads add_bos/add_eos this way).
struct TemplateEnds {
  bool present = false;
  std::optional<std::string> first;
  std::optional<std::string> last;
};

TemplateEnds template_ends(const json& post) {
  TemplateEnds ends;
  if (!post.is_object()) return ends;
  std::vector<json> processors;
  if (post.value("type", "") == "Sequence" && post.contains("processors")) {
    for (const json& p : post["processors"]) processors.push_back(p);
  } else {
    processors.push_back(post);
  }
  for (const json& p : processors) {
    if (!p.is_object() || p.value("type", "") != "TemplateProcessing") continue;
    ends.present = true;
    const json& single = p.value("single", json::array());
    if (!single.is_array() || single.empty()) continue;
    auto special = [](const json& item) -> std::optional<std::string> {
      if (item.is_object() && item.contains("SpecialToken") &&
          item["SpecialToken"].value("id", json()).is_string()) {
        return item["SpecialToken"]["id"].get<std::string>();
      }
      return std::nullopt;
    };
    if (single.size() > 1) {
      ends.first = special(single.front());
      ends.last = special(single.back());
    }
  }
  return ends;
}

// The chat template: tokenizer_config.json's chat_template (a string, or a list of {name,
// template} whose "default" is the template and the others tokenizer.chat_template.<name>),
// else chat_template.jinja, else chat_template.json's chat_template.
void add_chat_templates(const Sources& src, Metadata& out) {
  json tmpl;
  std::string from = src.config_path;
  if (src.config.is_object() && src.config.contains("chat_template")) {
    tmpl = src.config["chat_template"];
  } else if (auto jinja = read_text(src.dir + "/chat_template.jinja")) {
    tmpl = *jinja;
  } else if (auto j = read_json(src.dir + "/chat_template.json", false)) {
    from = src.dir + "/chat_template.json";
    tmpl = j->is_object() ? j->value("chat_template", json()) : json();
  }
  if (tmpl.is_null()) return;
  if (tmpl.is_string()) {
    out.emplace_back("tokenizer.chat_template", string_value(tmpl.get<std::string>()));
    return;
  }
  if (!tmpl.is_array()) {
    throw std::runtime_error(from +
                             ": chat_template is neither a string nor a list of {name, "
                             "template}");
  }
  for (const json& t : tmpl) {
    if (!t.is_object() || !t.value("name", json()).is_string() ||
        !t.value("template", json()).is_string()) {
      throw std::runtime_error(from + ": chat_template entry " + t.dump().substr(0, 200) +
                               " lacks a string name or template");
    }
    std::string name = t["name"].get<std::string>();
    // The key part keeps letters and digits only, as llama.cpp writes it.
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    const std::string key =
        name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name;
    out.emplace_back(key, string_value(t["template"].get<std::string>()));
  }
}

// bos/eos/unk/pad ids and add_bos_token/add_eos_token.
void add_special_tokens(const Sources& src, const std::vector<AddedToken>& added,
                        const TokenList& list, const std::optional<std::string>& model_unk,
                        Metadata& out) {
  const TemplateEnds ends = template_ends(src.tokenizer.value("post_processor", json()));
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  for (const char* kind : {"bos", "eos", "unk", "pad"}) {
    const std::string k = kind;
    std::optional<std::string> content = config_token(src, k);
    std::string field = k + "_token";
    if (!content && k == "bos" && !src.config.is_object()) content = ends.first;
    if (!content && k == "eos" && !src.config.is_object()) content = ends.last;
    if (!content && k == "unk" && model_unk) {
      content = model_unk;
      field = "model.unk_token";
    }
    int64_t id = -1;
    if (content) {
      id = id_of(src, field, *content, added, list);
    } else if (src.model_config.is_object()) {
      // config.json's <kind>_token_id, where the tokenizer's files do not say.
      const json& x = src.model_config.value(k + "_token_id", json());
      if (x.is_number_integer() && x.get<int64_t>() >= 0 &&
          x.get<int64_t>() < static_cast<int64_t>(list.tokens.size())) {
        id = x.get<int64_t>();
      }
    }
    if (id >= 0) {
      const std::string key = "tokenizer.ggml." +
                              std::string(k == "pad"   ? "padding"
                                          : k == "unk" ? "unknown"
                                                       : k) +
                              "_token_id";
      out.emplace_back(key, u32_value(id));
    }
    if (k == "bos" && ends.present) add_bos = ends.first.has_value() && ends.first == content;
    if (k == "eos" && ends.present) add_eos = ends.last.has_value() && ends.last == content;
  }
  if (src.config.is_object()) {
    if (src.config.value("add_bos_token", json()).is_boolean()) {
      add_bos = src.config["add_bos_token"].get<bool>();
    }
    if (src.config.value("add_eos_token", json()).is_boolean()) {
      add_eos = src.config["add_eos_token"].get<bool>();
    }
  }
  if (add_bos) out.emplace_back("tokenizer.ggml.add_bos_token", bool_value(*add_bos));
  if (add_eos) out.emplace_back("tokenizer.ggml.add_eos_token", bool_value(*add_eos));
}

}  // namespace

std::vector<std::pair<std::string, gguf::Value>> tokenizer_metadata(const std::string& dir) {
  Sources src;
  src.dir = dir;
  src.tokenizer_path = dir + "/tokenizer.json";
  src.config_path = dir + "/tokenizer_config.json";
  src.tokenizer = *read_json(src.tokenizer_path, true);
  if (auto c = read_json(src.config_path, false)) src.config = std::move(*c);
  if (auto c = read_json(dir + "/config.json", false)) src.model_config = std::move(*c);
  if (!src.tokenizer.is_object() || !src.tokenizer.value("model", json()).is_object()) {
    throw std::runtime_error(src.tokenizer_path + ": model is missing or not an object");
  }
  if (!src.config.is_null() && !src.config.is_object()) {
    throw std::runtime_error(src.config_path + ": not a JSON object");
  }
  const json& model = src.tokenizer["model"];
  // tokenizer.json files of older `tokenizers` versions may leave out a BPE model's type.
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    throw std::runtime_error(src.tokenizer_path + ": model.type '" + type +
                             "' is not supported (supported: BPE, byte-level or with byte "
                             "fallback)");
  }
  const std::vector<AddedToken> added = added_tokens(src);
  TokenList list = token_list(src, model, added);
  const std::vector<Merge> merges = merges_of(src, model);
  const json& pre = src.tokenizer.value("pre_tokenizer", json());
  const bool byte_fallback = model.value("byte_fallback", false);

  Metadata out;
  std::optional<std::string> model_unk;
  if (model.value("unk_token", json()).is_string()) {
    model_unk = model["unk_token"].get<std::string>();
  }
  if (!byte_fallback) {
    const std::string pre_name = byte_level_pre_name(pre, src.tokenizer_path);
    // adakv (as llama.cpp) takes whole-token pieces before merging for the Llama 3 pre-tokenizer
    // only; with another, such a tokenizer.json would be tokenized otherwise than HF does.
    if (model.value("ignore_merges", false) && !tokenizer::pretokenizer_ignores_merges(pre_name)) {
      throw std::runtime_error(src.tokenizer_path +
                               ": model.ignore_merges is true with the pre-tokenizer '" + pre_name +
                               "'; adakv ignores merges only with Llama 3's (llama-bpe)");
    }
    out.emplace_back("tokenizer.ggml.model", string_value("gpt2"));
    out.emplace_back("tokenizer.ggml.pre", string_value(pre_name));
    out.emplace_back("tokenizer.ggml.tokens", string_array(list.tokens));
    out.emplace_back("tokenizer.ggml.token_type", i32_array(list.types));
    out.emplace_back("tokenizer.ggml.merges", string_array(gguf_merges(merges)));
  } else {
    const bool space_prefix =
        spm_add_space_prefix(src.tokenizer.value("normalizer", json()), pre, src.tokenizer_path);
    for (size_t i = 0; i < list.tokens.size(); ++i) {
      if (list.types[i] == kNormal && is_byte_token(list.tokens[i])) list.types[i] = kByte;
    }
    if (model_unk) {
      const int64_t unk = id_of(src, "model.unk_token", *model_unk, added, list);
      list.types[static_cast<size_t>(unk)] = kUnknown;
    }
    const std::vector<float> scores = scores_from_merges(merges, list.tokens);
    out.emplace_back("tokenizer.ggml.model", string_value("llama"));
    out.emplace_back("tokenizer.ggml.pre", string_value("default"));
    out.emplace_back("tokenizer.ggml.tokens", string_array(list.tokens));
    out.emplace_back("tokenizer.ggml.scores", f32_array(scores));
    out.emplace_back("tokenizer.ggml.token_type", i32_array(list.types));
    out.emplace_back("tokenizer.ggml.add_space_prefix", bool_value(space_prefix));
  }
  add_special_tokens(src, added, list, model_unk, out);
  add_chat_templates(src, out);
  return out;
}

}  // namespace adakv::hf
