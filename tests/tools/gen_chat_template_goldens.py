#!/usr/bin/env python3
r"""Writes tests/data/chat_template_goldens.jsonl: conversations rendered by transformers'
apply_chat_template(messages, tokenize=False, add_generation_prompt=...) with the real Jinja
templates of the model families adakv renders, for test_chat_template_goldens.cpp to compare
adakv's ChatTemplate::named(FAMILY).render(...) with.

Usage: /tmp/qwen_oracle/bin/python tests/tools/gen_chat_template_goldens.py
           [--sdist-dir DIR] [--smollm2-gguf PATH] [--out PATH] [--sources-out DIR]
Needs transformers, tokenizers, jinja2 and gguf (PyPI), and pip to fetch the llama-cpp-python
sdist into --sdist-dir (default /tmp/adakv-chat-templates-sdist) unless it is there already.

Where the templates come from (read here, never committed; each golden line carries the source's
name and sha256):
  the llama-cpp-python 0.3.36 sdist, which vendors llama.cpp:
    vendor/llama.cpp/models/templates/*.jinja   qwen2.5, llama3.1 (3.1 and 3.2; 3.3's file is
                                                byte for byte 3.1's), mistral-tekken
    vendor/llama.cpp/tests/test-chat-template.cpp  mistral-v1 and mistral-v3 (the strings
                                                llama.cpp's test names "Mistral-7B-Instruct-v0.2
                                                ... 'v1' template" and "Mistral-Large-Instruct-2407
                                                ... 'v3' template")
    llama_cpp/llama_chat_format.py              llama3 (LLAMA3_INSTRUCT_CHAT_TEMPLATE)
  the default model file (SmolLM2-135M-Instruct GGUF): smollm2.
No source of the Llama 2 chat template is reachable from PyPI (it lives in the gated
meta-llama repositories of the Hugging Face hub). --extra FAMILY=PATH adds the lines of a
template file given by hand: the committed goldens were written with
--extra llama2=Llama-2-7b-chat-hf.jinja, a file holding the chat_template string of
meta-llama/Llama-2-7b-chat-hf's tokenizer_config.json (sha256 e8d5b5a5...41cf, in the lines).
Without it the script writes no llama2 lines.

Llama 3.2's template asks strftime_now for today's date, which transformers provides; adakv
always renders the templates' own fallback date (model/tokenizer/chat_template.h), so those
lines pass date_string="26 Jul 2024" and say so in "kwargs".

A conversation the template refuses is a line with "error" instead of "text": the message of
raise_exception (jinja2's TemplateError) for a role order, or "undefined" where the template
reads something the conversation lacks (jinja2's UndefinedError).

Line format: {"family", "source", "source_sha256", "messages", "add_generation_prompt",
"kwargs", "text" | "error"}. --sources-out DIR also writes each source as DIR/<sha256>.jinja so
that ADAKV_CHAT_TEMPLATE_SOURCES=DIR lets the test check ChatTemplate::recognise on them.
"""
import argparse
import ast
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

SDIST_VERSION = "0.3.36"
# BOS and EOS of the families an --extra file may be (Llama 2 and Mistral: "<s>", "</s>").
EXTRA_SPECIALS = {"smollm2": ("<|im_start|>", "<|im_end|>"),
                  "qwen2.5": ("<|endoftext|>", "<|im_end|>"),
                  "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
                  "llama3.1": ("<|begin_of_text|>", "<|eot_id|>")}
FIXED_DATE = "26 Jul 2024"

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
     {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "  Grüße, 世界! 👋 \u3000\n"},
     {"role": "assistant", "content": "\u00a0Ça va ? ✓ "}, {"role": "user", "content": "\tnaïve\n"}],
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "x"}],
    [{"role": "system", "content": " padded system \n"}, {"role": "user", "content": " u "},
     {"role": "assistant", "content": ""}, {"role": "user", "content": "line1\nline2"}],
    # Role orders Llama 2 and Mistral refuse:
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}],
    [{"role": "system", "content": "s"}, {"role": "system", "content": "t"},
     {"role": "user", "content": "u"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "system", "content": "s"}, {"role": "user", "content": "c"}],
]
# No empty conversation: apply_chat_template refuses one before any template runs.


def fetch_sdist(where):
    root = os.path.join(where, f"llama_cpp_python-{SDIST_VERSION}")
    if os.path.isdir(root):
        return root
    os.makedirs(where, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--dest", where,
                    f"llama-cpp-python=={SDIST_VERSION}"], check=True)
    tarball = glob.glob(os.path.join(where, "llama_cpp_python-*.tar.gz"))[0]
    subprocess.run(["tar", "-xzf", tarball, "-C", where], check=True)
    return root


def python_constant(path, name):
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{name} not found in {path}")


