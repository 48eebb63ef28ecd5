#!/usr/bin/env bash
# Builds hmr (RelWithDebInfo, into build/) and runs the main demo: hmr-info (its first screen:
# what works on this machine), hmr-demo (a tour of the API on the software NIC) and a short
# hmr-perftest between two processes over libfabric's tcp provider (a smoke run).
# On a fresh Debian 12 machine, as root:  bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${HMR_JOBS:-2}

bash scripts/install-deps.sh

echo "== configuring build/ (RelWithDebInfo)"
generator=()
[[ -f build/CMakeCache.txt ]] || generator=(-G Ninja)  # an existing build/ keeps its generator
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== building hmr-demo, hmr-info and hmr-perftest (-j$jobs)"
cmake --build build -j "$jobs" --target hmr-demo hmr-info hmr-perftest

echo
echo "== 1/3: build/tools/hmr-info (what works here; --full for the whole report)"
echo
./build/tools/hmr-info

echo
echo "== 2/3: build/examples/hmr-demo"
echo
./build/examples/hmr-demo

echo
echo "== 3/3: hmr-perftest, server and client on this host over libfabric tcp: a smoke run"
echo "   (server: hmr-perftest --server --provider tcp; client: hmr-perftest 127.0.0.1 ...)"
echo "   200 messages per size, one round: it shows the tool working and what the cache saves"
echo "   per message; its hmr/raw ratio is within one run's noise (docs/performance.md measures)"
echo
port=$((20000 + $$ % 20000))
./build/tools/hmr-perftest --server --provider tcp --port "$port" --quiet &
server=$!
./build/tools/hmr-perftest 127.0.0.1 --provider tcp --port "$port" --sizes 4K:1M --iters 200 \
  --reg per-iter,cached,once,raw
wait "$server"
