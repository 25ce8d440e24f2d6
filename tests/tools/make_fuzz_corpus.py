#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (tests/fuzz/targets): a few small valid inputs per target,
written from scratch here or copied from the repository's configs, so that the fuzzer starts
from inputs that get past the first checks. Nothing large is committed.

usage: make_fuzz_corpus.py OUT_DIR      (writes OUT_DIR/<target>/<name>)
"""
import json
import os
import random
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ggml type id -> (block elements, block bytes)
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
        10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
        30: (1, 2)}


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(v):
    """(type id, encoded value) of a Python value."""
    if isinstance(v, bool):
        return 7, struct.pack("<B", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, str):
        return 8, gguf_string(v)
    elem = gguf_value(v[0])[0] if v else 4
    return 9, struct.pack("<IQ", elem, len(v)) + b"".join(gguf_value(x)[1] for x in v)


def gguf(metadata, tensors, version=3, alignment=32):
    """A GGUF image: metadata {key: value}, tensors [(name, type id, ne)] with random data."""
    rng = random.Random(len(tensors))
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for k, v in metadata.items():
        t, enc = gguf_value(v)
        out += gguf_string(k) + struct.pack("<I", t) + enc
    offset, blobs = 0, []
    for name, t, ne in tensors:
        n = 1
        for x in ne:
            n *= x
        blk, nbytes = GGML[t]
        size = n // blk * nbytes
        out += gguf_string(name) + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", t, offset)
        blobs.append(bytes(rng.getrandbits(8) for _ in range(size)))
        offset += (size + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for b in blobs:
        out += b + b"\0" * (-len(b) % alignment)
    return out


def gguf_seeds():
    byte_tokens = [chr(0x100 + b) if b < 33 or 126 < b < 161 or b == 173 else chr(b)
                   for b in range(256)]
    llama = {"general.architecture": "llama", "llama.block_count": 1,
             "llama.embedding_length": 32, "llama.attention.head_count": 2,
             "llama.attention.head_count_kv": 1, "llama.feed_forward_length": 64,
             "llama.context_length": 128, "llama.attention.layer_norm_rms_epsilon": 1e-5,
             "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
             "tokenizer.ggml.tokens": byte_tokens[:64] + ["<|im_end|>"],
             "tokenizer.ggml.token_type": [1] * 64 + [3],
             "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.eos_token_id": 64}
    every_type = [(f"t{t}", t, [GGML[t][0] * 2, 2]) for t in GGML]
    return {
        "every_type": gguf({"general.alignment": 32}, every_type),
        "llama_header": gguf(llama, [("token_embd.weight", 12, [256, 2]),
                                     ("output_norm.weight", 0, [32])]),
        "v2_small": gguf({"a": [1, 2, 3], "b": ["x", "y"], "c": 1.5, "d": True},
                         [("q", 8, [32, 1])], version=2),
        "nested_arrays": gguf({"n": [[1, 2], [3]]}, []),
    }


def safetensors(tensors, metadata=None):
    """tensors [(name, dtype, shape)]; data random."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2}
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = sizes[dtype]
        for x in shape:
            n *= x
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        data += bytes((off + i) % 251 for i in range(n))
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hf_config(arch, extra):
    c = {"architectures": [arch], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 256,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    c.update(extra)
    return json.dumps(c).encode()


TEXTS = ["Hello world", " the thing 12345 in going", "caf\u00e9 na\u00efve \u4f60\u597d \U0001F600",
         "<|im_start|>user\nhi<|im_end|>", "<tool_call>x</tool_call>", "  \n\t  tabs\r\n",
         "I'm you'll we'd", "\u2581lead", "a" * 40]


def chat(template, gen, messages):
    roles = {"system": 0, "user": 1, "assistant": 2}
    body = b"\0".join(bytes([roles[r]]) + c.encode() for r, c in messages)
    return bytes([template, gen]) + body


def http(method, target, headers, body=b""):
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


REQUESTS = [
    {"prompt": "Hello", "max_tokens": 4},
    {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
     "seed": 7, "stop": ["\n", "end"], "n": 2},
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi"}], "max_completion_tokens": 3},
    {"prompt": "x", "presence_penalty": 0.5, "frequency_penalty": -0.5,
     "repetition_penalty": 1.1, "min_p": 0.1, "logit_bias": {"5": -100},
     "stop_token_ids": [3], "min_tokens": 1, "ignore_eos": True},
    {"prompt": "x", "kv_policy": "adakv", "kv_budget": 0.2, "kv_window": 8, "logprobs": 2,
     "echo": True},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
]


def plan_bytes(entries):
    out = struct.pack("<Q", 1) + struct.pack("<Q", 9)  # report [9]
    out += struct.pack("<Q", 0)  # release
    out += struct.pack("<Q", 0)  # prefix_evict
    out += struct.pack("<Q", 0)  # start
    out += struct.pack("<Q", 0)  # prefix_attach
    out += struct.pack("<Q", 1) + struct.pack("<Q", 9)  # rewind_lookahead [9]
    out += struct.pack("<Q", 0)  # end_lookahead
    out += struct.pack("<Q", 0)  # fork
    out += struct.pack("<Q", 0)  # gather_scores
    out += struct.pack("<Q", len(entries))
    for eid, tokens, logits in entries:
        out += struct.pack("<QQ", eid, len(tokens)) + b"".join(struct.pack("<i", t) for t in tokens)
        out += struct.pack("<??II", logits, False, 0, 0xFFFFFFFF)
    out += struct.pack("<Q", 0)  # prefix_insert
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    seeds = {"gguf": gguf_seeds()}
    seeds["safetensors"] = {
        "three": safetensors([("a", "F32", [2, 3]), ("b", "BF16", [4]), ("c", "F16", [])],
                             {"format": "pt"}),
        "empty": safetensors([]),
    }
    seeds["hf_config"] = {
        "llama": hf_config("LlamaForCausalLM", {}),
        "llama3_rope": hf_config("LlamaForCausalLM", {"rope_scaling": {
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
        "qwen2_yarn": hf_config("Qwen2ForCausalLM", {"model_type": "qwen2", "rope_scaling": {
            "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}),
        "mistral": hf_config("MistralForCausalLM", {"model_type": "mistral",
                                                    "sliding_window": None, "head_dim": 16}),
    }
    seeds["tokenizer"] = {f"v{v}_{i}": bytes([v, i % 2]) + t.encode()
                          for v in range(6) for i, t in enumerate(TEXTS)}
    conv = [("system", "You are terse."), ("user", "Hi"), ("assistant", "Hello."),
            ("user", "2+2?")]
    seeds["chat_template"] = {f"t{t}_{g}": chat(t, g, conv if g else conv[1:2])
                              for t in range(8) for g in range(2)}
    seeds["request_json"] = {f"r{i}": json.dumps(r).encode() for i, r in enumerate(REQUESTS)}
    body = json.dumps(REQUESTS[0]).encode()
    seeds["http_request"] = {
        "get": http("GET", "/v1/models", [("Host", "x")]),
        "post": http("POST", "/v1/completions", [("Host", "x"), ("Content-Type",
                     "application/json"), ("Content-Length", str(len(body)))], body),
        "chunked": http("POST", "/v1/chat/completions", [("Transfer-Encoding", "chunked"),
                        ("Expect", "100-continue")], b"5\r\nhello\r\n0\r\n\r\n"),
        "pipelined": http("GET", "/health", [("Connection", "keep-alive")]) * 3,
    }
    seeds["cluster_config"] = {}
    for folder, target in (("configs/cluster", "cluster_config"),
                           ("configs/compression", "compression_preset")):
        seeds.setdefault(target, {})
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith(".yaml"):
                with open(os.path.join(ROOT, folder, name), "rb") as f:
                    seeds[target][name] = f.read()
    magic = struct.pack("<I", 0x41444B43)
    plan = plan_bytes([(9, [1, 2, 3], True), (10, [4], False)])
    seeds["wire"] = {
        "plan": b"\0" + plan,
        "shutdown": b"\1" + magic + b"\1",
        "step": b"\1" + magic + b"\3" + plan,
        "configure": b"\1" + magic + b"\2" + struct.pack("<QQIIQQQ", 64, 16, 0, 0, 64, 2048, 512),
    }
    for target, files in seeds.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    print(f"fuzz corpora: {sum(len(f) for f in seeds.values())} seeds for {len(seeds)} targets "
          f"in {out}")


if __name__ == "__main__":
    main()
