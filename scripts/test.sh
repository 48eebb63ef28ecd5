#!/usr/bin/env bash
# Builds hmr twice and runs every test in each build:
#   build/             normal build with GCC (RelWithDebInfo)
#   build-clang-asan/  AddressSanitizer + UndefinedBehaviorSanitizer with clang (RelWithDebInfo)
# Two compilers, so each one's warnings (errors here) are seen.
# On a fresh Debian 12 machine, as root:  bash scripts/test.sh
# HMR_JOBS sets build parallelism (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${HMR_JOBS:-2}
start=$SECONDS

bash scripts/install-deps.sh

# Sanitizer reports must fail the tests, with a stack to read.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_build() {
  local title=$1 dir=$2
  shift 2
  echo
  echo "================================================================================"
  echo "== $title: configuring $dir/"
  echo "================================================================================"
  local generator=()
  # Ninja for a new folder; an existing one keeps the generator it was made with.
  [[ -f "$dir/CMakeCache.txt" ]] || generator=(-G Ninja)
  cmake -S . -B "$dir" "${generator[@]}" "$@"
  echo "== $title: building $dir/ (-j$jobs)"
  cmake --build "$dir" -j "$jobs"
  echo "== $title: running the tests (ctest in $dir/)"
  (cd "$dir" && ctest --output-on-failure)
  echo "== $title: all tests passed"
}

# Options are given explicitly so a build folder configured by hand earlier cannot change them.
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DHMR_BUILD_TESTS=ON -DHMR_BUILD_EXAMPLES=ON)
run_build "normal build, GCC (RelWithDebInfo)" build "${common[@]}" -DHMR_SANITIZE= \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
run_build "ASan+UBSan build, clang (RelWithDebInfo)" build-clang-asan "${common[@]}" \
  -DHMR_SANITIZE=address,undefined -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++

echo
echo "== both builds passed every test ($((SECONDS - start)) s)"
