#!/usr/bin/env python3
"""The table and picture of tests/tools/qwen_long_grid.sh's TP 1 results: accuracy per task,
length and policy, and the KV bytes kept and freed (mean over the prompts of each length).

Usage: qwen_grid_table.py GRID_DIR OUT.svg   (prints the markdown table)
"""
import collections
import glob
import json
import sys

POLICIES = [("full", "100%"), ("snapkv", "10%"), ("snapkv", "20%"), ("adakv", "10%"),
            ("adakv", "20%")]


def load(grid):
    acc = collections.defaultdict(lambda: [0, 0])
    kv = collections.defaultdict(list)
    lengths = set()
    for path in glob.glob(f"{grid}/*-tp1/*_results.json"):
        d = json.load(open(path))
        runs = [(r["policy"], r["budget"]) for r in d["runs"]]
        for rec in d["records"]:
            lengths.add(rec["length"])
            for run, r in zip(runs, rec["runs"]):
                cell = acc[(d["task"], rec["length"], run)]
                cell[0] += r["correct"]
                cell[1] += 1
                kv[(rec["length"], run)].append((r["kv_bytes"], r["kv_full_bytes"]))
    return acc, kv, sorted(lengths)


def svg(kv, lengths, out):
    w, h, left, bottom = 640, 300, 60, 40
    top = max(sum(f for _, f in v) / len(v) for v in kv.values())
    bar = (w - left - 20) / (len(lengths) * (len(POLICIES) + 1))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="14">KV bytes kept per prompt, Qwen2.5-Coder-0.5B, f32 KV</text>']
    colors = ["#555", "#9ecae1", "#3182bd", "#fdae6b", "#e6550d"]
    for i, length in enumerate(lengths):
        x0 = left + i * (len(POLICIES) + 1) * bar
        parts.append(f'<text x="{x0}" y="{h - 10}">{length} tokens</text>')
        for j, run in enumerate(POLICIES):
            v = kv[(length, run)]
            kept = sum(k for k, _ in v) / len(v)
            bh = (h - bottom - 30) * kept / top
            parts.append(f'<rect x="{x0 + j * bar:.1f}" y="{h - bottom - bh:.1f}" width="{bar - 2:.1f}" '
                         f'height="{bh:.1f}" fill="{colors[j]}"/>')
            parts.append(f'<text x="{x0 + j * bar:.1f}" y="{h - bottom - bh - 3:.1f}" font-size="9">'
                         f'{kept / 1e6:.0f}</text>')
    for j, (p, b) in enumerate(POLICIES):
        parts.append(f'<rect x="{w - 130}" y="{24 + 14 * j}" width="10" height="10" fill="{colors[j]}"/>'
                     f'<text x="{w - 115}" y="{33 + 14 * j}">{p} {b} (MB)</text>')
    parts.append("</svg>\n")
    open(out, "w").write("\n".join(parts))


def main(grid, out):
    acc, kv, lengths = load(grid)
    tasks = ["niah", "passkey"]
    head = [f"{t} {n // 1024}k" for t in tasks for n in lengths]
    print("| policy | " + " | ".join(head) + " | KV kept / freed at the longest (MB) |")
    print("|---" * (len(head) + 2) + "|")
    for run in POLICIES:
        cells = [f"{acc[(t, n, run)][0]}/{acc[(t, n, run)][1]}" for t in tasks for n in lengths]
        v = kv[(lengths[-1], run)]
        kept = sum(k for k, _ in v) / len(v)
        full = sum(f for _, f in v) / len(v)
        print(f"| {run[0]} {run[1]} | " + " | ".join(cells) +
              f" | {kept / 1e6:.1f} / {(full - kept) / 1e6:.1f} |")
    svg(kv, lengths, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
