#!/usr/bin/env bash
# Writes the ABI baseline of libhmr (abi/libhmr.so.<soname>.abi.xz) from a build's library, with
# libabigail's abidw (Debian's abigail-tools).  Run it on purpose, in the commit that changes
# the ABI, after reading what tests/abi/check_abi.sh reported (docs/api.md, "ABI").
#
#   usage: scripts/abi-baseline.sh [build_dir]     (default: build, a GCC RelWithDebInfo build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir=${1:-build}
library=$(readlink -f "$build_dir/libhmr.so")
soname=$(objdump -p "$library" | awk '$1 == "SONAME" {print $2}')
mkdir -p abi
rm -f abi/*.abi.xz
abidw --no-corpus-path --no-show-locs --type-id-style hash \
  "$library" | xz -9 >"abi/$soname.abi.xz"
echo "wrote abi/$soname.abi.xz from $library"
