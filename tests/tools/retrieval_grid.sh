#!/usr/bin/env bash
# The README's retrieval grid in one command: passkey and niah at 1k, 2k, 4k and 8k tokens x
# 5 depths x TRIALS prompts per cell, budgets 10/20/50%, every compression policy, the SmolLM2
# preset. The two tasks run side by side, one thread each; the grid is prefill-bound (on 2 cores
# at 10 trials: about 50 minutes up to 4k, 8k alone about 100 more, hence TRIALS_8K). A length
# whose results file exists is not run again, so a stopped grid resumes. Each task's merged
# table lands in OUT/<task>/. BUDGETS=64,128,256 runs the grid at tokens per head instead;
# FLAGS="--lookahead-weight 4" adds compression flags on top of the preset.
#
#   tests/tools/retrieval_grid.sh OUT SEED [TRIALS [TRIALS_8K]]
set -euo pipefail
out=${1:?usage: retrieval_grid.sh OUT SEED [TRIALS [TRIALS_8K]]}
seed=${2:?usage: retrieval_grid.sh OUT SEED [TRIALS [TRIALS_8K]]}
trials=${3:-10}
trials_8k=${4:-$trials}
top=$(cd "$(dirname "$0")/../.." && pwd)
adakv=${ADAKV:-$top/build/adakv}  # ADAKV=copy: rebuilding the tree cannot touch a running grid
preset=$top/configs/compression/smollm2-135m.yaml
budgets=${BUDGETS:-0.1,0.2,0.5}
read -r -a flags <<<"${FLAGS:-}"
[ -x "$adakv" ] || { echo "retrieval_grid: $adakv is missing; run 'make build' first" >&2; exit 2; }
mkdir -p "$out"

run_task() {
  local task=$1 len n
  for len in 1024 2048 4096 8000; do
    [ -f "$out/$task-$len/${task}_results.json" ] && continue
    n=$trials
    [ "$len" = 8000 ] && n=$trials_8k
    "$adakv" eval "$task" --lengths "$len" --trials "$n" --seed "$seed" --threads 1 \
      --budgets "$budgets" --policies snapkv,adakv,pyramidkv,ada-pyramid --preset "$preset" \
      "${flags[@]}" --out "$out/$task-$len" >"$out/$task-$len.log" 2>&1
  done
  "$adakv" eval report "$out/$task"-*/"${task}_results.json" --out "$out/$task" >"$out/$task.log"
}

run_task passkey &
passkey=$!
run_task niah &
niah=$!
status=0
wait "$passkey" || { echo "retrieval_grid: passkey failed, see $out/passkey-*.log" >&2; status=1; }
wait "$niah" || { echo "retrieval_grid: niah failed, see $out/niah-*.log" >&2; status=1; }
[ "$status" = 0 ] && cat "$out/passkey.log" "$out/niah.log"
exit "$status"
