#!/usr/bin/env python3
"""Writes two small lm-evaluation-harness tasks over local text, for runs with no network.

lm-eval's own tasks download their datasets from the Hugging Face hub, which test machines
cannot reach, so this builds lambada-style items from the license texts every Debian system
ships (/usr/share/common-licenses): a passage that stops just before the last word of a
sentence, and that word as the answer.

  adakv_lastword_ll   output_type loglikelihood: the log-probability of the word after the
                      passage (metrics: acc = the word is the greedy continuation, perplexity).
                      It goes through /v1/completions with echo + logprobs.
  adakv_lastword_gen  output_type generate_until: the model continues the passage greedily; the
                      first word it writes must be the answer (metric: exact_match). Its
                      passages are longer, so that a 20% KV budget evicts most of the prompt.

  python3 tests/tools/make_lm_eval_tasks.py --out DIR [--ll-items 300 --gen-items 40]

DIR then holds the two task YAMLs and their jsonl data; pass it to lm-eval as --include_path.
Items are drawn with a fixed seed, so the same arguments give the same files.
"""

import argparse
import json
import os
import random
import re
import sys

LICENSES = "/usr/share/common-licenses"

# A target is a plain word of 4+ letters that ends a sentence: short words ("it", "of") are
# mostly guessable from grammar alone, and a sentence end makes the word the natural stop.
TARGET = re.compile(r"(?<=\s)([A-Za-z]{4,})(?=\.\s)")


def load_text(root):
    """Every regular license file once (symlinks like GPL -> GPL-3 resolved), whitespace
    collapsed to single spaces: the line breaks of the files are layout, not text, and a
    newline in a prompt would end a generation early."""
    seen, texts = set(), []
    for name in sorted(os.listdir(root)):
        path = os.path.realpath(os.path.join(root, name))
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(" ".join(f.read().split()))
    return texts


def items(texts, context_words, count, rng):
    """`count` distinct (context, target) pairs whose context is the `context_words` words
    before the target."""
    cands = []
    for t in texts:
        for m in TARGET.finditer(t):
            before = t[: m.start()].split(" ")
            before = [w for w in before if w]
            if len(before) < context_words:
                continue
            context = " ".join(before[-context_words:])
            cands.append({"context": context, "target": m.group(1)})
    uniq = list({(c["context"], c["target"]): c for c in cands}.values())
    if len(uniq) < count:
        sys.exit(f"only {len(uniq)} items with {context_words} words of context; asked {count}")
    return rng.sample(uniq, count)


# A loglikelihood task's continuation is doc_to_target as written (lm-eval's target_delimiter
# applies to multiple_choice only), so the space before the word is part of the target.
LL_YAML = """\
task: adakv_lastword_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{' ' + target}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
metadata:
  version: 1.0
"""

# The answer is the first word generated: the regex filter takes it, so " license. This" and
# " license" both count, and exact_match compares it with the target case-insensitively.
GEN_YAML = """\
task: adakv_lastword_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: [".", ",", ";", "\\n"]
  max_gen_toks: 8
  do_sample: false
  temperature: 0
filter_list:
  - name: first_word
    filter:
      - function: regex
        regex_pattern: "([A-Za-z]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
metadata:
  version: 1.0
"""


def write(out, name, rows, yaml_text):
    data = os.path.join(out, f"{name}.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out, f"{name}.yaml"), "w", encoding="utf-8") as f:
        f.write(yaml_text.format(data=json.dumps(os.path.abspath(data))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for the task YAMLs and jsonl files")
    ap.add_argument("--ll-items", type=int, default=300)
    ap.add_argument("--ll-context-words", type=int, default=60)
    ap.add_argument("--gen-items", type=int, default=40)
    ap.add_argument("--gen-context-words", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", default=LICENSES, help="folder of plain-text files")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    texts = load_text(a.source)
    write(a.out, "adakv_lastword_ll",
          items(texts, a.ll_context_words, a.ll_items, random.Random(a.seed)), LL_YAML)
    write(a.out, "adakv_lastword_gen",
          items(texts, a.gen_context_words, a.gen_items, random.Random(a.seed + 1)), GEN_YAML)
    print(f"[lm-eval tasks] {a.ll_items} log-likelihood items ({a.ll_context_words} words of "
          f"context), {a.gen_items} generate-until items ({a.gen_context_words} words) in {a.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
