#!/usr/bin/env bash
# hmr-nccl-net-bench beside NCCL's own socket transport (ctest hmr_nccl_net_bench_vs_nccl_socket):
# a stream of 4 KiB messages (past Socket's inline size, so its bytes take its data path) and
# round trips, each of which must end in its "_vs_socket" RESULT line.  It proves that the
# reference the bench reports against loads and moves data here; no figure is judged.  Exits
# 77 (skipped) where the libnccl found cannot serve as the reference.
#   bench_vs_socket_test.sh <hmr-nccl-net-bench>
set -euo pipefail
bench=$1
for mode in stream latency; do
  args=(--provider tcp --size 4096 --messages 64 --rounds 1)
  metric=bw
  if [[ $mode == latency ]]; then args+=(--latency); metric=rtt; fi
  out=$("$bench" "${args[@]}")
  echo "$out"
  # The libnccl CMake found cannot serve (another version, stripped): a skip with its reason.
  if grep -q "^NCCL's socket transport is not compared" <<<"$out"; then exit 77; fi
  if ! grep -Eq "^RESULT metric=nccl_net_${metric}_4096B_vs_socket provider=tcp plugin(_us)?=[0-9.]+ socket(_us)?=[0-9.]+ ratio=[0-9.]+$" <<<"$out"; then
    echo "FAILED: no ${mode} RESULT line against NCCL's socket transport" >&2
    exit 1
  fi
done
