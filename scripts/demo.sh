#!/usr/bin/env bash
# Builds hmr (RelWithDebInfo, into build/) and runs the demo, hmr-demo.
# On a fresh Debian 12 machine, as root:  bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${HMR_JOBS:-2}

bash scripts/install-deps.sh

echo "== configuring build/ (RelWithDebInfo)"
generator=()
[[ -f build/CMakeCache.txt ]] || generator=(-G Ninja)  # an existing build/ keeps its generator
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== building hmr-demo (-j$jobs)"
cmake --build build -j "$jobs" --target hmr-demo
echo "== running build/examples/hmr-demo"
echo
exec ./build/examples/hmr-demo
