#!/usr/bin/env bash
# hmr-perftest between two "hosts": two network namespaces joined by a veth pair, over
# libfabric's tcp provider, so nothing can take a same-host shortcut.  Exits 77 (ctest: skipped)
# where namespaces cannot be made (not root, no iproute2, no CAP_NET_ADMIN), saying why.
# Usage: perftest_netns.sh <path to hmr-perftest>
set -uo pipefail
perftest=$1
tag=hmr$$
a=${tag}a b=${tag}b

skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
ip netns add "$a" 2>/dev/null || skip "cannot create a network namespace here"
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$b" || skip "cannot create a second network namespace"
ip link add "${tag}x" type veth peer name "${tag}y" || skip "cannot create a veth pair"
ip link set "${tag}x" netns "$a" && ip link set "${tag}y" netns "$b" || exit 1
ip -n "$a" addr add 10.233.0.1/24 dev "${tag}x" && ip -n "$b" addr add 10.233.0.2/24 dev "${tag}y"
for ns in "$a" "$b"; do
  ip -n "$ns" link set lo up
done
ip -n "$a" link set "${tag}x" up && ip -n "$b" link set "${tag}y" up || exit 1

# The tcp provider must use the veth: it is the only way between the namespaces.
status=0
for test in write_bw read_bw write_lat; do
  ip netns exec "$a" env FI_TCP_IFACE="${tag}x" "$perftest" --server --port 18515 --quiet \
    --timeout 60 --provider tcp --test "$test" &
  server=$!
  out=$(ip netns exec "$b" env FI_TCP_IFACE="${tag}y" "$perftest" 10.233.0.1 --port 18515 \
          --timeout 60 --quiet --provider tcp --test "$test" --sizes 64:256K --iters 20 \
          --reg cached,raw) || status=1
  wait "$server" || status=1
  echo "$out"
  grep -q "^ 262144 " <<<"$out" || status=1
  [[ $status -eq 0 ]] || { echo "FAILED: $test across namespaces" >&2; exit 1; }
done
echo "hmr-perftest across two network namespaces: all runs passed"
