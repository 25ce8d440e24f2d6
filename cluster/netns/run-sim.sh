#!/usr/bin/env bash
# Runs COMMAND as an mpirun job across simulated nodes (network namespaces, see netns-up.sh),
# bringing the nodes up first when needed. Needs root.
#   cluster/netns/run-sim.sh [-n NODES] [-p RANKS_PER_NODE] [-t TIMEOUT_S] [--] COMMAND ARGS...
# Defaults: 2 nodes, 1 rank per node, 300 s. Exits with mpirun's exit code.
# What makes mpirun work across namespaces (also in configs/cluster/netns-sim.yaml):
#   plm_rsh_agent          netns-agent.sh starts each node's daemon inside its namespace
#   plm_rsh_no_tree_spawn  mpirun starts every daemon itself
#   oob/btl_tcp_if_include the bridge's subnet: daemons reach mpirun, ranks reach each other
#   btl self,vader,tcp     shared memory inside a node, TCP between nodes
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/sim-env.sh
. "$here/sim-env.sh"

usage() {
  echo "usage: $0 [-n NODES] [-p RANKS_PER_NODE] [-t TIMEOUT_S] [--] COMMAND ARGS..." >&2
  exit 2
}

nodes=2
per_node=1
timeout_s=300
while getopts "n:p:t:h" opt; do
  case "$opt" in
    n) nodes="$OPTARG" ;;
    p) per_node="$OPTARG" ;;
    t) timeout_s="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
for v in "$nodes" "$per_node" "$timeout_s"; do
  case "$v" in
    '' | *[!0-9]*) sim_die "-n, -p and -t take numbers, got '$v'" ;;
  esac
done
sim_require_root
"$here/netns-up.sh" "$nodes"

hostfile="$(mktemp "${TMPDIR:-/tmp}/adakv-sim-XXXXXX")"
trap 'rm -f "$hostfile"' EXIT
for i in $(seq 1 "$nodes"); do
  printf '%s slots=%s\n' "$(sim_ns "$i")" "$per_node" >>"$hostfile"
done

rc=0
mpirun --allow-run-as-root --hostfile "$hostfile" -np "$((nodes * per_node))" \
  --map-by slot --bind-to none --timeout "$timeout_s" \
  --mca plm_rsh_agent "$here/netns-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include "$(sim_subnet)" --mca btl_tcp_if_include "$(sim_subnet)" \
  --mca btl self,vader,tcp -x OMPI_MCA_btl_vader_single_copy_mechanism=none \
  "$@" || rc=$?
exit "$rc"
