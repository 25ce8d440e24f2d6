#!/usr/bin/env bash
# cluster/slurm/adakv.sbatch without Slurm: its layout check and the command it would run
# (ADAKV_DRY_RUN=1), for the 2-node layouts TP 8 x PP 2, DP 2 x TP 8 and TP 16, under a faked
# allocation (SLURM_* variables).
set -uo pipefail
script="$(cd "$(dirname "$0")/../.." && pwd)/cluster/slurm/adakv.sbatch"
failures=0
# run EXPECTED_RC NEEDLE... -- ENV... : runs the script with ENV, checks the exit code and that
# every NEEDLE is in its output (stdout and stderr).
run() {
  local want_rc="$1"; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local out rc
  out="$(env -i PATH="$PATH" HOME="${HOME:-/tmp}" SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 \
    SLURM_JOB_NUM_NODES=2 ADAKV_DRY_RUN=1 ADAKV_BIN=/opt/adakv "$@" \
    bash "$script" serve --host 0.0.0.0 2>&1)"
  rc=$?
  local ok=1
  [ "$rc" = "$want_rc" ] || ok=0
  for n in "${needles[@]}"; do [[ "$out" == *"$n"* ]] || ok=0; done
  if [ "$ok" = 1 ]; then
    echo "ok: $*"
  else
    echo "FAIL: $* (rc $rc, want $want_rc; expected: ${needles[*]})"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
absent() {  # like run, but NEEDLE must not appear
  local needle="$1"; shift
  local out
  out="$(env -i PATH="$PATH" SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE=8 ADAKV_DRY_RUN=1 "$@" \
    bash "$script" serve 2>&1)"
  if [[ "$out" == *"$needle"* ]]; then
    echo "FAIL: '$needle' in the output of $*"; failures=$((failures + 1))
  else
    echo "ok: no '$needle' with $*"
  fi
}

run 0 "TP 8 x PP 2 x DP 1 (16 ranks, 8 per node)" \
  "srun --mpi=pmix --distribution=block --cpu-bind=none --export=ALL,ADAKV_PP_SIZE=2 /opt/adakv serve" \
  -- ADAKV_PP_SIZE=2
run 0 "TP 8 x PP 1 x DP 2" "--export=ALL,ADAKV_DP_SIZE=2 /opt/adakv" -- ADAKV_DP_SIZE=2
run 0 "-x ADAKV_PP_SIZE=2 /opt/adakv serve" -- ADAKV_PP_SIZE=2 ADAKV_STARTER=mpirun
absent "ADAKV_PP_SIZE=" ADAKV_DP_SIZE=2
absent "ADAKV_DP_SIZE=" ADAKV_PP_SIZE=2 ADAKV_STARTER=mpirun
# TP 16 over two nodes of 8: refused unless asked for.
run 2 "TP 16 x PP 1 x DP 1 (16 ranks, 8 per node) puts a TP group on more than one node" \
  "ADAKV_ALLOW_TP_ACROSS_NODES=1" --
run 0 "TP 16 x PP 1 x DP 1" "--export=ALL /opt/adakv serve" -- ADAKV_ALLOW_TP_ACROSS_NODES=1
# Bad sizes name the variable.
run 2 "ADAKV_PP_SIZE x ADAKV_DP_SIZE = 3 does not divide the 16 tasks" -- ADAKV_PP_SIZE=3
run 2 "ADAKV_PP_SIZE: '0' is not a positive integer" -- ADAKV_PP_SIZE=0
run 2 "ADAKV_DP_SIZE: 'two' is not a positive integer" -- ADAKV_DP_SIZE=two
# TP 3 x PP 2 on 2 nodes x 3 tasks; and the per-node count from SLURM_TASKS_PER_NODE.
run 0 "TP 3 x PP 2 x DP 1 (6 ranks, 3 per node)" -- SLURM_NTASKS=6 SLURM_NTASKS_PER_NODE=3 \
  ADAKV_PP_SIZE=2
run 0 "TP 8 x PP 2 x DP 1 (16 ranks, 8 per node)" -- SLURM_NTASKS_PER_NODE= \
  SLURM_TASKS_PER_NODE="8(x2)" ADAKV_PP_SIZE=2
run 2 "tasks per node differ (8,4)" -- SLURM_NTASKS=12 SLURM_NTASKS_PER_NODE= \
  SLURM_TASKS_PER_NODE=8,4

[ "$failures" = 0 ] && echo "slurm layout: all passed" || echo "slurm layout: $failures failed"
[ "$failures" = 0 ]
