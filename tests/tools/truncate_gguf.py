#!/usr/bin/env python3
"""Writes a copy of a GGUF model that keeps only its first N transformer layers.

Every other tensor (embedding, output norm, output head) and every metadata key are copied as
they are, tensor bytes untouched in their own formats; only `<arch>.block_count` becomes N. The
result is a real model of the same family, shapes and formats, small enough to carry where a
whole model does not fit (tests/gpu/run-on-device.sh takes one to a GPU machine). Its outputs are
not the full model's: compare backends on it, not quality.

Needs the `gguf` package (pip install gguf).

Usage: truncate_gguf.py INPUT OUTPUT --layers N
"""

import argparse
import re
import sys

from gguf import GGUFReader, GGUFValueType, GGUFWriter

# Keys the writer derives itself (the header's counts) or sets from the constructor.
DERIVED_KEYS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")


def field_value(field):
    """The field's value and types as GGUFWriter.add_key_value takes them."""
    main = field.types[0]
    sub = field.types[-1] if main == GGUFValueType.ARRAY else None
    if main == GGUFValueType.ARRAY and len(field.types) > 2:
        raise ValueError(f"{field.name}: nested arrays are not supported")
    value = field.contents()
    return value, main, sub


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--layers", type=int, required=True, help="layers kept (the first N)")
    args = ap.parse_args()

    reader = GGUFReader(args.input)
    arch = reader.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    layers = int(reader.fields[count_key].contents())
    if not 1 <= args.layers <= layers:
        sys.exit(f"--layers must be in [1, {layers}], got {args.layers}")

    writer = GGUFWriter(args.output, arch)
    if "general.alignment" in reader.fields:
        writer.data_alignment = int(reader.fields["general.alignment"].contents())
    for name, field in reader.fields.items():
        if name in DERIVED_KEYS:
            continue
        value, vtype, sub = field_value(field)
        if name == count_key:
            value = args.layers
        writer.add_key_value(name, value, vtype, sub)

    block = re.compile(r"^blk\.(\d+)\.")
    kept = dropped = 0
    for t in reader.tensors:
        m = block.match(t.name)
        if m and int(m.group(1)) >= args.layers:
            dropped += 1
            continue
        # The reader gives a block-format tensor as its bytes (uint8, rows of blocks) and a float
        # one as its values; with raw_dtype the writer takes both as they are and derives the
        # element shape it records.
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        kept += 1

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{args.output}: {args.layers} of {layers} layers, {kept} tensors kept, {dropped} dropped")


if __name__ == "__main__":
    main()
