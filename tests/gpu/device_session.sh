#!/usr/bin/env bash
# Everything docs/gpu.md records, in one run on a GPU machine, from binaries built elsewhere
# (tests/gpu/make_bundle.sh puts them in <bundle>: bin/, lib/ with libfabric and its
# libraries, libstdcxx/ as a fallback for an older C++ runtime).
#   tests/gpu/device_session.sh <bundle> <output folder>
# Each step's log goes to its own file in the output folder; the script goes on after a
# failing step and exits 1 at the end if any failed.
set -uo pipefail

bundle=$(cd "${1:?bundle folder}" && pwd)
out=${2:?output folder}
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=()

step() {  # step <log name> <command...>: runs it, appends its output to <log name>
  local log=$out/$1
  shift
  echo "### $(date -u +%FT%TZ) \$ $*" | tee -a "$log"
  "$@" >> "$log" 2>&1
  local status=$?
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
step lane.log env HMR_GPU_LANE_REQUIRE=1 "$bundle/bin/hmr_gpu_tests" --gtest_color=no

# 2. hmr-info.
step hmr-info.log run_hmr "$bundle/bin/hmr-info"
run_hmr "$bundle/bin/hmr-info" --json > "$out/hmr-info.json" 2>> "$out/hmr-info.log"

# 3. hmr-perftest between two processes with CUDA memory, over libfabric tcp and shm.
perftest() {  # perftest <port> <args...>: a server and a client on this host
  local port=$1
  shift
  run_hmr "$bundle/bin/hmr-perftest" --server --port "$port" --timeout 120 --quiet "$@" &
  local server=$! status=0
  run_hmr "$bundle/bin/hmr-perftest" 127.0.0.1 --port "$port" --timeout 120 "$@" || status=$?
  wait "$server" || status=$?
  return $status
}
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
# Without a host shadow there is no path to the GPU on this libfabric: the error must say why.
port=$((port + 1))
said=$(perftest $port --provider tcp --mem cuda:0 --dmabuf --size 64K --iters 10 2>&1)
echo "$said" >> "$out/perftest.log"
grep -q "no way to register cuda device 0 memory.*dma-buf:" <<<"$said" ||
  failed+=("--dmabuf on tcp: no error naming the dma-buf path")

# Registration cost of GPU memory through the C ABI, cold against cached, per export path.
step bench.log run_hmr "$bundle/bin/hmr_device_registration_bench" 200

# 4. A PyTorch tensor through ctypes.
step torch.log env HMR_LIBRARY="$bundle/lib/libhmr.so.0" python3 -u "$here/torch_registration_gpu.py"

# 5. NCCL loads the net plugin.
# (bundle/lib only: a C++ runtime of the bundle must not replace PyTorch's own)
step nccl.log env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  NCCL_NET_PLUGIN=hmr NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV PYTHONUNBUFFERED=1 \
  python3 "$here/nccl_plugin_gpu.py"
# With one rank the all-reduce is right whatever network NCCL took: the log must show the plugin.
for line in "NET/Plugin: Loaded net plugin hmr" "NET/hmr: device 0:" "Unloading plugin hmr"; do
  grep -q "$line" "$out/nccl.log" || failed+=("nccl.log lacks '$line'")
done

# 6. Real NCCL collectives through the plugin: two ranks on the
# one GPU as two hosts (distinct NCCL_HOSTID), beside NCCL's own socket transport, user-buffer
# registration, and a rank killed mid-collective (tests/gpu/nccl_two_ranks.py, docs/gpu.md).
step nccl_two_ranks.log env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  python3 -u "$here/nccl_two_ranks.py" --out "$out/nccl-two-ranks"

# 7. What a caller pays for host registrations through the C ABI, beside UCX's rcache
# (bench/api_hit_vs_ucx.cpp, docs/performance.md): once with host memory alone, as on a
# machine without GPUs, once with the CUDA runtime loaded (a miss then asks the driver what
# the pointer is).
if [[ -x $bundle/bin/hmr_api_hit_vs_ucx ]]; then
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
