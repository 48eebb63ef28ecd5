#!/usr/bin/env bash
# hmr-perftest as a newcomer runs it: a server and a client, two processes on this host, over
# libfabric's tcp and shm providers.  Every test must succeed (the client verifies the bytes:
# write_bw by checksum of the server's buffer, read_bw by pattern) and the write_bw run must
# print its RESULT line comparing hmr with raw libfabric registration.
# Usage: perftest_loopback.sh <path to hmr-perftest>
set -euo pipefail
perftest=$1
port_base=$((20000 + $$ % 20000))

run() {
  local port=$1
  shift
  "$perftest" --server --port "$port" --quiet --timeout 60 "$@" &
  local server=$!
  local output status=0
  output=$("$perftest" 127.0.0.1 --port "$port" --timeout 60 --quiet "$@") || status=$?
  wait "$server" || status=$?
  echo "$output"
  if [[ $status -ne 0 ]]; then
    echo "FAILED: hmr-perftest $* (exit $status)" >&2
    exit 1
  fi
}

n=0
for provider in tcp shm; do
  for test in write_bw read_bw write_lat; do
    n=$((n + 1))
    out=$(run $((port_base + n)) --provider "$provider" --test "$test" --sizes 8:64K --iters 20 \
          --reg once,cached,per-iter,raw)
    echo "$out"
    grep -q "^ 65536 " <<<"$out" || { echo "FAILED: no 64 KiB row for $provider $test" >&2; exit 1; }
  done
  n=$((n + 1))
  out=$(run $((port_base + n)) --provider "$provider" --size 1M --iters 50 --reg once,raw,cached)
  echo "$out"
  grep -q "^RESULT metric=write_bw_1MiB provider=$provider " <<<"$out" ||
    { echo "FAILED: no RESULT line for $provider" >&2; exit 1; }
  # --json is one document with the rows.
  n=$((n + 1))
  out=$(run $((port_base + n)) --provider "$provider" --size 4K --iters 10 --json)
  grep -q '"results": \[' <<<"$out" || { echo "FAILED: --json output" >&2; exit 1; }
done
echo "hmr-perftest loopback: all runs passed"
