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
  -DHMR_CONSUMER_SANITIZED="$([[ -n "$sanitize" ]] && echo ON || echo OFF)" \
  >"$tmp/cmake-configure.log" 2>&1 ||
  { cat "$tmp/cmake-configure.log"; die "configuring the CMake consumer failed"; }
cmake --build "$tmp/cmake-build" >"$tmp/cmake-build.log" 2>&1 ||
  { cat "$tmp/cmake-build.log"; die "building the CMake consumer failed"; }
"$tmp/cmake-build/hmr_cmake_consumer" || die "the CMake consumer failed"
if [[ -z "$sanitize" ]]; then
  "$tmp/cmake-build/hmr_cmake_consumer_static" || die "the C-only consumer of hmr::hmr_static failed"
fi

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

step "the exported C ABI carries its version node (HMR_0.1)"
exports=$(objdump -T "$libdir/libhmr.so" | awk '$NF ~ /^hmr_/' | wc -l)
versioned=$(objdump -T "$libdir/libhmr.so" | awk '$NF ~ /^hmr_/ && $(NF-1) == "HMR_0.1"' | wc -l)
echo "$exports hmr_* symbols exported, $versioned in HMR_0.1"
[[ $exports -gt 50 && $exports -eq $versioned ]] || die "not every exported hmr_* symbol is HMR_0.1"

# Installed programs run from any prefix with a clean environment (no LD_LIBRARY_PATH): they
# find the libhmr.so installed with them (RUNPATH $ORIGIN/../lib, the plugin's $ORIGIN).
step "installed programs run from $prefix with a clean environment"
clean_env=(env -i PATH=/usr/bin:/bin)
[[ -n "$sanitize" ]] && clean_env+=(ASAN_OPTIONS=detect_leaks=0)
for tool in hmr-info hmr-perftest; do
  [[ -x "$prefix/bin/$tool" ]] || die "$tool was not installed in $prefix/bin"
  "${clean_env[@]}" "$prefix/bin/$tool" --help >"$tmp/$tool.log" 2>&1 ||
    { cat "$tmp/$tool.log"; die "the installed $tool does not start"; }
  echo "$tool: ok"
done
plugin="$libdir/libnccl-net-hmr.so"
if [[ -e "$plugin" ]]; then
  # As NCCL loads it: dlopen by path, then its newest table by name.
  cat >"$tmp/load_plugin.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  return dlsym(plugin, "ncclNetPlugin_v11") ? 0 : 2;
}
C
  # shellcheck disable=SC2086
  cc $consumer_flags "$tmp/load_plugin.c" -o "$tmp/load_plugin" -ldl || die "building the loader failed"
  "${clean_env[@]}" "$tmp/load_plugin" "$plugin" || die "the installed NCCL plugin does not load"
  echo "libnccl-net-hmr.so: ok"
fi

step "both consumers built and ran against the installed hmr"
