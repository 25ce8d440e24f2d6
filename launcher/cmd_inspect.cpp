// `adakv inspect MODEL`: version, alignment, the model's config as adakv reads it, metadata and
// the tensor table of a GGUF file or a Hugging Face checkpoint directory (read as the same GGUF
// metadata and tensors: model/model_file.h), a path or a model name (runtime/model_registry.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "launcher/commands.h"
#include "launcher/job.h"
#include "model/config.h"
#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/hf/hf_checkpoint.h"
#include "model/model_file.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/model_registry.h"

namespace adakv::cli {

namespace {

// "none", or the type with its parameters.
std::string rope_scaling_line(const kernels::RopeScaling& s) {
  using Type = kernels::RopeScaling::Type;
  std::string line = kernels::to_string(s.type);
  if (s.type != Type::kNone) line += fmt::format(" x{}", s.factor);
  if (s.original_context) line += fmt::format(" of {} pre-trained positions", s.original_context);
  if (s.type == Type::kLlama3) {
    line += fmt::format(", frequency factors {} .. {}", s.low_freq_factor, s.high_freq_factor);
  }
  if (s.type == Type::kYarn) line += fmt::format(", beta {} .. {}", s.beta_slow, s.beta_fast);
  if (!s.freq_divisors.empty()) {
    line += fmt::format(" + rope_freqs.weight divisors ({} pairs)", s.freq_divisors.size());
  }
  return line;
}

using gguf::Value;
using gguf::ValueType;

constexpr size_t kMaxStringChars = 72;  // longer strings (chat templates) are cut
constexpr size_t kArrayHead = 5;        // elements shown of a long array
constexpr size_t kShortArray = 8;       // arrays up to this length are shown whole

std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxStringChars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);  // UTF-8 bytes pass through
        }
    }
  }
  out += "\"";
  if (s.size() > kMaxStringChars) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string type_label(const Value& v) {
  if (v.type != ValueType::ARRAY) return gguf::value_type_name(v.type);
  std::string inner = gguf::value_type_name(v.elem_type);
  // Nested arrays: name the element type of the first inner array when there is one.
  if (v.elem_type == ValueType::ARRAY && !v.arr.empty()) inner = type_label(v.arr[0]);
  return fmt::format("{}[{}]", inner, v.arr.size());
}

std::string format_value(const Value& v) {
  switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      return std::to_string(v.u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return std::to_string(v.i);
    case ValueType::F32:
      return fmt::format("{}", static_cast<float>(v.f));
    case ValueType::F64:
      return fmt::format("{}", v.f);
    case ValueType::BOOL:
      return v.u ? "true" : "false";
    case ValueType::STRING:
      return escaped(v.s);
    case ValueType::ARRAY: {
      const size_t shown = v.arr.size() <= kShortArray ? v.arr.size() : kArrayHead;
      std::string out = "[";
      for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        out += format_value(v.arr[i]);
      }
      if (shown < v.arr.size()) out += fmt::format(", ... ({} more)", v.arr.size() - shown);
      return out + "]";
    }
  }
  return "?";
}

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.ne.size(); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < (uint64_t{1} << 20)) return fmt::format("{:.1f} KiB", n / 1024.0);
  if (n < (uint64_t{1} << 30)) return fmt::format("{:.1f} MiB", n / 1048576.0);
  return fmt::format("{:.2f} GiB", n / 1073741824.0);
}

// The hyper-parameters adakv reads (model/config.h) and the tokenizer's choices, or why adakv
// cannot run the file.
std::string describe_config(const gguf::GgufFile& f) {
  std::string out = "\nconfig (as adakv runs it):\n";
  model::ModelConfig c;
  try {
    c = model::ModelConfig::from_gguf(f);
  } catch (const std::exception& e) {
    return out + fmt::format("  not runnable: {}\n", e.what());
  }
  out += fmt::format("  architecture      {} ({})\n", c.architecture, c.name);
  out += fmt::format("  layers            {}\n", c.n_layers);
  out += fmt::format("  hidden            {}\n", c.d_model);
  out += fmt::format("  heads             {} query, {} KV (head size {}, RoPE on {} dims)\n",
                     c.n_heads, c.n_kv_heads, c.head_dim, c.rope_dim);
  out += fmt::format("  ffn               {}\n", c.ffn_dim);
  out += fmt::format("  vocab             {}\n", c.vocab_size);
  out += fmt::format("  context           {} tokens{}\n", c.context_length,
                     c.sliding_window ? " (the sliding window: adakv attends to every token)" : "");
  out += fmt::format("  rope theta        {}\n", c.rope_theta);
  out += fmt::format("  rope scaling      {}\n", rope_scaling_line(c.rope_scaling));
  out += fmt::format("  rope pairs        {} in the file\n", model::to_string(c.rope_pairs));
  out += fmt::format("  rms eps           {}\n", c.rms_eps);
  out += fmt::format("  qkv bias          {}\n", c.qkv_bias ? "yes" : "no");
  out += fmt::format("  tied embeddings   {}\n", c.tied_embeddings ? "yes" : "no");
  out += fmt::format("  KV bytes / token  {} (float32, all layers)\n", c.kv_bytes_per_token());
  try {
    const tokenizer::Tokenizer tok(tokenizer::vocab_from_gguf(f));
    const auto name = [&](int32_t id) {
      return id < 0 ? std::string("none") : fmt::format("{} {}", id, tok.token_bytes(id));
    };
    out += fmt::format("  pre-tokenizer     {}\n", tok.vocab().pre);
    out += fmt::format("  bos / eos         {} / {}\n", name(tok.bos_id()), name(tok.eos_id()));
    std::string chat;
    try {
      chat = tok.chat_template().name;
    } catch (const std::exception& e) {
      chat = e.what();
    }
    out += fmt::format("  chat template     {}\n", chat);
    std::string stops;
    for (int32_t id : tok.stop_ids()) stops += (stops.empty() ? "" : ", ") + name(id);
    out += fmt::format("  stop tokens       {}\n", stops.empty() ? "none" : stops);
  } catch (const std::exception& e) {
    out += fmt::format("  tokenizer         not usable: {}\n", e.what());
  }
  return out;
}

