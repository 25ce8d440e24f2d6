#!/usr/bin/env bash
# ctest cluster.netns_sim: a multi-node job on one machine. Two simulated nodes (network
# namespaces, cluster/netns) run a 2-rank job, one rank per node; the ranks must land in two
# namespaces other than this one and exchange data over TCP across the bridge. Then
# `adakv launch` runs configs/cluster/netns-sim.yaml (3 ranks on 2 nodes) the same way, and
# configs/cluster/netns-sim-tp3-pp2.yaml (TP 3 x PP 2, 3 ranks per node, ADAKV_PP_SIZE=2).
#   tests/cluster/test_netns_sim.sh --probe PROBE [--adakv ADAKV] [--payload PROGRAM]...
#                                   [--tp2-model MODEL.gguf]
# PROBE is adakv_cluster_probe; each PAYLOAD runs as a 2-rank job across the two nodes too.
# With --tp2-model (and --adakv), `adakv generate` runs tensor-parallel over the two nodes
# (TP 2, compression on) and must give the same tokens and budgets as one local rank.
# Exits 77 (ctest SKIP) printing "SKIPPED: reason" only when namespaces cannot be made here.
# Takes a lock, so simulations on this machine run one at a time; removes the nodes it made
# and leaves a simulation that was already up as it was.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
sim="$repo/cluster/netns"
# shellcheck source=SCRIPTDIR/../../cluster/netns/sim-env.sh
. "$sim/sim-env.sh"

probe=""
adakv=""
payloads=()
tp2_model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --probe) probe="$2" ;;
    --adakv) adakv="$2" ;;
    --payload) payloads+=("$2") ;;
    --tp2-model) tp2_model="$2" ;;
    *)
      echo "usage: $0 --probe PROBE [--adakv ADAKV] [--payload PROGRAM]..." >&2
      exit 2
      ;;
  esac
  shift 2
done
for program in "$probe" "${payloads[@]}"; do
  [ -x "$program" ] || { echo "FAIL: no program at '$program' (build it first)" >&2; exit 1; }
done

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v mpirun >/dev/null || { echo "FAIL: no mpirun" >&2; exit 1; }

lock_dir=/run/lock
[ -d "$lock_dir" ] || lock_dir=/tmp
exec 9>"$lock_dir/adakv-netns-sim.lock"
flock -w 300 9 || { echo "FAIL: another simulation holds the lock for 5 minutes" >&2; exit 1; }

probe_ns="adakv-nstest-$$"
if ! err="$(ip netns add "$probe_ns" 2>&1)"; then
  skip "cannot create a network namespace here: $err"
fi
ip netns del "$probe_ns"

if [ -z "$(sim_existing_nodes)" ]; then
  trap '"$sim/netns-down.sh" || true' EXIT
fi
"$sim/netns-up.sh" 2

# One job across the two namespaces, RANKS_PER_NODE ranks on each; a hang fails after 120 s.
sim_run() {
  local per_node="$1"
  shift
  "$sim/run-sim.sh" -n 2 -p "$per_node" -t 120 -- "$@"
}

here_ns="$(stat -L -c %i /proc/self/ns/net)"
echo "== 2 ranks, one per simulated node (this namespace: $here_ns)"
rc=0
out="$(sim_run 1 "$probe" --expect-ranks 2 --expect-nodes 2)" || rc=$?
echo "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: the 2-rank job across the simulated nodes exited with $rc" >&2
  exit 1
fi
# Lines: "cluster probe: rank R/N local_rank L netns INODE addrs A"
inodes="$(echo "$out" | sed -n 's/^cluster probe: rank .* netns \([0-9]*\) .*/\1/p' | sort -u)"
if [ "$(echo "$inodes" | grep -c .)" -ne 2 ]; then
  echo "FAIL: expected the 2 ranks in 2 namespaces, got: $inodes" >&2
  exit 1
