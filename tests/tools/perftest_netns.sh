#!/usr/bin/env bash
# hmr-perftest between two "hosts": two network namespaces joined by a veth pair, over
# libfabric's tcp provider, so nothing can take a same-host shortcut.  Exits 77 (ctest: skipped)
# where namespaces cannot be made (not root, no iproute2, no CAP_NET_ADMIN), saying why.
# Usage: perftest_netns.sh <path to hmr-perftest>
set -uo pipefail
perftest=$1
source "$(dirname "${BASH_SOURCE[0]}")/netns_pair.sh"
netns_pair_up
a=$NETNS_A b=$NETNS_B

# The tcp provider must use the veth: it is the only way between the namespaces.
status=0
for test in write_bw read_bw write_lat; do
  ip netns exec "$a" env FI_TCP_IFACE="$NETNS_IF_A" "$perftest" --server --port 18515 --quiet \
    --timeout 60 --provider tcp --test "$test" &
  server=$!
  out=$(ip netns exec "$b" env FI_TCP_IFACE="$NETNS_IF_B" "$perftest" "$NETNS_ADDR_A" --port 18515 \
          --timeout 60 --quiet --provider tcp --test "$test" --sizes 64:256K --iters 20 \
          --reg cached,raw) || status=1
  wait "$server" || status=1
  echo "$out"
  grep -q "^ 262144 " <<<"$out" || status=1
  [[ $status -eq 0 ]] || { echo "FAILED: $test across namespaces" >&2; exit 1; }
done
echo "hmr-perftest across two network namespaces: all runs passed"
