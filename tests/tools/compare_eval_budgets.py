#!/usr/bin/env python3
"""Checks that two `adakv eval` results files (e.g. TP 1 and TP 2) computed the same budget
vector for every prompt they share: records are matched by (length, depth, trial) and runs by
position (both files must list the same policies). Prints one line per compressed run and the
KV bytes each kept; exits 1 on any difference or when no prompt is shared.

Usage: compare_eval_budgets.py A_results.json B_results.json
"""
import json
import sys


def records(path):
    d = json.load(open(path))
    runs = [(r["policy"], r["budget"]) for r in d["runs"]]
    return runs, {(r["length"], r["depth"], r["trial"]): r for r in d["records"]}


def main(a_path, b_path):
    a_runs, a = records(a_path)
    b_runs, b = records(b_path)
    if a_runs != b_runs:
        print(f"the files list different runs: {a_runs} vs {b_runs}")
        return 1
    shared = sorted(set(a) & set(b))
    if not shared:
        print("no prompt is in both files")
        return 1
    bad = 0
    for key in shared:
        for (policy, budget), ra, rb in zip(a_runs, a[key]["runs"], b[key]["runs"]):
            if not ra.get("budgets_fingerprint"):
                continue
            same = ra["budgets_fingerprint"] == rb["budgets_fingerprint"]
            agree = rb.get("budgets_agree_across_ranks", True)
            bad += not (same and agree)
            print(f"len {key[0]} depth {key[1]:g} {policy}@{budget}: budgets "
                  f"{'identical' if same else 'DIFFERENT'} ({ra['budgets_fingerprint']} vs "
                  f"{rb['budgets_fingerprint']}), ranks agree: {agree}; kept "
                  f"{ra['kv_bytes']} of {ra['kv_full_bytes']} bytes, freed "
                  f"{ra['kv_full_bytes'] - ra['kv_bytes']}; answers {ra['output']!r} / "
                  f"{rb['output']!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
