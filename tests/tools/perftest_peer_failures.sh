#!/usr/bin/env bash
# hmr-perftest when the other side stalls or dies in the middle of the data phase, over tcp and
# shm: each side must give up with its reason and exit 1, once --timeout passes without
# progress (a stalled peer: SIGSTOP, a scripted client that goes silent, a fabric address
# nobody answers at) or at once when the peer's socket closes (a killed peer).  Before the
# fix, each of these ran for ever.
#
# Every hmr-perftest here runs under `timeout` only as a net against hanging the test: the
# test fails when the net is what ended a run (status 124).
# Usage: perftest_peer_failures.sh <path to hmr-perftest>
set -euo pipefail
perftest=$1
source "$(dirname "$0")/scripted_peer_setup.sh"  # python, peer, work, fail
# Below the kernel's ephemeral range (32768 and up), where an outgoing connection of another
# test could hold the port, and apart from perftest_loopback.sh's (20000-26100).
port=$((26200 + $$ % 6000))
net=${HMR_PERFTEST_SAFETY_NET:-90}  # seconds
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    for child in $(pgrep -P "$pid"); do
      kill -CONT "$child"; kill -9 "$child"; rm -f "/dev/shm/$child:"*
    done 2>/dev/null
    kill "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# A new case: its name, its own port, and no files left from the one before (a line of the
