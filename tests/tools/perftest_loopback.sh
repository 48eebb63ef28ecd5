#!/usr/bin/env bash
# hmr-perftest as a newcomer runs it: a server and a client, two processes on this host, over
# libfabric's tcp and shm providers.  Every test must succeed (the client verifies the bytes:
# write_bw by checksum of the server's buffer, read_bw by pattern) and the write_bw run must
# print its RESULT line comparing hmr with raw libfabric registration.
# Usage: perftest_loopback.sh <path to hmr-perftest>
set -euo pipefail
perftest=$1
# Below the kernel's ephemeral range (32768 and up), where an outgoing connection of another
# test could hold the port, and apart from perftest_peer_failures.sh's (26200-32300).
port_base=$((20000 + $$ % 6000))

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
  grep -q "^RESULT metric=write_bw_1MiB provider=$provider .* ratio=[0-9.]* rounds=1 spread=none" <<<"$out" ||
    { echo "FAILED: no RESULT line for $provider" >&2; exit 1; }
  grep -q "^note: one round is a smoke run" <<<"$out" || { echo "FAILED: no smoke-run note" >&2; exit 1; }
  grep -q "provider $provider (libfabric" <<<"$out" || { echo "FAILED: the header names another provider" >&2; exit 1; }
  # --json is one document with the rows.
  n=$((n + 1))
  out=$(run $((port_base + n)) --provider "$provider" --size 4K --iters 10 --json)
  grep -q '"results": \[' <<<"$out" || { echo "FAILED: --json output" >&2; exit 1; }
done
# Mistakes a newcomer makes.  A server with a provider this host lacks fails at once, with the
# reason, instead of waiting for a client (the timeout would be 60 s).
status=0
start=$SECONDS
why=$("$perftest" --server --provider bogus --port $((port_base + 90)) --timeout 60 2>&1) || status=$?
[[ $status -ne 0 && $((SECONDS - start)) -lt 30 ]] ||
  { echo "FAILED: --server --provider bogus exited $status after $((SECONDS - start)) s" >&2; exit 1; }
grep -q "provider 'bogus'" <<<"$why" || { echo "FAILED: no reason for bogus: $why" >&2; exit 1; }
# Two sides with different providers: the client prints the server's reason, and the server,
# which allocated nothing for it (admission.h), serves the next client.
"$perftest" --server --provider tcp --port $((port_base + 91)) --quiet --timeout 60 2>/dev/null &
server=$!
status=0
why=$("$perftest" 127.0.0.1 --provider shm --port $((port_base + 91)) --timeout 60 --size 4K \
      --iters 10 2>&1) || status=$?
[[ $status -ne 0 ]] && grep -q "the peer stopped: server: the client uses provider 'shm'" <<<"$why" ||
  { echo "FAILED: the client does not show the server's reason: $why" >&2; exit 1; }
kill -0 "$server" 2>/dev/null ||
  { echo "FAILED: the server ended after refusing a client of another provider" >&2; exit 1; }
"$perftest" 127.0.0.1 --provider tcp --port $((port_base + 91)) --timeout 60 --quiet --size 4K \
  --iters 10 >/dev/null ||
  { echo "FAILED: the server did not serve a tcp client after refusing an shm one" >&2; exit 1; }
wait "$server" || { echo "FAILED: the server exited $? after serving its tcp client" >&2; exit 1; }
echo "ok: a bad provider fails at once; a mismatch is explained, and the server serves the next client"

# A client killed in the middle of a write_lat block: the server ends with a reason instead of
# spinning for ever on a ping that cannot come.  (On tcp the provider reports the dead peer
# too; a client that gives up mid-block, alive, is seen only by the socket check the server's
# wait now makes.)
port=$((port_base + 92))
"$perftest" --server --provider tcp --port $port --quiet --timeout 10 2>/dev/null &
server=$!
"$perftest" 127.0.0.1 --provider tcp --port $port --quiet --timeout 10 --test write_lat \
  --size 2 --iters 16000000 >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 400); do  # until the two are connected (the block follows at once)
  ss -Htn state established "( sport = :$port )" 2>/dev/null | grep -q . && break
  sleep 0.05
done
kill -9 "$client"
wait "$client" 2>/dev/null || true
for _ in $(seq 1 600); do kill -0 "$server" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$server" 2>/dev/null; then
  kill -9 "$server"
  echo "FAILED: the server still runs 30 s after its write_lat client was killed" >&2
  exit 1
fi
status=0
wait "$server" || status=$?
[[ $status -ne 0 ]] || { echo "FAILED: the server of a killed client exited 0" >&2; exit 1; }
echo "ok: a server whose client died mid-block ends (exit $status)"

# A server with device memory (the fake CUDA driver) against host clients: the server never
# sees --test, so it refuses write_lat (it polled device memory with the CPU) and read_bw
# (its pattern cannot be in device memory, and the client's check failed) itself, with the
# reason on both sides, before allocating for them; write_bw runs (the client compared a
# checksum the server cannot take).  One server: a refused client leaves it for the next.
if [[ -n "${HMR_PERFTEST_FAKE_CUDA:-}" ]]; then
  port=$((port + 1))
  HMR_CUDA_LIBRARY=$HMR_PERFTEST_FAKE_CUDA "$perftest" --server --provider tcp --port $port \
    --quiet --timeout 20 --mem cuda:0 >/dev/null 2>&1 &
  server=$!
  for test in write_lat read_bw write_bw; do
    status=0
    said=$("$perftest" 127.0.0.1 --provider tcp --port $port --timeout 20 --quiet --size 4K \
           --iters 10 --test $test 2>&1) || status=$?
    if [[ $test == write_bw ]]; then
      [[ $status -eq 0 ]] ||
        { echo "FAILED: write_bw to a cuda:0 server (client $status): $said" >&2; exit 1; }
    else
      [[ $status -ne 0 ]] && grep -q "the peer stopped: server: .*--mem host" <<<"$said" ||
        { echo "FAILED: a cuda:0 server did not refuse $test with its reason: $said" >&2; exit 1; }
      kill -0 "$server" 2>/dev/null ||
        { echo "FAILED: a cuda:0 server ended after refusing $test" >&2; exit 1; }
    fi
  done
  server_status=0
  wait "$server" || server_status=$?
  [[ $server_status -eq 0 ]] ||
    { echo "FAILED: the cuda:0 server exited $server_status after its write_bw client" >&2; exit 1; }
  echo "ok: a cuda:0 server refuses write_lat and a host client's read_bw, and takes write_bw"
fi

echo "hmr-perftest loopback: all runs passed"
