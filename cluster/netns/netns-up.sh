#!/usr/bin/env bash
# Starts (or completes) a simulated cluster of N nodes on this machine: one network namespace
# per node with lo up and a veth to a bridge in the root namespace, and an /etc/hosts entry per
# node. Idempotent: running it again repairs what is missing. Needs root.
#   cluster/netns/netns-up.sh [N]     N nodes (default 2): adakv-sim-node1..N
# Names and addresses: cluster/netns/sim-env.sh. Undo with cluster/netns/netns-down.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/sim-env.sh
. "$here/sim-env.sh"

nodes="${1:-2}"
case "$nodes" in
  '' | *[!0-9]*) sim_die "N must be a number of nodes, got '$nodes'" ;;
esac
if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 200 ]; then
  sim_die "N must be 1..200, got $nodes"
fi
sim_require_root

bridge="$ADAKV_SIM_BRIDGE"
if ! ip link show "$bridge" >/dev/null 2>&1; then
  ip link add "$bridge" type bridge
fi
ip addr replace "$(sim_bridge_ip)/24" dev "$bridge"
ip link set "$bridge" up

# Hosts whose firewall filters bridged traffic (Docker's FORWARD DROP) would cut the nodes off.
if command -v iptables >/dev/null; then
  iptables -C FORWARD -i "$bridge" -o "$bridge" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -i "$bridge" -o "$bridge" -j ACCEPT
fi

for i in $(seq 1 "$nodes"); do
  ns="$(sim_ns "$i")"
  veth="$(sim_veth "$i")"
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip -n "$ns" link del eth0 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$ns"
  fi
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" addr replace "$(sim_ip "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  sim_hosts_remove "$ns"
  printf '%s %s %s\n' "$(sim_ip "$i")" "$ns" "$ADAKV_SIM_HOSTS_TAG" >>/etc/hosts
  sim_log "node $i: namespace and host $ns, $(sim_ip "$i") on bridge $bridge"
done