# last client's must not pass for this one's).
begin() {
  case=$1
  port=$((port + 1))
  rm -f "$work"/*
}

# Until the client has printed a progress line (it prints one after a block, once a second):
# then it is in its data phase.  Not a timing assumption: it waits for the line itself.
await_data_phase() {
  local file=$1 pid=$2
  until grep -q "^hmr-perftest: .* done$" "$file" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "the client ended before its data phase"
    sleep 0.05
  done
}

# Waits for `pid`; sets `status` to its exit status and `took` to the seconds since `since`.
finish() {
  local pid=$1 since=$2
  status=0
  wait "$pid" || status=$?
  took=$((SECONDS - since))
  [[ $status -ne 124 ]] || fail "$case: only the test's safety net ended it"
}

# What shm leaves in /dev/shm for a process killed with SIGKILL (it removes its files on any
# other end): its region, named after its pid.
forget() { rm -f "/dev/shm/$1:"*; }

# The hmr-perftest that `timeout` (pid $1) runs: the one to stop or kill.
program() { pgrep -P "$1" | head -n 1; }

expect_gave_up() {  # side file pattern
  [[ $status -eq 1 ]] || fail "$case: the $1 exited $status, not 1"
  grep -q "hmr-perftest $1: $3" "$2" || fail "$case: the $1 did not say '$3'"
}

# What a side says of a stalled peer: no progress within its --timeout (2 s here), or, on shm,
# that it was inside fi_cq_read, spinning on a lock the stopped peer holds, for that long
# (its watchdog ends it then: stuck_call_watchdog.h).
stalled=".*\(no progress\|a libfabric call has not returned\) for 2 s (--timeout)"

for provider in tcp shm; do
  # The server stalls mid write_bw: the client's operations complete no more.
  begin "$provider: server stopped mid write_bw"
  timeout $net "$perftest" --server --provider $provider --port $port --timeout 60 --quiet \
    2>"$work/server.err" &
  server=$!
  pids+=("$server")
  timeout $net "$perftest" 127.0.0.1 --provider $provider --port $port --timeout 2 \
    --sizes 2:8M --iters 5000 >/dev/null 2>"$work/client.err" &
  client=$!
  await_data_phase "$work/client.err" $client
  kill -STOP $(program $server)
  finish $client $SECONDS
  expect_gave_up client "$work/client.err" "$stalled"
  kill -CONT $(program $server); kill $server; wait $server 2>/dev/null || true
  echo "ok: $case (client exit 1 after ${took} s)"

  # The server dies mid write_bw: the client ends at once, not at its --timeout.
  begin "$provider: server killed mid write_bw"
  timeout $net "$perftest" --server --provider $provider --port $port --timeout 60 --quiet \
    2>"$work/server.err" &
  server=$!
  pids+=("$server")
  timeout $net "$perftest" 127.0.0.1 --provider $provider --port $port --timeout 60 \
    --sizes 2:8M --iters 5000 >/dev/null 2>"$work/client.err" &
  client=$!
  await_data_phase "$work/client.err" $client
  killed=$(program $server)
  kill -9 $killed
  finish $client $SECONDS
  wait $server 2>/dev/null || true
  forget $killed
  expect_gave_up client "$work/client.err" ""
  [[ $took -lt 30 ]] || fail "$case: the client waited ${took} s, as for its --timeout"
  echo "ok: $case (client exit 1 after ${took} s)"

  # The client stalls mid write_bw: the server hears no progress from it.
  begin "$provider: client stopped mid write_bw"
  timeout $net "$perftest" --server --provider $provider --port $port --timeout 2 --quiet \
    2>"$work/server.err" &
  server=$!
  timeout $net "$perftest" 127.0.0.1 --provider $provider --port $port --timeout 60 \
    --sizes 2:8M --iters 5000 >/dev/null 2>"$work/client.err" &
  client=$!
  pids+=("$client")
  await_data_phase "$work/client.err" $client
  kill -STOP $(program $client)
  finish $server $SECONDS
  expect_gave_up server "$work/server.err" "$stalled"
  kill -CONT $(program $client)
  finish $client $SECONDS  # it finds the server gone (its reason, or a fabric error first)
  expect_gave_up client "$work/client.err" ""
  echo "ok: $case (server exit 1)"

  # The client dies mid write_lat: the server ends at once, not at its --timeout.
  begin "$provider: client killed mid write_lat"
  timeout $net "$perftest" --server --provider $provider --port $port --timeout 60 --quiet \
    2>"$work/server.err" &
  server=$!
  timeout $net "$perftest" 127.0.0.1 --provider $provider --port $port --timeout 60 \
    --test write_lat --sizes 2:8M --iters 20000 >/dev/null 2>"$work/client.err" &
  client=$!
  pids+=("$client")
  await_data_phase "$work/client.err" $client
  killed=$(program $client)
  kill -9 $killed
  finish $server $SECONDS
  wait $client 2>/dev/null || true
  forget $killed
  expect_gave_up server "$work/server.err" ""
  [[ $took -lt 30 ]] || fail "$case: the server waited ${took} s, as for its --timeout"
  echo "ok: $case (server exit 1 after ${took} s)"

  # A client that sends a valid Hello and Buffer, then nothing.
  for test in write_bw read_bw write_lat; do
    begin "$provider: silent $test client"
    timeout $net "$perftest" --server --provider $provider --port $port --timeout 2 --quiet \
      2>"$work/server.err" &
    server=$!
    timeout $net "${peer[@]}" silent-client $port $test $provider >"$work/peer.out" 2>&1 &
    client=$!
    finish $server $SECONDS
    expect_gave_up server "$work/server.err" ""
    grep -q "no progress\|timed out" "$work/server.err" || fail "$case: no reason about time"
    finish $client $SECONDS
    grep -q "^peer said: server: " "$work/peer.out" || fail "$case: the peer was not told why"
    echo "ok: $case (server exit 1)"
  done

  # A server whose fabric address nobody answers at: the client's operations are never
  # accepted or never complete.
  begin "$provider: unreachable fabric address"
  timeout $net "${peer[@]}" unreachable-server $port $provider >"$work/peer.out" 2>&1 &
  server=$!
  timeout $net "$perftest" 127.0.0.1 --provider $provider --port $port --timeout 2 --size 4K \
    --iters 10 >/dev/null 2>"$work/client.err" &
  client=$!
  finish $client $SECONDS
  expect_gave_up client "$work/client.err" ""
  finish $server $SECONDS
  grep -q "^peer said: client: " "$work/peer.out" || fail "$case: the peer was not told why"
  echo "ok: $case (client exit 1: $(head -c 160 "$work/client.err"))"
done
echo "hmr-perftest peer failures: every run ended with its reason"
