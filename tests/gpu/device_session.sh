#!/usr/bin/env bash
# Everything docs/gpu.md records, in one run on a GPU machine, from binaries built elsewhere
# (tests/gpu/make_bundle.sh puts them in <bundle>: bin/, lib/ with libfabric and its
# libraries, libstdcxx/ as a fallback for an older C++ runtime, python/ and pytest/).
#   tests/gpu/device_session.sh <bundle> <output folder> [steps]
# steps: a comma list of the steps below, "all" (the default) or "pending" (what the open
# issues still need from a GPU: lane,hitbench,python,tworanks,netbench; about 6 minutes on an
# H200).
#   lane      the GPU lane (hmr_gpu_tests)            info      hmr-info
#   perftest  hmr-perftest with CUDA memory           regbench  device registration bench
#   hitbench  cached device hits (issue 26)           torch     a tensor through ctypes
#   python    the package's tests, example and bench (issue 27)
#   nccl      NCCL loads the plugin                   tworanks  two-rank NCCL (issue 30)
#   apibench  host hits beside UCX's rcache
#   netbench  the plugin beside NCCL's socket transport, through the net table (issue 30)
# Each step's log goes to its own file in the output folder, and each runs under a time limit
# (a stuck step fails, the session goes on); the script exits 1 at the end if any failed.
set -uo pipefail

bundle=$(cd "${1:?bundle folder}" && pwd)
out=${2:?output folder}
steps=${3:-all}
two_ranks_args=()  # nccl_two_ranks.py's own defaults: every phase, a 240 s bench budget
if [[ $steps == pending ]]; then
  steps=lane,hitbench,python,tworanks,netbench
  two_ranks_args=(--phases bench,kill --budget 150)  # (registration per step is recorded)
fi
for name in ${steps//,/ }; do  # a misspelt step would run nothing and "pass"
  case $name in
    all|lane|info|perftest|regbench|hitbench|torch|python|nccl|tworanks|apibench|netbench) ;;
    *) echo "device_session.sh: unknown step '$name'" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_tree=$(cd "$here/../.." && pwd)
failed=()

wanted() {  # wanted <step>: whether this run takes it
  [[ $steps == all || ,$steps, == *,$1,* ]]
}

step() {  # step <log name> <command...>: runs it (at most 600 s), appends its output to the log
  local log=$out/$1
  shift
  echo "### $(date -u +%FT%TZ) \$ $*" | tee -a "$log"
  # (through bash -c: a step may be one of the functions below, exported for it)
  timeout --kill-after=10 "${STEP_LIMIT:-600}" bash -c '"$@"' step "$@" >> "$log" 2>&1
  local status=$?
  [[ $status -eq 124 ]] && echo "### timed out after ${STEP_LIMIT:-600} s" >> "$log"
  echo "### exit $status" | tee -a "$log"
  [[ $status -eq 0 ]] || failed+=("$*")
  return 0
}

# hmr's own binaries find libhmr, libfabric and (if needed) a newer libstdc++ in the bundle.
hmr_libs=$bundle/lib
if ! LD_LIBRARY_PATH=$hmr_libs "$bundle/bin/hmr-info" --help > /dev/null 2>&1; then
  hmr_libs=$bundle/lib:$bundle/libstdcxx
