# Settings and helpers shared by the netns simulation scripts; sourced, not run.
# Node i (1-based) is the network namespace "${ADAKV_SIM_PREFIX}i", which is also its host name
# for mpirun, with address ${ADAKV_SIM_NET}.(10+i)/24 on its eth0; eth0 is one end of a veth
# pair whose other end is on the bridge ${ADAKV_SIM_BRIDGE} (${ADAKV_SIM_NET}.1/24) in the
# root namespace. configs/cluster/netns-sim.yaml assumes the defaults.
# shellcheck shell=bash

ADAKV_SIM_PREFIX="${ADAKV_SIM_PREFIX:-adakv-sim-node}"
ADAKV_SIM_BRIDGE="${ADAKV_SIM_BRIDGE:-adakvsim0}"
ADAKV_SIM_NET="${ADAKV_SIM_NET:-10.77.0}"
ADAKV_SIM_HOSTS_TAG="# adakv-netns-sim"

sim_ns() { printf '%s%s\n' "$ADAKV_SIM_PREFIX" "$1"; }
sim_ip() { printf '%s.%s\n' "$ADAKV_SIM_NET" "$((10 + $1))"; }
sim_veth() { printf '%sp%s\n' "$ADAKV_SIM_BRIDGE" "$1"; }
sim_bridge_ip() { printf '%s.1\n' "$ADAKV_SIM_NET"; }
sim_subnet() { printf '%s.0/24\n' "$ADAKV_SIM_NET"; }

sim_log() { printf '[netns-sim] %s\n' "$*" >&2; }
sim_die() {
  sim_log "error: $*"
  exit 1
}

sim_require_root() {
  [ "$(id -u)" -eq 0 ] || sim_die "needs root (ip netns, bridges, /etc/hosts)"
  command -v ip >/dev/null || sim_die "the 'ip' command is missing (apt-get install iproute2)"
}

# The namespaces of the simulation that exist now, in node order.
sim_existing_nodes() {
  local f
  for f in /run/netns/"$ADAKV_SIM_PREFIX"*; do
    [ -e "$f" ] && basename "$f"
  done | sort -V
}

# Rewrites /etc/hosts without our line for $1 (in place: /etc/hosts is often a bind mount).
sim_hosts_remove() {
  local kept
  kept="$(grep -v -F " $1 $ADAKV_SIM_HOSTS_TAG" /etc/hosts || true)"
  printf '%s\n' "$kept" >/etc/hosts
}
