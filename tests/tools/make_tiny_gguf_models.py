#!/usr/bin/env python3
"""GGUF files of the tiny Hugging Face checkpoints (tests/tools/make_tiny_hf_models.py), written
with the gguf package and no torch, for tests/e2e/test_tiny_gguf_oracle.cpp; then proven equal in
content to llama.cpp's own conversion of the same checkpoints (convert_hf_to_gguf.py --outtype
f32): every metadata key, type and value and every tensor's name, type, shape and bytes, in file
order, against tests/data/tiny_gguf_manifest.json (tests/tools/gen_tiny_gguf_manifest.py). Any
difference is printed and the exit status is 1.

The mapping, per checkpoint directory (config.json, tokenizer.json, tokenizer_config.json, an
f32 model.safetensors):
  - HF tensor names to GGUF ones (model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight,
    ...), in the checkpoint's (sorted) order; float32 bytes unchanged except:
  - architecture "llama" (LlamaForCausalLM, MistralForCausalLM): the Q and K projection rows
    reordered per head. HF rotates dimension i with i + head_dim/2; GGUF's llama rotates 2i
    with 2i + 1, so row 2i of a head is HF's row i and row 2i + 1 is HF's row i + head_dim/2.
    Qwen2 rotates halves in GGUF too: no reordering.
  - llama3 RoPE scaling: a rope_freqs.weight tensor, first, of the head_dim/2 frequency
    divisors (1 above the high-frequency wavelength, the factor below the low one, the smooth
    blend between), computed in float32; linear and YaRN scaling: rope.scaling.type and
    .factor keys (YaRN: original_context_length and the yarn_* parameters the config gives).
  - the tokenizer as GGUF's "gpt2" model with pre-tokenizer "gpt-2" (ByteLevel with the GPT-2
    regex), its vocabulary in id order (special added tokens CONTROL, other added ones
    USER_DEFINED, the rest NORMAL), its merges as "a b", the EOS id and add_bos_token of
    tokenizer_config.json.

Needs numpy and gguf. Usage:
  make_tiny_gguf_models.py HF_DIR OUT_DIR [--manifest FILE]   (prints the files it wrote)
HF_DIR is what make_tiny_hf_models.py wrote; the models made are the manifest's.
"""
import argparse
import hashlib
import json
import os
import sys

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_tiny_gguf_manifest import describe  # noqa: E402  the manifest's own description

ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
       "model.norm.weight": "output_norm.weight"}
LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4


def read_safetensors_f32(path):
    """{name: float32 array} of a safetensors file, in its header's order."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {t['dtype']}; only f32 checkpoints are mapped")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


def gguf_name(hf):
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")  # model.layers.N.<module...>.weight|bias
    if parts[:2] != ["model", "layers"]:
        raise SystemExit(f"no GGUF name for {hf}")
    return f"blk.{parts[2]}.{LAYER['.'.join(parts[3:-1])]}.{parts[-1]}"


def rope_pairs_interleaved(w, heads):
    """Rows of a Q or K projection [heads * head_dim, ...] from HF's rotate-halves order to
    GGUF llama's adjacent pairs: within each head, new row 2i = old row i, 2i + 1 = i + half."""
    head_dim = w.shape[0] // heads
    half = head_dim // 2
    order = []
    for h in range(heads):
        for i in range(half):
            order += [h * head_dim + i, h * head_dim + half + i]
    return np.ascontiguousarray(w[order])


