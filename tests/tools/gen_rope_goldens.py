#!/usr/bin/env python3
"""RoPE frequency goldens from the oracle: transformers' LlamaRotaryEmbedding.

Writes tests/data/rope_goldens.json, read by tests/unit/test_rope_frequencies.cpp: for each case
the config it was made from (theta, rot_dim, the rope_scaling dict, max_position_embeddings), the
inverse frequencies transformers computes (float32, as their exact decimal) and its
attention_scaling (the factor cos and sin are multiplied by).

Needs: pip install torch transformers. Usage: python3 tests/tools/gen_rope_goldens.py
"""
import json
import os

from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "rope_goldens.json")

CASES = [
    ("plain", 10000.0, 64, None, 2048),
    ("plain_qwen", 1000000.0, 64, None, 32768),
    ("linear", 10000.0, 128, {"rope_type": "linear", "factor": 4.0}, 16384),
    # Llama 3.1's own values.
    ("llama3_8b", 500000.0, 128,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 131072),
    ("llama3_small", 10000.0, 16,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, 256),
    # Qwen2.5's documented YaRN for 128k.
    ("yarn_qwen", 1000000.0, 64,
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ("yarn_betas", 10000.0, 128,
     {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
      "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.5}, 65536),
]


def main():
    cases = []
    for name, theta, rot_dim, scaling, max_pos in CASES:
        params = {"rope_theta": theta, "rope_type": "default"}
        if scaling:
            params.update(scaling)
        config = LlamaConfig(hidden_size=rot_dim * 4, num_attention_heads=4,
                             max_position_embeddings=max_pos, rope_parameters=params)
        # The module the model itself rotates with.
        rotary = LlamaRotaryEmbedding(config)
        inv_freq, attention = rotary.inv_freq, rotary.attention_scaling
        cases.append({
            "name": name, "theta": theta, "rot_dim": rot_dim, "scaling": scaling or {},
            "inv_freq": [float(x) for x in inv_freq.float().tolist()],
            "attention_scaling": float(attention),
        })
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f, indent=1)
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
