#!/usr/bin/env bash
# Packs what tests/gpu/device_session.sh runs on a GPU machine that has no compiler toolchain
# for hmr (no GoogleTest, no libfabric): hmr's binaries from a build directory, stripped of
# debug info, and the shared libraries they need that such a machine may lack.
#   tests/gpu/make_bundle.sh <build dir> <bundle folder>
set -euo pipefail
build=${1:?build directory}
bundle=${2:?bundle folder}
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/libstdcxx"
for binary in tests/hmr_gpu_tests tests/hmr_cuda_ipc_exporter tools/hmr-info tools/hmr-perftest \
  bench/hmr_device_registration_bench bench/hmr_device_hit_bench tests/nccl-net/hmr-nccl-net-soak \
  tests/nccl-net/hmr-nccl-net-bench; do
  strip --strip-debug -o "$bundle/bin/$(basename $binary)" "$build/$binary"
done
# The C-ABI bench against UCX's rcache (issue 9's figures), where the build has it, with UCX's
# libraries: it dlopens libucs.so.0, which a GPU machine may lack.
if [[ -x $build/bench/hmr_api_hit_vs_ucx ]]; then
  strip --strip-debug -o "$bundle/bin/hmr_api_hit_vs_ucx" "$build/bench/hmr_api_hit_vs_ucx"
  mkdir -p "$bundle/ucx"
  for library in libucs.so.0 libucm.so.0 libnuma.so.1; do
    # (awk reads to the end: an early exit would kill ldconfig with SIGPIPE under pipefail)
    found=$(ldconfig -p | awk -v n=$library '$1 == n && /x86-64/ && !seen++ {print $NF}')
    if [[ -n $found ]]; then
      cp -L "$found" "$bundle/ucx/"
    else
      echo "make_bundle: $library not found; the bench will need it on the GPU machine" >&2
    fi
  done
fi
# The Python package as built (one abi3 extension: the GPU machine's Python 3.12 loads it; it
# finds libhmr.so.0 through LD_LIBRARY_PATH=<bundle>/lib), and Debian's pytest with what it
# imports, pure Python, for a GPU machine whose Python has no pytest (the session uses the
# machine's own where it has one).
if [[ -f $build/python/hmr/_hmr.abi3.so ]]; then
  mkdir -p "$bundle/python" "$bundle/pytest"
  cp -r "$build/python/hmr" "$bundle/python/"
  strip --strip-debug "$bundle/python/hmr/_hmr.abi3.so"
  for module in _pytest pytest pluggy iniconfig packaging attr attrs py py.py; do
    if [[ -e /usr/lib/python3/dist-packages/$module ]]; then
      cp -r "/usr/lib/python3/dist-packages/$module" "$bundle/pytest/"
    fi
  done
  find "$bundle/pytest" -name __pycache__ -prune -exec rm -rf {} +
else
  echo "make_bundle: $build has no Python package (python3-dev missing?); the python step will fail" >&2
fi
strip --strip-debug -o "$bundle/lib/libhmr.so.0" "$build/libhmr.so.0"
ln -s libhmr.so.0 "$bundle/lib/libhmr.so"
strip --strip-debug -o "$bundle/lib/libnccl-net-hmr.so" "$build/plugins/nccl-net/libnccl-net-hmr.so"
# libfabric (hmr-perftest links it; hmr and the plugin dlopen it) and what it links, except the
# C and C++ runtimes: the GPU machine's own are used, Debian 12's are only the fallback.
ldd "$build/tools/hmr-perftest" | awk '$3 ~ /^\// {print $1, $3}' |
  while read -r name path; do
    case $name in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libhmr.so.*) ;;
      *) cp -L "$path" "$bundle/lib/$name" ;;
    esac
  done
for runtime in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(ldconfig -p | awk -v n=$runtime '$1 == n && /x86-64/ {print $NF; exit}')" \
    "$bundle/libstdcxx/"
done
du -sh "$bundle"
