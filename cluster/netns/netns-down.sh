#!/usr/bin/env bash
# Removes the simulated cluster made by netns-up.sh: every namespace named ${ADAKV_SIM_PREFIX}*
# (their veths go with them), the bridge, the /etc/hosts entries and the firewall rule.
# Idempotent; needs root.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/sim-env.sh
. "$here/sim-env.sh"

sim_require_root
while read -r ns; do
  [ -n "$ns" ] || continue
  ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$ns"
  sim_hosts_remove "$ns"
  sim_log "removed $ns"
done < <(sim_existing_nodes)
if ip link show "$ADAKV_SIM_BRIDGE" >/dev/null 2>&1; then
  ip link del "$ADAKV_SIM_BRIDGE"
  sim_log "removed bridge $ADAKV_SIM_BRIDGE"
fi
if command -v iptables >/dev/null; then
  iptables -D FORWARD -i "$ADAKV_SIM_BRIDGE" -o "$ADAKV_SIM_BRIDGE" -j ACCEPT 2>/dev/null || true
fi
