#!/usr/bin/env python3
"""Two policies compared over several retrieval grids at once (`retrieval_grid.sh` outputs).

For every grid: the prompts (x budgets) that exactly one of the two policies answers right, and
on how many the teacher-forced answer NLL is lower with each, per task. Then the pooled counts
and a two-sided exact sign test on the prompts that only one of them gets right: one grid moves
by a prompt or two, the pooled count says whether the difference is systematic.

  python3 tests/tools/pool_grids.py [--a adakv] [--b snapkv] GRID_DIR...
"""
import argparse
import collections
import glob
import json
import math
import os


def sign_test(wins, losses):
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="adakv")
    ap.add_argument("--b", default="snapkv")
    ap.add_argument("grids", nargs="+")
    args = ap.parse_args()

    total = collections.Counter()
    for grid in args.grids:
        files = sorted(glob.glob(os.path.join(grid, "*-*", "*_results.json")))
        if not files:
            raise SystemExit(f"pool_grids: no */*_results.json under {grid}")
        count = collections.Counter()
        for path in files:
            with open(path) as f:
                d = json.load(f)
            task = d["task"]
            index = {(r["policy"], r["budget"]): i for i, r in enumerate(d["runs"])}
            budgets = sorted(b for (p, b) in index if p == args.a and (args.b, b) in index)
            for budget in budgets:
                ia, ib = index[(args.a, budget)], index[(args.b, budget)]
                for rec in d["records"]:
                    x, y = rec["runs"][ia], rec["runs"][ib]
                    count["only_a"] += x["correct"] and not y["correct"]
                    count["only_b"] += y["correct"] and not x["correct"]
                    if x.get("answer_nll") is not None and y.get("answer_nll") is not None:
                        count[(task, "nll_a")] += x["answer_nll"] < y["answer_nll"]
                        count[(task, "nll_b")] += y["answer_nll"] < x["answer_nll"]
        nll = "; ".join(
            f"{task} {count[(task, 'nll_a')]} / {count[(task, 'nll_b')]}"
            for task in ("passkey", "niah")
            if count[(task, "nll_a")] + count[(task, "nll_b")]
        )
        print(f"{grid}: right with only {args.a} {count['only_a']}, only {args.b} "
              f"{count['only_b']}" + (f" | answer NLL lower ({args.a} / {args.b}): {nll}" if nll else ""))
        total.update(count)
    p = sign_test(total["only_a"], total["only_b"])
    print(f"pooled: right with only {args.a} {total['only_a']}, only {args.b} {total['only_b']}, "
          f"two-sided sign test p = {p:.3f}")


if __name__ == "__main__":
    main()
