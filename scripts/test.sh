#!/usr/bin/env bash
# Builds hmr three times and runs the tests in each build:
#   build/             normal build with GCC (RelWithDebInfo), every test
#   build-clang-asan/  AddressSanitizer + UndefinedBehaviorSanitizer with clang, every test
#   build-clang-tsan/  ThreadSanitizer with clang: the binaries holding the cache, monitor,
#                      concurrency and C ABI tests (the code with threads in it), nothing else
# Two compilers, so each one's warnings (errors here) are seen.
# On a fresh Debian 12 machine, as root:  bash scripts/test.sh
# HMR_JOBS sets build and test parallelism (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${HMR_JOBS:-2}
start=$SECONDS

bash scripts/install-deps.sh

# Sanitizer reports must fail the tests, with a stack to read.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A data race fails the test (exit code 66) and names both stacks.  The suppressions file
# lists each race that is not hmr's, with the reason.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}

# failure_recap TITLE DIR: after ctest failed, the failing cases again, last, where the tail
# of a long log (all a CI summary may keep) still shows them: GoogleTest's FAILED lines and
# sanitizer and crash headlines from ctest's log of the run, with the test binary each was in.
failure_recap() {
  local title=$1 log=$2/Testing/Temporary/LastTest.log
  echo
  echo "== $title: FAILED. What failed, from $log:"
  [[ -f $log ]] || return 0
  awk '/^[0-9]+\/[0-9]+ Testing: / { test = $0 }
       /\[  FAILED  \]|ERROR: [A-Za-z]+Sanitizer|runtime error:|WARNING: ThreadSanitizer|Segmentation fault|Subprocess aborted|\*\*\*Timeout/ {
         if (test != shown) { print "-- " test; shown = test }
         print "   " $0 }' "$log" | head -60
}

# run_build TITLE DIR [cmake options...] [-- target...]: configures, builds the targets (all
# when none are named) and runs the ctest entries of the same names (all when none).
run_build() {
  local title=$1 dir=$2 stage_start=$SECONDS
  shift 2
  local options=() targets=()
  while (($#)) && [[ $1 != -- ]]; do options+=("$1"); shift; done
  (($#)) && shift && targets=("$@")
  echo
  echo "================================================================================"
  echo "== $title: configuring $dir/"
  echo "================================================================================"
  local generator=()
  # Ninja for a new folder; an existing one keeps the generator it was made with.
  [[ -f "$dir/CMakeCache.txt" ]] || generator=(-G Ninja)
  cmake -S . -B "$dir" "${generator[@]}" "${options[@]}"
  echo "== $title: building $dir/ (-j$jobs) ${targets[*]:-(everything)}"
  local target_args=() filter=()
  if ((${#targets[@]})); then
    target_args=(--target "${targets[@]}")
    filter=(-R "^($(IFS='|'; echo "${targets[*]}"))\$")
  fi
  cmake --build "$dir" -j "$jobs" "${target_args[@]}"
  echo "== $title: built in $((SECONDS - stage_start)) s; running the tests (ctest in $dir/)"
  local test_start=$SECONDS
  # Tests run $jobs at a time, as a developer's `ctest -j2` does (every test is sound beside
  # another: ports, descriptors and timings were audited for it); serially the three lanes'
  # tests took ~12 minutes of a CI run that must stay under 30.
  if ! (cd "$dir" && ctest --output-on-failure -j "$jobs" "${filter[@]}"); then
    failure_recap "$title" "$dir"
    exit 8
  fi
  echo "== $title: all tests passed (tests $((SECONDS - test_start)) s, stage $((SECONDS - stage_start)) s)"
}

# Options are given explicitly so a build folder configured by hand earlier cannot change them.
# Warnings are errors here (HMR_WERROR, off by default for users' own builds).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DHMR_BUILD_TESTS=ON -DHMR_BUILD_EXAMPLES=ON -DHMR_WERROR=ON)
run_build "normal build, GCC (RelWithDebInfo)" build "${common[@]}" -DHMR_SANITIZE= \
  -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++
run_build "ASan+UBSan build, clang (RelWithDebInfo)" build-clang-asan "${common[@]}" \
  -DHMR_SANITIZE=address,undefined -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++

# hmr_unit_tests: cache, block index, credit pool, thread pool, userfaultfd and memhooks
# monitors; hmr_api_tests: the C ABI with its threading, cache coherence (concurrent remaps
# under each monitor) and asynchronous registration tests; hmr_verbs_tests: the verbs NIC
# under pressure with threads; hmr_hmem_api_tests: device memory on the fake drivers, the
# device hit path with threads beside frees; hmr_vendor_tests: the ROCr, Level Zero, Neuron and
# SynapseAI ifaces with runtime calls failing on several threads at once, and the answers they
# ask for again and then keep without a lock (util/retried_answer.h); hmr_nccl_net_comm_tests:
# the NCCL plugin's comms sharing one endpoint, driven from several threads.  memhooks refuses to start under
# TSan (its runtime calls libc's munmap from inside its interceptors, and rewriting that code
# under it crashes it), so here the memhooks tests skip and the default monitor is userfaultfd;
# the other two builds run them.
run_build "ThreadSanitizer build, clang (RelWithDebInfo)" build-clang-tsan \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHMR_BUILD_TESTS=ON -DHMR_BUILD_EXAMPLES=OFF \
  -DHMR_BUILD_BENCH=OFF -DHMR_WERROR=ON -DHMR_SANITIZE=thread -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -- hmr_unit_tests hmr_api_tests hmr_verbs_tests hmr_hmem_api_tests \
  hmr_vendor_tests hmr_nccl_net_comm_tests

# The packages: a Release build of what they hold (warnings are not errors there, as in a
# user's own build), for /usr, packaged with CPack, checked with lintian, unpacked and used.
echo
echo "== Release build with default options and the Debian packages: build-release/"
release_start=$SECONDS
bash tests/install/run_package_test.sh build-release
echo "== Release build and packages: $((SECONDS - release_start)) s"

echo
echo "== all three builds passed their tests, and the packages work ($((SECONDS - start)) s)"
