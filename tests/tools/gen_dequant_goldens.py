#!/usr/bin/env python3
"""Writes tests/data/dequant_goldens.bin: block decodings by the `gguf` PyPI package.

The package's gguf.quants.dequantize is the oracle for adakv's dequantize (model/gguf/dequant.cpp);
test_gguf_dequant.cpp compares the float bits exactly. Blocks are random bytes whose fp16 scale
fields are replaced by finite values (NaN or infinite scales would make the comparison
meaningless), plus blocks of edge values: extreme and subnormal scales, all-zero and all-one
quant bits.

File layout (little endian):
  "ADKVDQG1"
  u32 case count, then per case: u32 ggml type id, u32 element count, u32 byte count,
      the raw bytes, then the expected float32 values
  u32 conversion count, then per conversion: u32 float32 bits, u16 float16 bits
      (numpy's float32 -> float16 rounding, for fp32_to_fp16)
  u64 FNV-1a hash of the float32 bits of all 65536 float16 values decoded in order
      (numpy's float16 -> float32), for fp16_to_fp32

Usage: python3 tests/tools/gen_dequant_goldens.py [OUTPUT]
"""

import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

SEED = 20240611
BLOCKS_PER_CASE = 6

# Byte offsets of the fp16 scale fields (d, and dmin or m where present) inside one block.
SCALE_OFFSETS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}

EDGE_HALVES = [
    0x0000,  # +0
    0x8000,  # -0
    0x0001,  # smallest subnormal
    0x03FF,  # largest subnormal
    0x0400,  # smallest normal
    0x3C00,  # 1
    0xBC00,  # -1
    0x7BFF,  # 65504, the largest finite
    0xFBFF,  # -65504
    0x3555,  # ~1/3
]


def random_scales(rng, n):
    """Finite fp16 scales of the magnitudes real models use, with random signs."""
    mags = np.exp(rng.uniform(np.log(1e-5), np.log(2.0), n)).astype(np.float16)
    signs = np.where(rng.random(n) < 0.25, -1, 1).astype(np.float16)
    return (mags * signs).view(np.uint16)


def quant_cases(rng, qtype):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    offsets = SCALE_OFFSETS[qtype]

    random_blocks = rng.integers(0, 256, (BLOCKS_PER_CASE, block_bytes), dtype=np.uint8)
    for off in offsets:
        halves = random_scales(rng, BLOCKS_PER_CASE)
        random_blocks[:, off : off + 2] = halves.view(np.uint8).reshape(-1, 2)

    edge_blocks = []
    fills = [0x00, 0xFF, 0x55, 0xAA]
    for i, half in enumerate(EDGE_HALVES):
        block = np.full(block_bytes, fills[i % len(fills)], dtype=np.uint8)
        if i % 3 == 2:
            block = rng.integers(0, 256, block_bytes, dtype=np.uint8)
        for k, off in enumerate(offsets):
            h = EDGE_HALVES[(i + 3 * k) % len(EDGE_HALVES)] if k else half
            block[off : off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
        edge_blocks.append(block)
    edge_blocks = np.stack(edge_blocks)

    return [random_blocks, edge_blocks]


def float_cases(rng):
    cases = []
    f32 = rng.standard_normal(64).astype(np.float32) * np.float32(3.0)
    f32[:4] = [0.0, -0.0, np.finfo(np.float32).tiny, np.finfo(np.float32).max]
    cases.append((T.F32, f32.view(np.uint8)))

    f16 = rng.integers(0, 1 << 16, 256, dtype=np.uint16)
    f16[: len(EDGE_HALVES)] = EDGE_HALVES
    f16[len(EDGE_HALVES) : len(EDGE_HALVES) + 4] = [0x7C00, 0xFC00, 0x7E00, 0x7C01]  # inf, NaNs
    cases.append((T.F16, f16.view(np.uint8)))

    bf16 = rng.integers(0, 1 << 16, 256, dtype=np.uint16)
    bf16[:6] = [0x0000, 0x8000, 0x0001, 0x3F80, 0x7F80, 0x7FC0]
    cases.append((T.BF16, bf16.view(np.uint8)))
    return cases


def conversions(rng):
    """float32 -> float16 pairs: rounding boundaries, ties, subnormals, overflow, random."""
    specials = [
        0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65519.996, 65520.0, 65536.0, 1e10, -1e10,
        float("inf"), float("-inf"), 2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001,
        2.0**-26, 3 * 2.0**-25, 5 * 2.0**-25, 2.0**-15 + 2.0**-25, 1.0 + 2.0**-11,
        1.0 + 3 * 2.0**-11, 1.0 + 2.0**-11 + 2.0**-20, 2.0**-14 - 2.0**-25, 1e-30, -1e-30,
    ]
    vals = np.array(specials, dtype=np.float32)
    # Random bit patterns across all exponents (finite only), and values near half ties.
    bits = rng.integers(0, 1 << 32, 1500, dtype=np.uint64).astype(np.uint32)
    rand = bits.view(np.float32)
    rand = rand[np.isfinite(rand)]
    ties = (rng.integers(0, 1 << 16, 400, dtype=np.uint32) << 13) | 0x1000
    ties = ties.view(np.float32)
    ties = ties[np.isfinite(ties)]
    normalish = rng.standard_normal(300).astype(np.float32) * np.float32(100)
    vals = np.concatenate([vals, rand, ties, normalish]).astype(np.float32)
    with np.errstate(over="ignore"):
        halves = vals.astype(np.float16)
    return vals.view(np.uint32), halves.view(np.uint16)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    arr = np.frombuffer(data, dtype=np.uint8)
    for b in arr.tolist():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    out_path = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        Path(__file__).resolve().parents[1] / "data" / "dequant_goldens.bin")
    rng = np.random.default_rng(SEED)

    cases = float_cases(rng)
    for qtype in SCALE_OFFSETS:
        for blocks in quant_cases(rng, qtype):
            cases.append((qtype, blocks.reshape(-1)))

    out = bytearray(b"ADKVDQG1")
    out += struct.pack("<I", len(cases))
    for qtype, raw in cases:
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        expected = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
        assert expected.dtype == np.float32
        out += struct.pack("<III", int(qtype), expected.size, raw.size)
        out += raw.tobytes()
        out += expected.tobytes()

    f32_bits, f16_bits = conversions(rng)
    out += struct.pack("<I", f32_bits.size)
    for a, b in zip(f32_bits.tolist(), f16_bits.tolist()):
        out += struct.pack("<IH", a, b)

    all_halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    decoded = all_halves.view(np.float16).astype(np.float32)
    out += struct.pack("<Q", fnv1a64(decoded.tobytes()))

    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(bytes(out))
    print(f"wrote {out_path}: {len(cases)} cases, {f32_bits.size} conversions, {len(out)} bytes")


if __name__ == "__main__":
    main()
