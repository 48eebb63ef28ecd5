#!/usr/bin/env bash
# hmr-perftest's server against clients that ask for more than it takes (--max-size, 1G by
# default): each is refused with the reason before the server allocates anything for it, the
# client prints that reason, and the server stays up and serves the next client.  Before the
# fix the server allocated and registered whatever a client asked for, up to the protocol's
# 4 GiB, and it ended after refusing any client.
#
# The server runs with its address space bounded (ulimit -v, HMR_PERFTEST_ADMISSION_VM_KIB)
# below the 4 GiB a peer asks for: a server that tried to allocate it fails ("mmap of
# 4294967296 bytes") instead of taking 4 GiB of this host, and the test fails on that reason.
# Usage: perftest_admission.sh <path to hmr-perftest>
set -euo pipefail
perftest=$1
source "$(dirname "$0")/scripted_peer_setup.sh"  # python, peer, work, fail
# Below perftest_loopback.sh's ports (20000-26100) and perftest_peer_failures.sh's (26200-32300).
port=$((19000 + $$ % 900))
net=60  # seconds: only a net against hanging the test
vm_kib=${HMR_PERFTEST_ADMISSION_VM_KIB:-3145728}  # 3 GiB
server=
cleanup() {
  [[ -z $server ]] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# A client's own --size over its --max-size is an option error (exit 2), before it connects.
status=0
said=$("$perftest" 127.0.0.1 --port "$port" --size 2G 2>&1) || status=$?
[[ $status -eq 2 ]] && grep -q "messages up to 2G are over --max-size 1G" <<<"$said" ||
  fail "a client's --size 2G over the default --max-size: exit $status: $said"
echo "ok: a client refuses its own --size over --max-size (exit 2)"

# A sanitizer's runtime reserves terabytes of shadow address space at start and cannot run
# under ulimit -v: there the bound is left off, and the refusals' reasons (and the server's
# silence about allocating) are what the test checks.
if grep -qaE "__(asan|tsan|msan)_init" "$perftest"; then
  echo "note: $perftest is built with a sanitizer: its address space is not bounded"
  vm_kib=unlimited
fi
(ulimit -v "$vm_kib"; exec "$perftest" --server --provider tcp --port "$port" --timeout 20) \
  2>"$work/server.err" &
server=$!

# A scripted peer asks for messages up to `size` bytes: the server refuses with `reason` and
# is still there.
expect_refused() {  # size reason
  timeout $net "${peer[@]}" asking-client "$port" tcp "$1" >"$work/peer.out" 2>&1 ||
    fail "the peer asking for $1 bytes failed"
  grep -q "^peer said: server: $2" "$work/peer.out" ||
    fail "a request for $1 bytes was not refused with '$2'"
  grep -q "^peer sent" "$work/peer.out" && fail "the server answered a refused request"
  kill -0 "$server" 2>/dev/null || fail "the server ended after refusing a request for $1 bytes"
  echo "ok: a request for $1 bytes is refused: $(grep '^peer said' "$work/peer.out")"
}
# Within the protocol's 4 GiB, over the server's --max-size (the old server allocated it).
expect_refused $((1 << 32)) "the client asks for messages up to 4G, over this server's --max-size 1G"
expect_refused $(((1 << 30) + 1)) "the client asks for messages up to 1073741825 bytes, over"
# Past the protocol's bound (1 TiB, and the largest u64): the hello itself is refused.
expect_refused $((1 << 40)) "the client's hello: max_size is over the 4 GiB limit"
expect_refused 18446744073709551615 "the client's hello: max_size is over the 4 GiB limit"

# hmr-perftest's own client, with --max-size 2G on its side: it prints the server's reason.
status=0
said=$(timeout $net "$perftest" 127.0.0.1 --provider tcp --port "$port" --timeout 20 --size 2G \
       --max-size 2G --iters 10 2>&1) || status=$?
[[ $status -eq 1 ]] && grep -q "hmr-perftest client: the peer stopped: server: the client asks for messages up to 2G, over this server's --max-size 1G" <<<"$said" ||
  fail "a client asking for 2G: exit $status: $said"
kill -0 "$server" 2>/dev/null || fail "the server ended after refusing hmr-perftest's client"
echo "ok: hmr-perftest's client prints the refusal: $said"

# The next client, within the limit, is served, and the server ends as after any run.
status=0
timeout $net "$perftest" 127.0.0.1 --provider tcp --port "$port" --timeout 20 --quiet --size 4K \
  --iters 10 >"$work/client.out" 2>"$work/client.err" || status=$?
[[ $status -eq 0 ]] || fail "the client after the refused ones exited $status"
grep -q "^ 4096 " "$work/client.out" || fail "no 4 KiB row"
status=0
wait "$server" || status=$?
server=
[[ $status -eq 0 ]] || fail "the server exited $status after serving its client"
[[ $(grep -c "refused a client: .*; waiting for the next one" "$work/server.err") -eq 5 ]] ||
  fail "the server did not say it refused five clients"
grep -q "mmap\|allocate" "$work/server.err" && fail "the server tried to allocate for a refused client"
echo "ok: after five refusals the server served the next client and exited 0"
echo "hmr-perftest admission: every request over --max-size was refused, and the server stayed up"