fi
if echo "$inodes" | grep -qx "$here_ns"; then
  echo "FAIL: a rank ran in this (the root) namespace, not on a simulated node" >&2
  exit 1
fi

# Two ranks per node: each node must be a host of its own to Open MPI, or ranks with the same
# local rank on different nodes share one shared-memory segment (this crashed every run).
echo "== 4 ranks, two per simulated node"
sim_run 2 "$probe" --expect-ranks 4 --expect-nodes 2

for p in "${payloads[@]}"; do
  echo "== payload: $p, 2 ranks, one per simulated node"
  sim_run 1 "$p"
done

if [ -n "$adakv" ] && [ -n "$tp2_model" ]; then
  echo "== adakv generate, TP 2 across the two simulated nodes, against one local rank"
  prompt="$(mktemp "${TMPDIR:-/tmp}/adakv-netns-prompt-XXXXXX")"
  head -c 2000 /usr/share/common-licenses/GPL-2 >"$prompt"
  gen=(generate --model "$tp2_model" --prompt-file "$prompt"
    --max-tokens 24 --ignore-eos --threads 1 --json --policy adakv --budget 0.2)
  one="$("$adakv" "${gen[@]}" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens"], j["kv"]["budgets"])')"
  two="$(sim_run 1 "$adakv" "${gen[@]}" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["tp"]["size"] == 2, j["tp"]; assert j["kv"]["budgets_agree_across_ranks"]; print(j["tokens"], j["kv"]["budgets"])')"
  if [ "$one" != "$two" ]; then
    echo "FAIL: TP 2 across the simulated nodes differs from one rank:" >&2
    echo "  one rank: $one" >&2
    echo "  TP 2:     $two" >&2
    exit 1
  fi
  rm -f "$prompt"
  echo "TP 2 across 2 simulated nodes: same tokens and budgets as one rank: ${two:0:120}..."
fi

if [ -n "$adakv" ]; then
  echo "== adakv launch --cluster configs/cluster/netns-sim.yaml"
  "$adakv" launch --cluster "$repo/configs/cluster/netns-sim.yaml" --exec "$probe" -- \
    --expect-ranks 3 --expect-nodes 2 --expect-env OMP_NUM_THREADS=1
  echo "== adakv launch --cluster configs/cluster/netns-sim-tp3-pp2.yaml (one stage per node)"
  "$adakv" launch --cluster "$repo/configs/cluster/netns-sim-tp3-pp2.yaml" --exec "$probe" -- \
    --expect-ranks 6 --expect-nodes 2 --expect-env ADAKV_PP_SIZE=2
  echo "== adakv generate, TP 3 x PP 2 (a stage per simulated node), against one local rank"
  prompt="$(mktemp "${TMPDIR:-/tmp}/adakv-netns-prompt-XXXXXX")"
  head -c 1500 /usr/share/common-licenses/GPL-2 >"$prompt"
  gen=(generate --prompt-file "$prompt" --max-tokens 8 --ignore-eos --json --policy adakv
    --budget 0.2 --kv-dtype f32 --decode-dots float --min-keep 0)
  one="$("$adakv" "${gen[@]}" --threads 1 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens"], j["kv"]["budgets"])')"
  six="$("$adakv" launch --cluster "$repo/configs/cluster/netns-sim-tp3-pp2.yaml" -- "${gen[@]}" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv"]["budgets_agree_across_ranks"]; print(j["tokens"], j["kv"]["budgets"])')"
  rm -f "$prompt"
  if [ "$one" != "$six" ]; then
    echo "FAIL: TP 3 x PP 2 across the simulated nodes differs from one rank:" >&2
    echo "  one rank:   $one" >&2
    echo "  TP 3 x PP 2: $six" >&2
    exit 1
  fi
  echo "TP 3 x PP 2 across 2 simulated nodes: same tokens and budgets as one rank: ${six:0:120}..."
fi
echo "PASSED: ranks ran on 2 simulated nodes ($(echo "$inodes" | tr '\n' ' '))"
