#!/usr/bin/env bash
# The Debian packages as a user gets them: scripts/package.sh builds them (and lintian checks
# them), each is unpacked into a scratch root (dpkg -x), and there a consumer builds with
# pkg-config and with find_package, hmr-info runs, and the NCCL plugin loads by name as NCCL
# loads it.  Run by scripts/test.sh.
#
#   usage: run_package_test.sh [BUILD_DIR]       (BUILD_DIR: build-release)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build-release}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hmr-packages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
step() { printf '\n== %s\n' "$*"; }
die() {
  printf 'run_package_test: FAILED: %s\n' "$*" >&2
  exit 1
}

step "build the packages (scripts/package.sh)"
bash scripts/package.sh "$tmp/debs" "$build"
for package in libhmr0 libhmr-dev hmr-tools libnccl-net-hmr; do
  deb=$(ls "$tmp/debs/${package}_"*.deb 2>/dev/null | head -n 1)
  [[ -n "$deb" ]] || die "no $package package"
  dpkg-deb --info "$deb" >"$tmp/$package.info"
  grep -q "^ Package: $package$" "$tmp/$package.info" || die "$deb is not $package"
  dpkg -x "$deb" "$tmp/root" || die "dpkg -x $deb"
done
grep -q "Depends:.*libhmr0 (= " "$tmp/hmr-tools.info" || die "hmr-tools does not depend on libhmr0"
grep -q "Depends:.*libc6" "$tmp/libhmr0.info" || die "libhmr0 has no shlibs dependencies"
# python3-hmr: built when the build found Python 3.11+ development files (docs/python.md).
python_deb=$(ls "$tmp/debs/python3-hmr_"*.deb 2>/dev/null | head -n 1 || true)
if [[ -n "$python_deb" ]]; then
  dpkg-deb --info "$python_deb" >"$tmp/python3-hmr.info"
  grep -q "Depends:.*libhmr0 (= " "$tmp/python3-hmr.info" || die "python3-hmr does not depend on libhmr0"
  dpkg -x "$python_deb" "$tmp/root" || die "dpkg -x $python_deb"
fi

root="$tmp/root"
libdir=$(dirname "$(find "$root" -name 'libhmr.so.0' | head -n 1)")
[[ -d "$libdir" ]] || die "libhmr.so.0 is not in the packages"
export LD_LIBRARY_PATH="$libdir"

step "pkg-config consumer against the unpacked libhmr-dev"
pc_dir=$(dirname "$(find "$root" -name hmr.pc | head -n 1)")
PKG_CONFIG_PATH="$pc_dir" pkg-config --exists hmr || die "hmr.pc does not work"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags hmr) \
  tests/install/cmake_consumer/main.c -o "$tmp/pc_consumer" \
  $(PKG_CONFIG_PATH="$pc_dir" pkg-config --libs hmr) || die "building the pkg-config consumer"
"$tmp/pc_consumer" || die "the pkg-config consumer failed"

step "find_package consumer against the unpacked libhmr-dev"
cmake -S tests/install/cmake_consumer -B "$tmp/cmake-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$root/usr" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; die "configure"; }
cmake --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; die "build"; }
"$tmp/cmake-build/hmr_cmake_consumer" || die "the find_package consumer failed"
"$tmp/cmake-build/hmr_cmake_consumer_static" || die "the static consumer failed"

step "hmr-tools and the NCCL plugin"
"$root/usr/bin/hmr-info" --json >"$tmp/info.json" || die "hmr-info from the package failed"
"$root/usr/bin/hmr-perftest" --help >/dev/null || die "hmr-perftest from the package failed"
cat >"$tmp/load_by_name.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
/* As NCCL 2.28 does with NCCL_NET_PLUGIN=hmr: dlopen("libnccl-net-hmr.so") through the
 * loader's search path, then its newest table. */
int main(void) {
  void *plugin = dlopen("libnccl-net-hmr.so", RTLD_NOW | RTLD_LOCAL);
  if (!plugin) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  return dlsym(plugin, "ncclNetPlugin_v11") ? 0 : 2;
}
C
cc "$tmp/load_by_name.c" -o "$tmp/load_by_name" -ldl
"$tmp/load_by_name" || die "the NCCL plugin does not load by name"
if [[ -n "$python_deb" ]]; then
  step "python3-hmr: the package imports and registers (Debian's /usr/bin/python3)"
  PYTHONPATH="$root/usr/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import hmr
with hmr.Domain("sim") as domain, domain.register(bytearray(4096)) as region:
    assert region.iface == "system" and len(region.pack_rkey()) > 0
print("hmr", hmr.__version__, "from", hmr.__file__)' || die "the Python package from python3-hmr failed"
else
  step "python3-hmr: not built here (no Python 3.11+ development files): not checked"
fi
step "the packages install, build consumers, run and load"
