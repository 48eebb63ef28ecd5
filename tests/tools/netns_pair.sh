# Two "hosts" on this machine: network namespaces joined by a veth pair, for tests that must not
# take a same-host shortcut (hmr-perftest, the NCCL net plugin).  Source it, then call
#   netns_pair_up
# which sets NETNS_A NETNS_B (namespace names), NETNS_IF_A NETNS_IF_B (their veth ends),
# NETNS_ADDR_A NETNS_ADDR_B (10.233.0.1 and .2), removes everything on exit, and exits 77
# (ctest: skipped) saying why where namespaces cannot be made (not root, no iproute2, no
# CAP_NET_ADMIN).  Run a command in one with:  ip netns exec "$NETNS_A" <command>
netns_pair_skip() {
  echo "SKIPPED: $*"
  exit 77
}

netns_pair_down() {
  ip netns del "$NETNS_A" 2>/dev/null
  ip netns del "$NETNS_B" 2>/dev/null
}

netns_pair_up() {
  local tag=hmr$$
  NETNS_A=${tag}a NETNS_B=${tag}b
  NETNS_IF_A=${tag}x NETNS_IF_B=${tag}y
  NETNS_ADDR_A=10.233.0.1 NETNS_ADDR_B=10.233.0.2
  [[ $(id -u) -eq 0 ]] || netns_pair_skip "network namespaces need root"
  command -v ip >/dev/null || netns_pair_skip "iproute2 (ip) is not installed"
  ip netns add "$NETNS_A" 2>/dev/null || netns_pair_skip "cannot create a network namespace here"
  trap netns_pair_down EXIT
  ip netns add "$NETNS_B" || netns_pair_skip "cannot create a second network namespace"
  ip link add "$NETNS_IF_A" type veth peer name "$NETNS_IF_B" || netns_pair_skip "cannot create a veth pair"
  ip link set "$NETNS_IF_A" netns "$NETNS_A" && ip link set "$NETNS_IF_B" netns "$NETNS_B" || exit 1
  ip -n "$NETNS_A" addr add "$NETNS_ADDR_A/24" dev "$NETNS_IF_A" &&
    ip -n "$NETNS_B" addr add "$NETNS_ADDR_B/24" dev "$NETNS_IF_B" || exit 1
  local ns
  for ns in "$NETNS_A" "$NETNS_B"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$NETNS_A" link set "$NETNS_IF_A" up && ip -n "$NETNS_B" link set "$NETNS_IF_B" up || exit 1
}
