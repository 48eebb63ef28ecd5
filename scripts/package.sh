#!/usr/bin/env bash
# Builds hmr's Debian packages into OUTDIR with CPack (cmake/HmrPackaging.cmake) and checks them
# with lintian: libhmr0, libhmr-dev, hmr-tools, libnccl-net-hmr (and python3-hmr).  The build
# is a Release build of what the packages hold, for the system prefix (/usr: no RUNPATH, the
# loader finds libhmr), with warnings not made errors, as a user's own build has them.  Tests,
# benchmarks and examples are not packaged and not built here: scripts/test.sh compiles the
# same sources with both compilers (RelWithDebInfo defines NDEBUG as Release does, so what
# compiles there compiles here), and this build was a third full compile of them in CI.
#
#   usage: scripts/package.sh OUTDIR [BUILD_DIR]      (BUILD_DIR: build-release)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [BUILD_DIR]" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
build=${2:-build-release}
jobs=${HMR_JOBS:-2}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DHMR_INSTALL_RPATH=OFF -DHMR_BUILD_TESTS=OFF -DHMR_BUILD_BENCH=OFF -DHMR_BUILD_EXAMPLES=OFF
cmake --build "$build" -j "$jobs"
staging=$(cd "$build" && pwd)/_packages
rm -rf "$staging"
(cd "$build" && cpack -G DEB -B "$staging" >"$staging.log" 2>&1) || { cat "$staging.log"; exit 1; }
debs=("$staging"/*.deb)
cp "${debs[@]}" "$out/"
echo "packages in $out:"
ls -1 "$out"/*.deb

# lintian: no errors.  Suppressed (packaging/lintian-suppressed, one tag per line), with the
# reason: bogus-mail-host and bogus-mail-host-in-debian-changelog, as the maintainer address
# is a placeholder until the project has a public home.
if command -v lintian >/dev/null; then
  lintian_log=$(lintian --tag-display-limit 0 --suppress-tags-from-file packaging/lintian-suppressed \
    "$out"/*.deb 2>&1) || true
  echo "$lintian_log"
  if grep -q '^E: ' <<<"$lintian_log"; then
    echo "package.sh: lintian reports errors (above)" >&2
    exit 1
  fi
else
  echo "package.sh: lintian is not installed (scripts/install-deps.sh installs it): not checked" >&2
fi
