#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints, one directory per case, for adakv's checkpoint loader
and its oracle test (tests/e2e/test_hf_checkpoint_oracle.cpp against the goldens of
tests/tools/gen_hf_goldens.py).

Every directory is complete: config.json, tokenizer.json (byte-level BPE trained here with HF
`tokenizers`), tokenizer_config.json, and model.safetensors or two shards named by
model.safetensors.index.json. The safetensors files are written here (the format is an 8-byte
header length, a JSON header, the data), so that bf16 needs no torch; transformers reading them
is what checks them.

Weights come from an explicit integer hash of (tensor seed, element index), not from a numpy
random stream, so every run and every numpy version writes the same bytes.

Shape of every model: hidden 64, 4 heads of 16, 2 KV heads, 2 layers, ffn 128, vocab 288.

Needs numpy and tokenizers (cluster/setup-node.sh tiny-hf installs them in $ADAKV_HOME/venv).
Usage: make_tiny_hf_models.py OUT_DIR   (prints the directories it wrote)
"""
import json
import os
import sys

import numpy as np

D, HEADS, KV_HEADS, LAYERS, FFN, VOCAB = 64, 4, 2, 2, 128, 288
HEAD_DIM = D // HEADS

# name: (architecture, dtype, shards, config additions)
MODELS = {
    "llama-f32": ("LlamaForCausalLM", "F32", 1, {}),
    "llama-bf16": ("LlamaForCausalLM", "BF16", 1, {}),
    "llama-f16": ("LlamaForCausalLM", "F16", 1, {}),
    "llama-sharded-f32": ("LlamaForCausalLM", "F32", 2, {}),
    "llama3-rope-f32": ("LlamaForCausalLM", "F32", 1, {
        "max_position_embeddings": 256,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}),
    "linear-rope-f32": ("LlamaForCausalLM", "F32", 1, {
        "max_position_embeddings": 256,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "yarn-rope-f32": ("LlamaForCausalLM", "F32", 1, {
        "max_position_embeddings": 256,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 64}}),
    "mistral-f32": ("MistralForCausalLM", "F32", 1, {"sliding_window": None}),
    "qwen2-f32": ("Qwen2ForCausalLM", "F32", 1, {"tie_word_embeddings": True}),
    "qwen2-sharded-bf16": ("Qwen2ForCausalLM", "BF16", 2, {"tie_word_embeddings": True}),
}

MASK = np.uint64(0xFFFFFFFF)


def uniform(seed, n):
    """n floats in [-0.5, 0.5) from a 32-bit integer hash of (seed, index)."""
    x = (np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B1)) & MASK
    for mul in (0x85EBCA6B, 0xC2B2AE35):
        x ^= x >> np.uint64(16)
        x = (x * np.uint64(mul)) & MASK
    x ^= x >> np.uint64(16)
    return x.astype(np.float64) / 4294967296.0 - 0.5


def name_seed(name):
    """A stable seed per tensor name (Python's hash() is salted per process)."""
    h = 2166136261
    for c in name.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h


def tensor(name, shape, kind):
    n = int(np.prod(shape))
    u = uniform(name_seed(name), n)
    if kind == "norm":
        v = 1.0 + 0.2 * u
    elif kind == "bias":
        v = 0.2 * u
    elif kind == "embed":
        v = 2.0 * u
    else:  # a matrix [out, in]: keeps activations near unit scale
        v = u * (2.0 * np.sqrt(3.0 / shape[1]))
    return v.astype(np.float32).reshape(shape)


def weights(arch, tied):
    w = {"model.embed_tokens.weight": tensor("model.embed_tokens.weight", (VOCAB, D), "embed"),
         "model.norm.weight": tensor("model.norm.weight", (D,), "norm")}
    if not tied:
        w["lm_head.weight"] = tensor("lm_head.weight", (VOCAB, D), "matrix")
    kv = KV_HEADS * HEAD_DIM
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        shapes = {
            "input_layernorm.weight": ((D,), "norm"),
            "self_attn.q_proj.weight": ((D, D), "matrix"),
            "self_attn.k_proj.weight": ((kv, D), "matrix"),
            "self_attn.v_proj.weight": ((kv, D), "matrix"),
            "self_attn.o_proj.weight": ((D, D), "matrix"),
            "post_attention_layernorm.weight": ((D,), "norm"),
            "mlp.gate_proj.weight": ((FFN, D), "matrix"),
            "mlp.up_proj.weight": ((FFN, D), "matrix"),
            "mlp.down_proj.weight": ((D, FFN), "matrix"),
        }
        if arch == "Qwen2ForCausalLM":
            shapes.update({"self_attn.q_proj.bias": ((D,), "bias"),
                           "self_attn.k_proj.bias": ((kv,), "bias"),
                           "self_attn.v_proj.bias": ((kv,), "bias")})
        for k, (shape, kind) in shapes.items():
            w[p + k] = tensor(p + k, shape, kind)
    return w


def encode(a, dtype):
    """The little-endian bytes of float32 array a in dtype (bf16: round to nearest even)."""
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    bits = a.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return rounded.astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = encode(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as HF's writer pads it
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_checkpoint(out, tensors, dtype, shards):
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
        return
    names = sorted(tensors)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s::shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, file), {n: tensors[n] for n in part}, dtype)
        for n in part:
            weight_map[n] = file
            total += len(encode(tensors[n], dtype))
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


CORPUS = ("The quick brown fox jumps over the lazy dog. " * 3 +
          "def main():\n    return 42\n" * 2 +
          "Pack my box with five dozen liquor jugs; 0123456789. ") * 4


def write_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
                   "eos_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False,
                   "model_max_length": 256}, f, indent=2)


def config(arch, dtype, extra):
    c = {"architectures": [arch], "model_type": {"LlamaForCausalLM": "llama",
                                                 "MistralForCausalLM": "mistral",
                                                 "Qwen2ForCausalLM": "qwen2"}[arch],
         "hidden_size": D, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
         "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB,
         "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": None,
         "eos_token_id": 0,
         "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]}
    c.update(extra)
    return c


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_hf_models.py OUT_DIR")
    root = sys.argv[1]
    for name, (arch, dtype, shards, extra) in MODELS.items():
        out = os.path.join(root, name)
        os.makedirs(out, exist_ok=True)
        cfg = config(arch, dtype, extra)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_checkpoint(out, weights(arch, cfg["tie_word_embeddings"]), dtype, shards)
        write_tokenizer(out)
        print(out)


if __name__ == "__main__":
    main()