def llama_cpp_test_template(path, case_name):
    """The template_str of the test case called `case_name` in test-chat-template.cpp."""
    text = open(path, encoding="utf-8").read()
    at = text.index('/* .name= */ "' + case_name)
    m = re.compile(r'/\* \.template_str= \*/ ("(?:[^"\\]|\\.)*")').search(text, at)
    # A C string literal of plain escapes reads the same as a Python one.
    return ast.literal_eval(m.group(1))


def gguf_template(path):
    import gguf
    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def tokenizer_for(template, bos, eos):
    """A transformers tokenizer carrying `template` and the family's BOS/EOS strings."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {bos: 0, eos: 1, "<unk>": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                   unk_token="<unk>", chat_template=template)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--sdist-dir", default="/tmp/adakv-chat-templates-sdist")
    ap.add_argument("--smollm2-gguf",
                    default=os.path.expanduser(
                        "~/.cache/adakv/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(here, "..", "data",
                                                  "chat_template_goldens.jsonl"))
    ap.add_argument("--sources-out", default="")
    ap.add_argument("--extra", action="append", default=[], metavar="FAMILY=PATH")
    args = ap.parse_args()

    import jinja2
    sdist = fetch_sdist(args.sdist_dir)
    lcpp = os.path.join(sdist, "vendor", "llama.cpp")
    templates = os.path.join(lcpp, "models", "templates")
    # (family, source name, Jinja source, bos, eos, extra kwargs)
    sources = [
        ("smollm2", os.path.basename(args.smollm2_gguf), gguf_template(args.smollm2_gguf),
         "<|im_start|>", "<|im_end|>", {}),
        ("llama3", "llama_cpp/llama_chat_format.py:LLAMA3_INSTRUCT_CHAT_TEMPLATE",
         python_constant(os.path.join(sdist, "llama_cpp", "llama_chat_format.py"),
                         "LLAMA3_INSTRUCT_CHAT_TEMPLATE"),
         "<|begin_of_text|>", "<|eot_id|>", {}),
        ("mistral-v1", "vendor/llama.cpp/tests/test-chat-template.cpp:Mistral-7B-Instruct-v0.2 v1",
         llama_cpp_test_template(os.path.join(lcpp, "tests", "test-chat-template.cpp"),
                                 "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1'"),
         "<s>", "</s>", {}),
        ("mistral-v3", "vendor/llama.cpp/tests/test-chat-template.cpp:Mistral-Large-Instruct-2407 v3",
         llama_cpp_test_template(os.path.join(lcpp, "tests", "test-chat-template.cpp"),
                                 "Mistral-Large-Instruct-2407 (mistralai 'v3'"),
         "<s>", "</s>", {}),
    ]
    for family, name, bos, eos, kwargs in [
            ("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "<|endoftext|>", "<|im_end|>", {}),
            ("llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>",
             "<|eot_id|>", {}),
            ("llama3.1", "meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>",
             "<|eot_id|>", {"date_string": FIXED_DATE}),
            ("mistral-tekken", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", {})]:
        path = os.path.join(templates, name)
        sources.append((family, "vendor/llama.cpp/models/templates/" + name,
                        open(path, encoding="utf-8").read(), bos, eos, kwargs))
    for extra in args.extra:
        family, path = extra.split("=", 1)
        bos, eos = EXTRA_SPECIALS.get(family, ("<s>", "</s>"))
        sources.append((family, os.path.basename(path), open(path, encoding="utf-8").read(),
                        bos, eos, {}))

    lines = []
    for family, name, source, bos, eos, kwargs in sources:
        sha = hashlib.sha256(source.encode("utf-8")).hexdigest()
        if args.sources_out:
            os.makedirs(args.sources_out, exist_ok=True)
            with open(os.path.join(args.sources_out, sha + ".jinja"), "w", encoding="utf-8") as f:
                f.write(source)
        tok = tokenizer_for(source, bos, eos)
        counts = {"text": 0, "error": 0}
        for messages in CONVERSATIONS:
            for gen in (True, False):
                line = {"family": family, "source": name, "source_sha256": sha,
                        "messages": messages, "add_generation_prompt": gen, "kwargs": kwargs}
                try:
                    line["text"] = tok.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=gen, **kwargs)
                except jinja2.exceptions.UndefinedError:
                    line["error"] = "undefined"
                except jinja2.exceptions.TemplateError as e:
                    line["error"] = str(e)
                counts["text" if "text" in line else "error"] += 1
                lines.append(line)
        print(f"{family:15} {name}: {counts['text']} rendered, {counts['error']} refused",
              file=sys.stderr)

    with open(args.out, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=True) + "\n")
    print(f"wrote {len(lines)} lines ({os.path.getsize(args.out)} bytes) to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