fi
export HMR_LD_PATH=$hmr_libs
run_hmr() { LD_LIBRARY_PATH=$HMR_LD_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
export -f run_hmr
export bundle

{
  date -u
  uname -a
  grep PRETTY_NAME /etc/os-release
  ldd --version | head -1
  nvidia-smi
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  echo "libcuda: $(ldconfig -p | grep 'libcuda.so.1 ' | head -2)"
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  ls -la /dev/infiniband /sys/class/infiniband 2>&1
  ls /dev/nvidia* 2>&1
  grep -E 'DMABUF|P2PDMA' "/boot/config-$(uname -r)" 2>&1 | head
  echo "hmr libraries from: $HMR_LD_PATH"
} > "$out/env.log" 2>&1

# 1. The GPU lane: the CUDA iface and the public API against the real driver.
wanted lane && STEP_LIMIT=180 step lane.log env HMR_GPU_LANE_REQUIRE=1 "$bundle/bin/hmr_gpu_tests" --gtest_color=no

# 2. hmr-info.
if wanted info; then
  step hmr-info.log run_hmr "$bundle/bin/hmr-info"
  run_hmr "$bundle/bin/hmr-info" --json > "$out/hmr-info.json" 2>> "$out/hmr-info.log"
fi

# 3. hmr-perftest between two processes with CUDA memory, over libfabric tcp and shm.
if wanted perftest; then
  perftest() {  # perftest <port> <args...>: a server and a client on this host
    local port=$1
    shift
    run_hmr "$bundle/bin/hmr-perftest" --server --port "$port" --timeout 120 --quiet "$@" &
    local server=$! status=0
    run_hmr "$bundle/bin/hmr-perftest" 127.0.0.1 --port "$port" --timeout 120 "$@" || status=$?
    wait "$server" || status=$?
    return $status
  }
  export -f perftest
  port=18600
  for provider in tcp shm; do
    for test in write_bw read_bw; do  # (write_lat polls with the CPU: host memory only)
      port=$((port + 1))
      step perftest.log perftest $port --provider $provider --mem cuda:0 --test $test \
        --sizes 4K:4M --iters 200 --reg once,cached,per-iter
    done
  done
  port=$((port + 1))
  step perftest.log perftest $port --provider tcp --mem cuda:0 --size 1M --iters 500 \
    --reg per-iter,cached,once,per-iter,cached,once
  # Plain fi_mr_reg of a GPU address, and CPU polling of GPU memory: refused by the option check
  # (its message says "use --mem host"), not by a connection that fails later.
  for refused in "--reg raw" "--test write_lat"; do
    said=$(run_hmr "$bundle/bin/hmr-perftest" 127.0.0.1 --mem cuda:0 $refused 2>&1)
    echo "$said" >> "$out/perftest.log"
    grep -q "use --mem host" <<<"$said" || failed+=("hmr-perftest --mem cuda:0 $refused: not refused by its options")
  done
  # A server with device memory never sees --test (the client names it): it refuses write_lat
  # itself, and a host client's read_bw (its pattern check), with the reason on both sides,
  # before allocating anything for them, and stays for the next client (a write_bw it runs).
  port=$((port + 1))
  run_hmr "$bundle/bin/hmr-perftest" --server --port "$port" --timeout 60 --quiet --mem cuda:0 \
    >> "$out/perftest.log" 2>&1 &
  server=$!
  for refused in "--test write_lat" "--test read_bw"; do
    said=$(run_hmr "$bundle/bin/hmr-perftest" 127.0.0.1 --port "$port" --timeout 60 --size 4K \
           --iters 10 $refused 2>&1) && failed+=("a cuda:0 server ran a host client's $refused")
    echo "$said" >> "$out/perftest.log"
    grep -q "the peer stopped: server: .*--mem host" <<<"$said" ||
      failed+=("a cuda:0 server's refusal of $refused did not reach the client")
    kill -0 "$server" 2>/dev/null || failed+=("a cuda:0 server ended after refusing $refused")
  done
  run_hmr "$bundle/bin/hmr-perftest" 127.0.0.1 --port "$port" --timeout 60 --size 4K --iters 10 \
    >> "$out/perftest.log" 2>&1 || failed+=("a cuda:0 server did not serve write_bw after its refusals")
  wait "$server" || failed+=("a cuda:0 server exited non-zero after serving write_bw")
  # Without a host shadow there is no path to the GPU on this libfabric: the error must say why.
  port=$((port + 1))
  said=$(perftest $port --provider tcp --mem cuda:0 --dmabuf --size 64K --iters 10 2>&1)
  echo "$said" >> "$out/perftest.log"
  grep -q "no way to register cuda device 0 memory.*dma-buf:" <<<"$said" ||
    failed+=("--dmabuf on tcp: no error naming the dma-buf path")
fi

# Registration cost of GPU memory through the C ABI, cold against cached, per export path.
wanted regbench && step bench.log run_hmr "$bundle/bin/hmr_device_registration_bench" 200

# 3b. A cached register+close of CUDA memory through the C ABI beside a host hit and one
# cuPointerGetAttribute (libfabric's way), then with HMR_CUDA_FREES_REPORTED=1 (issue 26).
if wanted hitbench; then
  step hit_bench.log run_hmr "$bundle/bin/hmr_device_hit_bench"
  step hit_bench.log run_hmr env HMR_CUDA_FREES_REPORTED=1 "$bundle/bin/hmr_device_hit_bench"
fi

# 4. A PyTorch tensor through ctypes.
wanted torch && step torch.log env HMR_LIBRARY="$bundle/lib/libhmr.so.0" python3 -u "$here/torch_registration_gpu.py"

# 4b. The Python package (issue 27): its tests, whose CUDA cases run where PyTorch sees the GPU
# (dma-buf and host-shadow paths), the KV-cache example on CUDA, and the register+close bench
# with a CUDA tensor beside the CPU ones.  The machine's pytest if it has one, else Debian's
# from the bundle.
if wanted python; then
  python_path=$bundle/python
  python3 -c 'import pytest' 2> /dev/null || python_path=$python_path:$bundle/pytest
  py_env=(env "LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          "PYTHONPATH=$python_path" PYTHONUNBUFFERED=1)
  python3 --version >> "$out/python.log" 2>&1
  STEP_LIMIT=300 step python.log "${py_env[@]}" python3 -m pytest -q -rs -p no:cacheprovider \
    "$source_tree/tests/python"
  step python.log "${py_env[@]}" python3 "$source_tree/examples/python/kv_cache_pool.py"
  step python.log "${py_env[@]}" python3 "$source_tree/bench/python/bench_register.py"
fi

# 5. NCCL loads the net plugin.
if wanted nccl; then
  # (bundle/lib only: a C++ runtime of the bundle must not replace PyTorch's own)
  step nccl.log env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    NCCL_NET_PLUGIN=hmr NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV PYTHONUNBUFFERED=1 \
    python3 "$here/nccl_plugin_gpu.py"
  # With one rank the all-reduce is right whatever network NCCL took: the log must show the plugin.
  for line in "NET/Plugin: Loaded net plugin hmr" "NET/hmr: device 0:" "Unloading plugin hmr"; do
    grep -q "$line" "$out/nccl.log" || failed+=("nccl.log lacks '$line'")
  done
fi

# 6. Real NCCL collectives through the plugin: two ranks on the
# one GPU as two hosts (distinct NCCL_HOSTID), beside NCCL's own socket transport, user-buffer
# registration, and a rank killed mid-collective (tests/gpu/nccl_two_ranks.py, docs/gpu.md).
wanted tworanks && step nccl_two_ranks.log env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  python3 -u "$here/nccl_two_ranks.py" --out "$out/nccl-two-ranks" "${two_ranks_args[@]}"

# 6b. The plugin beside NCCL's own socket transport through the v11 net table, host memory,
# two processes (tests/nccl-net/nccl_net_bench.cpp): NCCL's send/recv chunk (128 KiB, 8 in
# flight), 1 MiB, and 8-byte round trips over tcp, on this machine's cores and NIC, where the
# two-rank run put send/recv at 0.63-0.91x Socket.  NCCL's log (NET) records how many sockets
# and threads Socket used.  The Socket table comes from the libnccl.so.2 PyTorch ships
# (nvidia-nccl), or $HMR_NCCL_LIBRARY; --require-socket fails the step where it cannot.
if wanted netbench; then
  nccl_library=${HMR_NCCL_LIBRARY:-$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
  net_bench() {
    env HMR_NCCL_PLUGIN="$bundle/lib/libnccl-net-hmr.so" HMR_NCCL_LIBRARY="$nccl_library" \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET \
      LD_LIBRARY_PATH=$HMR_LD_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$bundle/bin/hmr-nccl-net-bench" \
      --require-socket "$@"
  }
  export -f net_bench
  export bundle nccl_library
  step nccl_net_bench.log net_bench --provider tcp --size 131072 --messages 2048 --rounds 7
  step nccl_net_bench.log net_bench --provider tcp --size 1048576 --messages 512 --rounds 7
  step nccl_net_bench.log net_bench --provider tcp --size 8 --messages 4000 --rounds 7 --latency
fi

# 7. What a caller pays for host registrations through the C ABI, beside UCX's rcache
# (bench/api_hit_vs_ucx.cpp, docs/performance.md): once with host memory alone, as on a
# machine without GPUs, once with the CUDA runtime loaded (a miss then asks the driver what
# the pointer is).
if wanted apibench && [[ -x $bundle/bin/hmr_api_hit_vs_ucx ]]; then
  bench_libs=$HMR_LD_PATH:$bundle/ucx${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  step api_bench.log env FI_HMEM=system LD_LIBRARY_PATH=$bench_libs \
    "$bundle/bin/hmr_api_hit_vs_ucx"
  step api_bench.log env LD_LIBRARY_PATH=$bench_libs "$bundle/bin/hmr_api_hit_vs_ucx"
fi

if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "device session: every step passed"