int run_inspect(const std::string& spec) {
  const std::string path = runtime::resolve_model(spec);
  std::shared_ptr<const gguf::GgufFile> file;
  std::string tokenizer_error;
  try {
    file = model::open_model_file(path);
  } catch (const std::exception& e) {
    // A checkpoint whose tokenizer files adakv cannot read still shows its config and tensors.
    if (!hf::is_checkpoint_dir(path)) throw;
    tokenizer_error = e.what();
    file = model::open_model_file(path, model::ModelParts::kWeights);
  }
  const gguf::GgufFile& f = *file;
  if (!is_job_root()) return 0;  // under mpirun, rank 0 alone prints
  std::string out;
  out += fmt::format("file:      {}\n", path);
  if (f.assembled()) {
    out +=
        "source:    Hugging Face checkpoint (config.json, tokenizer files, safetensors tensors "
        "memory-mapped in their own dtype), shown as GGUF keys and tensor names\n";
  } else {
    out += fmt::format("version:   {}\n", f.version());
    out += fmt::format("alignment: {}\n", f.alignment());
  }
  out += describe_config(f);
  if (!tokenizer_error.empty()) {
    out += fmt::format("  tokenizer files   not read: {}\n", tokenizer_error);
  }

  size_t key_width = 0;
  for (const auto& [k, v] : f.metadata()) key_width = std::max(key_width, k.size());
  key_width = std::min<size_t>(key_width, 48);
  out += fmt::format("\nmetadata ({} keys):\n", f.metadata().size());
  for (const auto& [k, v] : f.metadata()) {
    out += fmt::format("  {:<{}}  {:<16}  {}\n", k, key_width, type_label(v), format_value(v));
  }

  size_t name_width = 4;
  for (const auto& t : f.tensors()) name_width = std::max(name_width, t.name.size());
  name_width = std::min<size_t>(name_width, 48);
  out += fmt::format("\ntensors ({}):\n", f.tensors().size());
  out += fmt::format("  {:<{}}  {:<5}  {:<22}  {:>12}\n", "name", name_width, "type", "shape",
                     "bytes");
  uint64_t total_bytes = 0, total_elements = 0;
  std::map<std::string, size_t> by_type;
  for (const auto& t : f.tensors()) {
    out += fmt::format("  {:<{}}  {:<5}  {:<22}  {:>12}\n", t.name, name_width,
                       gguf::type_name(t.type), shape_of(t), t.n_bytes);
    total_bytes += t.n_bytes;
    total_elements += t.n_elements;
    ++by_type[gguf::type_name(t.type)];
  }
  std::string types;
  for (const auto& [name, count] : by_type) {
    types += fmt::format("{}{} {}", types.empty() ? "" : ", ", name, count);
  }
  out += fmt::format("\ntotal: {} tensors, {} elements, {} bytes ({}); {}\n", f.tensors().size(),
                     total_elements, total_bytes, human_bytes(total_bytes),
                     types.empty() ? "no tensors" : types);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app, Runner& selected) {
  auto* sub =
      app.add_subcommand("inspect",
                         "Print the config, metadata and tensors of a GGUF file or a Hugging "
                         "Face checkpoint directory");
  auto path = std::make_shared<std::string>();
  sub->add_option("MODEL", *path, "GGUF file, checkpoint directory or model name")->required();
  sub->callback([path, &selected] { selected = [path] { return run_inspect(*path); }; });
}

}  // namespace adakv::cli
