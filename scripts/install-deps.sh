#!/usr/bin/env bash
# Installs what building and testing hmr needs on Debian 12 (used by demo.sh and test.sh).
# As root it always runs apt-get (quick when everything is installed already).  As another user
# it installs nothing: it checks that the tools are there and says what is missing.
set -euo pipefail

# libfabric-dev: the ofi adapter and hmr-perftest; libibverbs-dev: verbs types for the verbs
# adapter (libibverbs itself is dlopen'ed); libhsa-runtime64-1 and libze1: the real ROCr and
# Level Zero runtimes, which the tests check fail closed on a machine without those GPUs;
# iproute2: hmr-perftest's two-namespace test; python3: the GPU lane's ctypes bindings, whose
# struct layouts a test compares with the C ones; python3-dev: the Python package (python/,
# built against 3.11's limited API); python3-pytest, python3-numpy, python3-torch: its tests
# and benchmark (run with /usr/bin/python3); python3-setuptools, python3-wheel, python3-pip:
# "pip install --no-build-isolation ./python", offline.
packages=(cmake ninja-build g++ gcc clang libclang-rt-14-dev libc6-dev libgtest-dev pkg-config
          libbenchmark-dev libucx-dev libfabric-dev libibverbs-dev libhsa-runtime64-1 libze1
          iproute2 python3 abigail-tools xz-utils binutils lintian dpkg-dev
          python3-dev python3-pytest python3-numpy python3-torch python3-setuptools python3-wheel
          python3-pip)

if [[ $(id -u) -eq 0 ]]; then
  echo "== installing build dependencies with apt-get: ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${packages[@]}"
  exit 0
fi

missing=()
for tool in cmake ninja g++ cc clang++ pkg-config python3; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[[ -f /usr/include/gtest/gtest.h ]] || missing+=("GoogleTest headers (/usr/include/gtest)")
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "error: not root, so nothing is installed, and these are missing: ${missing[*]}" >&2
  echo "       run as root, or: sudo apt-get install -y ${packages[*]}" >&2
  exit 1
fi
echo "== not root: skipping apt-get; cmake, ninja, g++, clang, pkg-config, python3 and GoogleTest are present"
