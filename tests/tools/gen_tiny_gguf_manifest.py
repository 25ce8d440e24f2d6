#!/usr/bin/env python3
"""The manifest of llama.cpp's own conversion of the tiny Hugging Face checkpoints
(tests/tools/make_tiny_hf_models.py) to GGUF: tests/data/tiny_gguf_manifest.json, against which
tests/tools/make_tiny_gguf_models.py proves that the GGUFs it writes without torch hold what
llama.cpp's convert_hf_to_gguf.py writes (--outtype f32).

Per model the manifest holds every metadata key with its GGUF type and value (a string or number
array longer than 16 entries as its length and the sha256 of its canonical JSON, see
manifest_value()), and every tensor's name, GGML type, shape (GGUF order, innermost first) and
the sha256 of its bytes, in file order. The GGUF.* keys the reader synthesizes are left out.
Also the sha256 of the whole file, which depends on the gguf writer's layout as well (alignment,
padding): reported, not required.

The converter refuses the tiny byte-level BPE tokenizer: its pre-tokenizer hash is in no list.
That tokenizer is ByteLevel with the GPT-2 regex, what llama.cpp calls "gpt-2", so the
conversion runs with the converter's get_vocab_base_pre answering "gpt-2"; nothing else is
patched.

Needs the oracle's python (torch, numpy, tokenizers, transformers) and the llama.cpp source
(the vendor/llama.cpp of the llama-cpp-python sdist: convert_hf_to_gguf.py, conversion/,
gguf-py/). Usage:
  gen_tiny_gguf_manifest.py --llama-cpp DIR [--models DIR] [--keep DIR]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "tiny_gguf_manifest.json")
# The checkpoints converted: f32 only (the converter's f32 output of a bf16/f16 checkpoint is the
# same conversion), one per architecture and RoPE scaling adakv reads from a GGUF.
MODELS = ["llama-f32", "llama3-rope-f32", "linear-rope-f32", "yarn-rope-f32", "mistral-f32",
          "qwen2-f32"]
PRE = "gpt-2"
SMALL_ARRAY = 16

# Runs in a child python: the converter with get_vocab_base_pre patched, argv as given.
CONVERT = """
import runpy, sys
llama_cpp, argv = sys.argv[1], sys.argv[2:]
sys.path.insert(0, llama_cpp)
sys.path.insert(1, llama_cpp + "/gguf-py")
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: %r
sys.argv = [llama_cpp + "/convert_hf_to_gguf.py"] + argv
runpy.run_path(sys.argv[0], run_name="__main__")
""" % PRE


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def manifest_value(value):
    """A metadata value as the manifest holds it: itself, or for a long array its length and the
    sha256 of json.dumps(list, ensure_ascii=False, separators=(",", ":")) in UTF-8."""
    if isinstance(value, list) and len(value) > SMALL_ARRAY:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return {"length": len(value), "sha256": sha256(text.encode())}
    return value


def field_value(field, gguf):
    """A GGUFReader field's value as Python: str, int, float, bool or a list of them."""
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        return [part_value(field, i, field.types[-1], gguf) for i in field.data]
    return part_value(field, field.data[0], t, gguf)


def part_value(field, index, t, gguf):
    part = field.parts[index]
    if t == gguf.GGUFValueType.STRING:
        return bytes(part).decode("utf-8")
    v = part.tolist()[0]
    if t == gguf.GGUFValueType.BOOL:
        return bool(v)
    return v


def describe(path, gguf):
    """The manifest entry of one GGUF file."""
    r = gguf.GGUFReader(path)
    meta = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        t = field.types[0]
        type_name = t.name
        if t == gguf.GGUFValueType.ARRAY:
            type_name = "ARRAY[" + field.types[-1].name + "]"
        meta.append({"key": name, "type": type_name,
                     "value": manifest_value(field_value(field, gguf))})
    tensors = [{"name": t.name, "type": t.tensor_type.name,
                "shape": [int(n) for n in t.shape],
                "sha256": sha256(t.data.tobytes())} for t in r.tensors]
    return {"metadata": meta, "tensors": tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True,
                    help="llama.cpp's source: convert_hf_to_gguf.py, conversion/, gguf-py/")
    ap.add_argument("--models", help="the directory make_tiny_hf_models.py wrote")
    ap.add_argument("--keep", help="also leave the converted GGUFs in this directory")
    args = ap.parse_args()
    llama_cpp = os.path.abspath(args.llama_cpp)
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf  # llama.cpp's own gguf-py, the one its converter writes with

    manifest = {"converter": "llama.cpp convert_hf_to_gguf.py --outtype f32",
                "tokenizer_pre": PRE, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.models
        if root is None:
            root = os.path.join(tmp, "hf")
            subprocess.run([sys.executable, os.path.join(HERE, "make_tiny_hf_models.py"), root],
                           check=True, stdout=subprocess.DEVNULL)
        out_dir = args.keep or tmp
        os.makedirs(out_dir, exist_ok=True)
        for name in MODELS:
            out = os.path.join(out_dir, name + ".gguf")
            subprocess.run([sys.executable, "-c", CONVERT, llama_cpp, os.path.join(root, name),
                            "--outtype", "f32", "--outfile", out], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            manifest["models"][name] = describe(out, gguf)
            with open(out, "rb") as f:
                manifest["models"][name]["file_sha256"] = sha256(f.read())
            print(f"{name}: {len(manifest['models'][name]['tensors'])} tensors, "
                  f"{len(manifest['models'][name]['metadata'])} keys")
    with open(OUT, "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
