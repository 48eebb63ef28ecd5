#!/usr/bin/env bash
# The GPU lane in one command, from a fresh build directory:
#   tests/gpu/run_gpu_lane.sh [build-dir]      (default: <source>/build-gpu)
# Configures, builds only the lane's binary, and runs it through ctest with
# HMR_GPU_LANE_REQUIRE=1, so a machine whose driver or device is missing fails instead of
# skipping.  Set HMR_GPU_LANE_REQUIRE=0 to let it skip.
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${1:-"$source_dir/build-gpu"}
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi

if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$source_dir" -B "$build_dir" "${generator[@]}" -DHMR_BUILD_BENCH=OFF \
    -DHMR_BUILD_EXAMPLES=OFF
fi
cmake --build "$build_dir" --target hmr_gpu_tests --parallel
HMR_GPU_LANE_REQUIRE=${HMR_GPU_LANE_REQUIRE:-1} \
  ctest --test-dir "$build_dir" -R '^hmr_gpu_tests$' --output-on-failure -V
