#!/usr/bin/env bash
# cluster/slurm/adakv.sbatch with ADAKV_STARTER=mpirun, under a faked one-node allocation (no
# Slurm here): SIGTERM to the batch script, as scancel and the time limit send it, drains the
# TP 3 server's stream in flight (finish_reason and [DONE]), the script exits 0 and no rank is
# left. Usage: test_slurm_serve_drain.sh ADAKV_BIN
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
port=$((19000 + $$ % 1000))
work="$(mktemp -d)"
trap 'pkill -9 -f "serve --port $port" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "--- script stderr ---"; cat "$work/err"; exit 1; }

export SLURM_NTASKS=3 SLURM_NTASKS_PER_NODE=3 ADAKV_STARTER=mpirun ADAKV_BIN="$bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 NCCL_SOCKET_IFNAME=lo OMP_WAIT_POLICY=passive
bash "$repo/cluster/slurm/adakv.sbatch" serve --port "$port" --threads 1 --drain-s 4 \
  > /dev/null 2> "$work/err" &
script=$!
for _ in $(seq 240); do
  curl -sf "localhost:$port/health" > /dev/null && break
  kill -0 "$script" 2> /dev/null || fail "the script exited before the server answered"
  sleep 0.5
done
curl -sN "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":4000,"stream":true,"ignore_eos":true}' \
  > "$work/stream" &
for _ in $(seq 100); do [ -s "$work/stream" ] && break; sleep 0.1; done
[ -s "$work/stream" ] || fail "no streamed byte within 10 s"
start=$(date +%s)
kill -TERM "$script"
wait "$script"
rc=$?
took=$(($(date +%s) - start))
sleep 0.5
[ "$rc" = 0 ] || fail "the script exited $rc after SIGTERM (expected 0)"
(( took <= 20 )) || fail "it took ${took}s to stop (drain 4 s)"
grep -q '"finish_reason":"\(abort\|length\)"' "$work/stream" || fail "the stream has no finish_reason"
grep -q 'data: \[DONE\]' "$work/stream" || fail "the stream has no [DONE]"
grep -q "draining for up to" "$work/err" || fail "rank 0 did not drain"
pgrep -f "serve --port $port" > /dev/null && fail "ranks are left"
echo "slurm serve drain: SIGTERM -> exit 0 after ${took}s, the stream ended with a finish_reason"
