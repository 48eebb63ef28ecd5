#!/usr/bin/env bash
# The NCCL net plugin between two "hosts": the harness's rank 0 in one network namespace and
# its peer ranks in another, joined by a veth pair, over libfabric's tcp provider (each side
# told to use its veth end), so every byte crosses a real network interface.  Skipped (exit 77)
# where namespaces cannot be made (tests/tools/netns_pair.sh says why).
# Usage: netns_test.sh <path to hmr_nccl_net_harness>
set -uo pipefail
harness=$1
source "$(dirname "${BASH_SOURCE[0]}")/../tools/netns_pair.sh"
netns_pair_up

# ABI v11 and v8 (the newest table and the oldest, with int sizes) move every size; a damaged
# handle is refused there as here.
ip netns exec "$NETNS_A" env HMR_NCCL_PROVIDER=tcp FI_TCP_IFACE="$NETNS_IF_A" \
  HMR_NCCL_HARNESS_PEER_WRAPPER="ip netns exec $NETNS_B env FI_TCP_IFACE=$NETNS_IF_B" \
  "$harness" --gtest_brief=1 \
  --gtest_filter='*TwoProcessesMoveEveryByte/v11:*TwoProcessesMoveEveryByte/v8:PluginTables.*'
status=$?
[[ $status -eq 0 ]] && echo "NCCL net plugin across two network namespaces: passed"
exit $status
