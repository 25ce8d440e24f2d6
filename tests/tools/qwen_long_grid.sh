#!/usr/bin/env bash
# Ada-KV on Qwen2.5-Coder-0.5B at long context: passkey and niah at 8k, 16k and 32k tokens,
# full / snapkv / adakv at 10% and 20% of the prompt, official settings (no preset), float32 KV
# and float32 decode products (so that TP 1 and TP 2 round alike). TP 1 runs DEPTHS (default
# 25,75) with one prompt per cell; TP 2 (mpirun -np 2, one thread per rank) runs the first depth
# again, and tests/tools/compare_eval_budgets.py checks that both computed the same budget
# vector for every prompt and policy. One prefill per prompt serves every policy; on 2 cores a
# 32k prompt takes several minutes. A part whose results file exists is not run again, so a
# stopped grid resumes. Merged tables land in OUT/<task>/. LENGTHS and DEPTHS override the
# defaults (e.g. LENGTHS=32704 DEPTHS=50 for one 32k depth).
#
#   tests/tools/qwen_long_grid.sh OUT [SEED]
set -euo pipefail
out=${1:?usage: qwen_long_grid.sh OUT [SEED]}
seed=${2:-0}
top=$(cd "$(dirname "$0")/../.." && pwd)
adakv=${ADAKV:-$top/build/adakv}  # ADAKV=copy: rebuilding the tree cannot touch a running grid
model=${MODEL:-qwen2.5-coder-0.5b}
depths=${DEPTHS:-25,75}
lengths=${LENGTHS:-8192 16384 32704}
python=${PYTHON:-python3}
[ -x "$adakv" ] || { echo "qwen_long_grid: $adakv is missing; run 'make build' first" >&2; exit 2; }
mkdir -p "$out"
flags=(--model "$model" --trials 1 --seed "$seed" --budgets 0.1,0.2 --policies full,snapkv,adakv
  --kv-dtype f32 --decode-dots float)

for len in $lengths; do
  for task in niah passkey; do
    part=$out/$task-$len-tp1
    [ -f "$part/${task}_results.json" ] ||
      "$adakv" eval "$task" "${flags[@]}" --lengths "$len" --depths "$depths" --threads 2 \
        --out "$part" >"$part.log" 2>&1
    part=$out/$task-$len-tp2
    [ -f "$part/${task}_results.json" ] ||
      mpirun --allow-run-as-root --oversubscribe -np 2 "$adakv" eval "$task" "${flags[@]}" \
        --lengths "$len" --depths "${depths%%,*}" --threads 1 --out "$part" >"$part.log" 2>&1
    "$python" "$top/tests/tools/compare_eval_budgets.py" "$out/$task-$len-tp1/${task}_results.json" \
      "$part/${task}_results.json" >"$out/$task-$len-budgets.txt" ||
      echo "qwen_long_grid: TP 1 and TP 2 budgets differ, see $out/$task-$len-budgets.txt" >&2
  done
done
for task in niah passkey; do
  "$adakv" eval report "$out/$task"-*-tp1/"${task}_results.json" --out "$out/$task" >"$out/$task.log"
done
