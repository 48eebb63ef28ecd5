#!/usr/bin/env bash
# Installs a built hmr tree into a temporary prefix and builds two tiny consumers against it,
# as users do: one with CMake's find_package(hmr) and one with pkg-config.  Both must build and
# run.  Run by ctest as hmr_install_consumer.
#
#   usage: run_install_test.sh <source_dir> <build_dir>
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <source_dir> <build_dir>" >&2
  exit 2
fi
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
consumer_dir="$source_dir/tests/install/cmake_consumer"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hmr-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

step() { printf '\n== %s\n' "$*"; }
die() {
  printf 'run_install_test: FAILED: %s\n' "$*" >&2
  exit 1
}

# A sanitizer build installs an instrumented libhmr.so; its consumers must be instrumented the
# same way, or the sanitizer runtime refuses to start.
sanitize=$(sed -n 's/^HMR_SANITIZE:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
consumer_flags=""
if [[ -n "$sanitize" ]]; then
  consumer_flags="-fsanitize=$sanitize -fno-omit-frame-pointer"
fi

step "install $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; die "cmake --install failed"; }
[[ -f "$prefix/include/hmr/hmr.h" ]] || die "hmr/hmr.h was not installed under $prefix/include"
[[ -f "$prefix/include/hmr/hmr.hpp" ]] || die "hmr/hmr.hpp was not installed under $prefix/include"

pc_file=$(find "$prefix" -name hmr.pc -path '*/pkgconfig/*' | head -n 1)
[[ -n "$pc_file" ]] || die "hmr.pc was not installed"
config_file=$(find "$prefix" -name hmrConfig.cmake | head -n 1)
[[ -n "$config_file" ]] || die "hmrConfig.cmake was not installed"
libdir=$(dirname "$(dirname "$pc_file")")
[[ -e "$libdir/libhmr.so" ]] || die "libhmr.so is not beside hmr.pc in $libdir"

step "CMake consumer: find_package(hmr REQUIRED), links hmr::hmr"
generator_args=()
if [[ -n "${CMAKE_GENERATOR:-}" ]]; then generator_args=(-G "$CMAKE_GENERATOR"); fi
cmake -S "$consumer_dir" -B "$tmp/cmake-build" "${generator_args[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$consumer_flags" -DCMAKE_EXE_LINKER_FLAGS="$consumer_flags" \
  >"$tmp/cmake-configure.log" 2>&1 ||
  { cat "$tmp/cmake-configure.log"; die "configuring the CMake consumer failed"; }
cmake --build "$tmp/cmake-build" >"$tmp/cmake-build.log" 2>&1 ||
  { cat "$tmp/cmake-build.log"; die "building the CMake consumer failed"; }
"$tmp/cmake-build/hmr_cmake_consumer" || die "the CMake consumer failed"

step "pkg-config consumer: cc main.c \$(pkg-config --cflags --libs hmr)"
PKG_CONFIG_PATH=$(dirname "$pc_file")
export PKG_CONFIG_PATH
pc_cflags=$(pkg-config --cflags hmr) || die "pkg-config --cflags hmr failed"
pc_libs=$(pkg-config --libs hmr) || die "pkg-config --libs hmr failed"
echo "cflags: $pc_cflags"
echo "libs:   $pc_libs"
# The flags must name the prefix hmr was installed to (cmake --install --prefix), not the
# prefix it was configured with: otherwise a relocated install silently uses another hmr.
pc_prefix=$(pkg-config --variable=prefix hmr)
if [[ "$(cd "$pc_prefix" 2>/dev/null && pwd -P)" != "$(cd "$prefix" && pwd -P)" ]]; then
  die "hmr.pc says prefix=$pc_prefix, but it was installed to $prefix: hmr.pc is not" \
    "relocatable (derive prefix from \${pcfiledir} in cmake/hmr.pc.in)"
fi
# shellcheck disable=SC2086  # the flags are word lists
cc -std=c11 -Wall -Wextra -Werror $consumer_flags $pc_cflags "$consumer_dir/main.c" \
  -o "$tmp/pkgconfig_consumer" $pc_libs || die "building the pkg-config consumer failed"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/pkgconfig_consumer" ||
  die "the pkg-config consumer failed"

step "both consumers built and ran against the installed hmr"