def llama3_divisors(cfg, head_dim):
    """The per-frequency divisors of llama3 RoPE scaling, float32, as GGUF's rope_freqs."""
    s = cfg["rope_scaling"]
    f32 = np.float32
    factor = s.get("factor", 8.0)
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_ctx = s.get("original_max_position_embeddings", 8192)
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / f32(head_dim)
    freqs = f32(1.0) / np.power(f32(cfg.get("rope_theta", 10000.0)), exponents)
    out = []
    for freq in freqs:
        wavelen = f32(2 * np.pi) / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (f32(old_ctx) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.array(out, dtype=np.float32)


def size_label(n):
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{round(n / scale)}{suffix}"
    return str(n)


def add_tokenizer(w, model_dir):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_cfg = json.load(f)
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    types = {}
    for a in tok["added_tokens"]:
        by_id[a["id"]] = a["content"]
        types[a["id"]] = TOKEN_CONTROL if a["special"] else TOKEN_USER_DEFINED
    n = max(by_id) + 1
    if sorted(by_id) != list(range(n)):
        raise SystemExit(f"{model_dir}: the vocabulary has holes")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([by_id[i] for i in range(n)])
    w.add_token_types([types.get(i, TOKEN_NORMAL) for i in range(n)])
    w.add_token_merges(merges)
    ids = {t: i for i, t in by_id.items()}
    if tok_cfg.get("bos_token") is not None:
        w.add_bos_token_id(ids[tok_cfg["bos_token"]])
    if tok_cfg.get("eos_token") is not None:
        w.add_eos_token_id(ids[tok_cfg["eos_token"]])
    if "add_bos_token" in tok_cfg:
        w.add_add_bos_token(tok_cfg["add_bos_token"])


def write_gguf(model_dir, out_path):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = ARCH[cfg["architectures"][0]]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type"))

    tensors = []  # (GGUF name, float32 array) in file order
    if rope_type == "llama3":
        tensors.append(("rope_freqs.weight", llama3_divisors(cfg, head_dim)))
    elif rope_type not in (None, "linear", "yarn"):
        raise SystemExit(f"{model_dir}: RoPE scaling {rope_type} is not mapped")
    for hf, a in read_safetensors_f32(os.path.join(model_dir, "model.safetensors")).items():
        if arch == "llama" and hf.endswith("q_proj.weight"):
            a = rope_pairs_interleaved(a, heads)
        elif arch == "llama" and hf.endswith("k_proj.weight"):
            a = rope_pairs_interleaved(a, kv_heads)
        tensors.append((gguf_name(hf), a))
    params = sum(a.size for name, a in tensors if name != "rope_freqs.weight")

    w = gguf.GGUFWriter(out_path, arch)
    w.add_type("model")
    w.add_name(" ".join(p.capitalize() for p in os.path.basename(model_dir).split("-")))
    w.add_size_label(size_label(params))
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if rope_type in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType(rope_type))
        w.add_rope_scaling_factor(scaling["factor"])
    if rope_type == "yarn":
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
        for hf, add in (("extrapolation_factor", w.add_rope_scaling_yarn_ext_factor),
                        ("attention_factor", w.add_rope_scaling_yarn_attn_factor),
                        ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                        ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
            if hf in scaling:
                add(scaling[hf])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if arch == "llama":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_tokenizer(w, model_dir)
    for name, a in tensors:
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def differences(got, want):
    """Lines naming every key or tensor where two manifest entries differ."""
    out = []
    for kind, field in (("metadata", "key"), ("tensors", "name")):
        g = {e[field]: e for e in got[kind]}
        h = {e[field]: e for e in want[kind]}
        for k in sorted(set(g) | set(h)):
            if g.get(k) != h.get(k):
                out.append(f"  {kind} {k}: wrote {g.get(k)}, llama.cpp wrote {h.get(k)}")
        if not out and [e[field] for e in got[kind]] != [e[field] for e in want[kind]]:
            out.append(f"  {kind}: the same entries in another order")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--manifest", default=os.path.join(HERE, "..", "data",
                                                       "tiny_gguf_manifest.json"))
    args = ap.parse_args()
    with open(args.manifest, encoding="utf-8") as f:
        manifest = json.load(f)
    os.makedirs(args.out_dir, exist_ok=True)
    failed = False
    for name, want in manifest["models"].items():
        out = os.path.join(args.out_dir, name + ".gguf")
        write_gguf(os.path.join(args.hf_dir, name), out)
        diff = differences(describe(out, gguf), want)
        if diff:
            failed = True
            print(f"{out} differs from llama.cpp's conversion:\n" + "\n".join(diff),
                  file=sys.stderr)
            continue
        with open(out, "rb") as f:
            same_file = hashlib.sha256(f.read()).hexdigest() == want.get("file_sha256")
        print(out, file=sys.stdout)
        print(f"{name}: the content of llama.cpp's conversion"
              + (", the same file byte for byte" if same_file else " (other file layout)"),
              file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
