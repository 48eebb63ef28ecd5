#!/usr/bin/env bash
# hmr-info end to end: on this machine as it is, with every runtime made unloadable, and under
# each fake vendor library (loaded through HMR_<VENDOR>_LIBRARY, the path real runtimes take).
# The first screen must fit 100 columns and be the JSON's summary.lines; the full text report
# must agree with the JSON; the JSON must parse and carry the documented keys.
# Usage: hmr_info_test.sh <hmr-info> <fake libcuda> <fake libhsa-runtime64> <fake libze_loader>
#        <fake libnrt> <fake libSynapse> <fake libhl-thunk> <fake libibverbs> <fake libmlx5>
set -euo pipefail
info=$1 fake_cuda=$2 fake_hsa=$3 fake_ze=$4 fake_nrt=$5 fake_synapse=$6 fake_hlthunk=$7
fake_ibverbs=$8 fake_mlx5=$9

if ! python3 -c 'import json' 2>/dev/null; then
  echo "SKIP: python3 with its json module is needed to check hmr-info --json"
  exit 77
fi

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# Runs hmr-info (first screen, --full and --json) under the environment given as VAR=value
# arguments, and then a Python check that gets the JSON as `d`, the full text as `text` (and
# `flat`: its words with single spaces, as wrapping does not change them), the first screen
# as `screen`.
check() {
  local name=$1 check_code=$2
  shift 2
  local screen text json status=0
  screen=$(env "$@" "$info") || status=$?
  [[ $status -eq 0 ]] || fail "$name: hmr-info exited $status"
  text=$(env "$@" "$info" --full) || status=$?
  [[ $status -eq 0 ]] || fail "$name: hmr-info --full exited $status"
  json=$(env "$@" "$info" --json) || status=$?
  [[ $status -eq 0 ]] || fail "$name: hmr-info --json exited $status"
  HMR_INFO_SCREEN=$screen HMR_INFO_TEXT=$text HMR_INFO_JSON=$json \
    python3 - "$name" "$check_code" <<'PY' ||
import json, os, sys, unicodedata
name, code = sys.argv[1], sys.argv[2]
screen = os.environ["HMR_INFO_SCREEN"]
text = os.environ["HMR_INFO_TEXT"]
flat = " ".join(text.split())
try:
    d = json.loads(os.environ["HMR_INFO_JSON"])
except ValueError as error:
    sys.exit(f"{name}: --json is not valid JSON: {error}")

def expect(condition, what):
    if not condition:
        sys.exit(f"{name}: {what}")

def answer(node):
    return isinstance(node, dict) and isinstance(node.get("supported"), bool) and \
        isinstance(node.get("reason"), str) and (node["supported"] or node["reason"])

expect(list(d) == ["hmr", "summary", "ifaces", "devices", "nics", "monitors", "config"],
       f"top-level keys are {list(d)}")

# The first screen: short lines, the same words as --json's summary, at the top of --full.
summary = d["summary"]
expect(screen.split("\n") == summary["lines"], "the first screen is not summary.lines")
expect(text.startswith(screen + "\n"), "--full does not open with the first screen")
def columns(line):  # as a terminal draws it: East Asian wide and fullwidth take two
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)

def shown(c):  # no C0, DEL or C1 control, and no byte that was not UTF-8 (surrogateescape)
    return not (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or 0xdc80 <= ord(c) <= 0xdcff)

def printed(value):  # a JSON string as the text shows it ('\ufffd': a byte that was not UTF-8)
    return "".join(c if shown(c) and c != "\ufffd" else "?" for c in value)

for line in screen.split("\n"):
    expect(columns(line) <= 100, f"a first-screen line of {columns(line)} columns: {line!r}")
for line in text.split("\n"):
    expect(all(shown(c) for c in line), f"--full prints a control or a byte that is not UTF-8: {line!r}")
expect(len(summary["lines"]) <= 24, f"the first screen has {len(summary['lines'])} lines")
for key in ("use", "pass", "memory", "cache", "settings", "missing"):
    expect(key in summary, f"summary has no {key}")
for item in summary["missing"]:
    expect(item["what"] and item["why"] and item["fix"], f"a missing item without a fix: {item}")
    expect(" ".join(item["fix"].split()) in " ".join(screen.split()), f"the screen lacks {item}")
expect(f"  Use:      {summary['use']}"[:60] in screen, "the screen has no Use line")

# Every variable of the list is in the config section (the library's in effective, the NCCL
# plugin's under nccl_plugin), and what is set is reported as set.
for variable, words in d["config"]["variables"].items():
    where = d["config"]["nccl_plugin"] if words.startswith("the NCCL plugin:") else d["config"]["effective"]
    expect(variable in where, f"{variable} is listed but not reported")
    if variable in os.environ:
        expect(d["config"]["set"].get(variable) is not None, f"{variable} is set but not reported")
for error in d["config"]["errors"]:
    expect("does not know how to read" not in error, error)

# A provider row says the name to pass; a name that works never reads "rma: no".
for provider in d["nics"]["libfabric"]["providers"]:
    expect(provider["rma"]["supported"] == (provider["use"] is not None), provider)
    if provider["use"] is not None:
        expect(provider["use"].startswith("provider=") and provider["resolves_to"], provider)
expect([i["name"] for i in d["ifaces"]] == ["system", "cuda", "rocr", "ze", "neuron", "synapseai"],
       "ifaces are not the six interfaces")
for iface in d["ifaces"]:
    expect(iface["loaded"] or iface["reason"], f"{iface['name']} is not loaded and says no reason")
for device in d["devices"]:
    for key in ("dmabuf", "peer_direct", "p2p", "ipc"):
        expect(answer(device[key]), f"{device['name']}: {key} is not a yes/no with a reason")
for key in ("kernel", "rdma_modules", "infiniband_sysfs", "kernel_config", "dmabuf_import",
            "peer_memory", "memlock", "verbs", "libfabric", "sim", "callback"):
    expect(key in d["nics"], f"nics has no {key}")

# Every NIC reported says, per memory operation, whether hmr_md_query_op finds it, and why not.
OPS = ("rereg", "memory_windows", "odp", "implicit_odp", "advise", "indirect")
def operations(node, where):
    ops = node.get("operations")
    expect(isinstance(ops, dict) and list(ops) == list(OPS), f"{where}: operations are {ops}")
    for op in OPS:
        expect(answer(ops[op]), f"{where}: {op} is not a yes/no with a reason")
    return {op: ops[op]["supported"] for op in OPS}
sim_ops = operations(d["nics"]["sim"], "sim")
# The callback NIC and hmr's ofi NIC have none of them.
expect(not any(operations(d["nics"]["callback"], "callback").values()), "callback claims an operation")
for device in d["nics"]["verbs"]["devices"]:
    operations(device, device["name"])
for provider in d["nics"]["libfabric"]["providers"]:
    expect(not any(operations(provider, provider["name"]).values()),
           f"ofi {provider['name']} claims an operation: {provider['operations']}")
expect("\n  Memory operations: " in text, "no 'Memory operations:' summary line")
if d["config"]["environment"]["supported"]:
    # A sim domain opens wherever the environment parses, and has all six (VIRT_ADDR offered).
    expect(all(sim_ops.values()), f"sim lacks an operation: {d['nics']['sim']['operations']}")
    expect("Memory operations: sim: all; callback: none" in flat, "the summary misreports sim")
elif d["monitors"]["chosen"]["refusal"] is None:
    # (A refused FI_MR_CACHE_MONITOR fails only domains that cache: the probes' do not.)
    expect(not any(sim_ops.values()), "sim answered although no domain can open")
expect(answer(d["nics"]["dmabuf_import"]), "nics.dmabuf_import has no reason")
expect(d["nics"]["memlock"]["soft"] == "unlimited" or isinstance(d["nics"]["memlock"]["soft"], int),
       "memlock.soft is neither bytes nor unlimited")
expect(d["monitors"]["under_pressure"]["source"] in
       ("rlimit_memlock", "cap_ipc_lock", "unlimited"), d["monitors"]["under_pressure"])
expect("\n  Under pressure: " in text, "no 'Under pressure:' summary line")
expect([m["name"] for m in d["monitors"]["host"]] == ["userfaultfd", "memhooks"],
       "host monitors are not userfaultfd and memhooks")
expect("FI_HMEM" in d["config"]["effective"], "config.effective has no FI_HMEM")

# The text says what the JSON says.
loaded_devices = [i for i in d["ifaces"] if i["name"] != "system" and i["loaded"]]
if d["devices"]:
    expect("\n  Devices: " in text, "devices in the JSON, no 'Devices:' summary line")
else:
    expect("\n  No GPU: " in text, "no device in the JSON, no 'No GPU:' summary line")
    for i in d["ifaces"][1:]:
        if not i["loaded"]:
            # (Without spaces: a word longer than a line is cut where the line ends.)
            expect("".join(printed(f"{i['name']}: {i['reason']}").split()) in "".join(text.split()),
                   f"the summary lacks {i['name']}'s reason")
if d["nics"]["verbs"]["devices"]:
    expect("\n  RDMA: " in text, "RDMA devices in the JSON, no 'RDMA:' summary line")
else:
    expect("\n  No RDMA device: " in text, "no RDMA device in the JSON, no 'No RDMA device:' line")
for device in d["devices"]:
    expect(f"\n  {device['name']}\n" in text, f"the text has no block for {device['name']}")

exec(code)
PY
    fail "$name"
  echo "ok: $name"
}

# This machine as it is.  Where it has no RDMA kernel support (as the build machines here),
# the summary must say so plainly.
check "this machine" '
if not d["nics"]["rdma_modules"]["ib_uverbs"]:
    expect("no RDMA kernel support" in flat, "the summary does not say the kernel has no RDMA")
    expect("RDMA device (nic=verbs)" in screen, "the first screen does not say verbs is missing")
    expect(not d["nics"]["dmabuf_import"]["supported"], "dma-buf import claimed without RDMA")
if "FI_MR_CACHE_MONITOR" not in os.environ:
    expect(d["monitors"]["chosen"]["source"] == "default", "a monitor chosen without FI_MR_CACHE_MONITOR")
    # The default is the first of memhooks, userfaultfd that starts here, else none.
    started = {m["name"]: m["available"]["supported"] for m in d["monitors"]["host"]}
    first = next((n for n in ("memhooks", "userfaultfd") if started[n]), None)
    expect(d["monitors"]["chosen"]["name"] == first, (d["monitors"]["chosen"], started))
    expect(d["monitors"]["chosen"]["reason"], "the default monitor comes without a reason")
'

check "monitor named in the environment" '
expect(d["monitors"]["chosen"]["name"] == "userfaultfd", d["monitors"]["chosen"])
expect(d["monitors"]["chosen"]["source"] == "FI_MR_CACHE_MONITOR", d["monitors"]["chosen"])
' FI_MR_CACHE_MONITOR=userfaultfd

# Nothing loadable: every runtime missing, said per runtime with the path tried.
check "no runtime at all" '
expect(d["devices"] == [], "devices without any runtime")
expect("\n  No GPU: no device runtime is loaded:\n" in text, "no plain No GPU line")
for i in d["ifaces"][1:]:
    expect(not i["loaded"] and "/nonexistent" in i["reason"], "%s: %s" % (i["name"], i["reason"]))
expect("/nonexistent" in d["nics"]["verbs"]["reason"], "verbs reason lacks the path")
expect("\n  No RDMA device: libibverbs is not loaded: " in text, "no RDMA line for a missing libibverbs")
expect("Memory operations: sim: all; callback: none Host" in flat,
       "the memory operations line lists a NIC that is not there")
expect(any(m["what"].startswith("libfabric") and "HMR_OFI_LIBRARY" in m["fix"]
           for m in d["summary"]["missing"]), "the first screen does not say libfabric is missing")
expect("nic=sim" in d["summary"]["use"] and "ofi" not in d["summary"]["use"], d["summary"]["use"])
expect(not d["nics"]["libfabric"]["loaded"] and "/nonexistent" in d["nics"]["libfabric"]["reason"],
       "libfabric loaded from nowhere")
' HMR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 HMR_ROCR_LIBRARY=/nonexistent/x.so \
  HMR_ZE_LIBRARY=/nonexistent/x.so HMR_NEURON_LIBRARY=/nonexistent/x.so \
  HMR_SYNAPSEAI_LIBRARY=/nonexistent/x.so HMR_IBVERBS_LIBRARY=/nonexistent/x.so \
  HMR_OFI_LIBRARY=/nonexistent/x.so

# The runs below are about one runtime each: they leave libfabric out (HMR_OFI_LIBRARY set to
# nowhere), which saves its ~0.8 s of provider start-up per run here.
no_ofi=HMR_OFI_LIBRARY=/nonexistent/libfabric.so.1

# A limit of 0 turns every cache off (hmr_domain_open looks at the limits before the monitor):
# no monitor is chosen, device memory is not cached either, and the first screen says none.
# (Before, the default monitor was reported as the one a domain gets.)
for limit in FI_MR_CACHE_MAX_COUNT FI_MR_CACHE_MAX_SIZE; do
  check "$limit=0" '
limit = [v for v in ("FI_MR_CACHE_MAX_COUNT", "FI_MR_CACHE_MAX_SIZE") if d["config"]["set"].get(v) == "0"][0]
chosen = d["monitors"]["chosen"]
expect(chosen["name"] is None and chosen["source"] == limit, chosen)
expect(d["summary"]["cache"] == f"none: {limit}=0 turns the registration cache off", d["summary"]["cache"])
expect(any(m["what"] == "registration cache" and limit in m["fix"] for m in d["summary"]["missing"]),
       d["summary"]["missing"])
devices = [m for m in d["monitors"]["device"] if m["name"] == "cuda"]
expect(devices and not devices[0]["cached"]["supported"] and limit in devices[0]["cached"]["reason"],
       devices)
' "$no_ofi" HMR_CUDA_LIBRARY="$fake_cuda" FI_MR_CACHE_MONITOR=userfaultfd "$limit=0"
done

# A monitor that is not built in makes hmr_domain_open fail (HMR_ENOENT, unless the
# application imports one of that name): an error, not "every variable parses".  A limit of
# 0 comes first: the monitor is never looked for then, and the domain opens.
check "FI_MR_CACHE_MONITOR=bogus" '
chosen = d["monitors"]["chosen"]
expect(chosen["name"] is None and "unknown cache monitor \x27bogus\x27" in chosen["refusal"], chosen)
expect(not d["config"]["environment"]["supported"], d["config"]["environment"])
expect("FI_MR_CACHE_MONITOR=\x27bogus\x27" in d["config"]["environment"]["reason"], d["config"]["environment"])
expect(any("unknown cache monitor" in e for e in d["config"]["errors"]), d["config"]["errors"])
expect("refuses" in d["summary"]["settings"], d["summary"]["settings"])
expect(any(m["what"] == "setting" and "FI_MR_CACHE_MONITOR=\x27bogus\x27" in m["why"]
           for m in d["summary"]["missing"]), d["summary"]["missing"])
' "$no_ofi" FI_MR_CACHE_MONITOR=bogus
check "FI_MR_CACHE_MONITOR=bogus with FI_MR_CACHE_MAX_COUNT=0" '
expect(d["monitors"]["chosen"]["refusal"] is None, d["monitors"]["chosen"])
expect(d["config"]["environment"]["supported"], d["config"]["environment"])
' "$no_ofi" FI_MR_CACHE_MONITOR=bogus FI_MR_CACHE_MAX_COUNT=0

check "HMR_CUDA_LIBRARY=/nonexistent" '
cuda = d["ifaces"][1]
expect(not cuda["loaded"] and "/nonexistent" in cuda["reason"], f"cuda: {cuda}")
expect(cuda["library"] == "/nonexistent", "cuda.library is not the override")
expect(" ".join(("cuda: " + cuda["reason"]).split()) in flat, "the text does not show why cuda is missing")
' "$no_ofi" HMR_CUDA_LIBRARY=/nonexistent

check "fake CUDA" '
cuda = [x for x in d["devices"] if x["iface"] == "cuda"]
expect(len(cuda) == 2, f"{len(cuda)} cuda devices")
expect(cuda[0]["dmabuf"]["supported"] and not cuda[1]["dmabuf"]["supported"],
       "the fake has dma-buf on device 0 only")
expect("DMA_BUF_SUPPORTED" in cuda[1]["dmabuf"]["reason"], cuda[1]["dmabuf"]["reason"])
expect(cuda[0]["p2p"]["supported"] and "dma-buf" in cuda[0]["p2p"]["reason"], "device 0 P2P")
expect(not cuda[1]["p2p"]["supported"], "device 1 has neither path")
expect(all(x["pci_bus_id"] for x in cuda), "no PCI bus id")
expect(d["ifaces"][1]["free_tracking"] == "alloc_id", "cuda frees are tracked by buffer id")
expect("\n  Devices: cuda: 2 device(s) (" in text, "no Devices summary")
' "$no_ofi" HMR_CUDA_LIBRARY="$fake_cuda"

check "fake CUDA with FI_HMEM_DISABLE_P2P" '
for x in d["devices"]:
    expect(not x["p2p"]["supported"] and "FI_HMEM_DISABLE_P2P" in x["p2p"]["reason"], x["p2p"])
expect("FI_HMEM_DISABLE_P2P is set" in text, "the summary does not say P2P is disabled")
' "$no_ofi" HMR_CUDA_LIBRARY="$fake_cuda" FI_HMEM_DISABLE_P2P=1

check "fake ROCr" '
rocr = [x for x in d["devices"] if x["iface"] == "rocr"]
expect(len(rocr) == 2, f"{len(rocr)} rocr devices")
expect(all(x["pci_bus_id"] for x in rocr), "no PCI bus id")
expect(d["ifaces"][2]["free_tracking"] == "free_events", "rocr frees come as events")
' "$no_ofi" HMR_ROCR_LIBRARY="$fake_hsa"

check "fake Level Zero" '
ze = [x for x in d["devices"] if x["iface"] == "ze"]
expect(ze and ze[0]["dmabuf"]["supported"], "ze device 0 exports dma-buf")
expect(ze[0]["ze_driver"] == 0 and ze[0]["ze_device"] == 0, "ze ids are not decoded")
# The fake has a second driver: its device is 1 << 16, never "device 2".
expect([x["id"] for x in ze] == [0, 1, 65536], "ze device ids are not the driver << 16 encoding")
' "$no_ofi" HMR_ZE_LIBRARY="$fake_ze"

check "fake Neuron" '
neuron = [x for x in d["devices"] if x["iface"] == "neuron"]
expect(len(neuron) == 2 and all(x["dmabuf"]["supported"] for x in neuron), "neuron devices")
expect(d["ifaces"][4]["free_tracking"] == "explicit_only", "neuron frees are explicit")
' "$no_ofi" HMR_NEURON_LIBRARY="$fake_nrt"

check "fake SynapseAI" '
gaudi = [x for x in d["devices"] if x["iface"] == "synapseai"]
expect(len(gaudi) == 2 and gaudi[0]["dmabuf"]["supported"], "synapseai devices")
' "$no_ofi" HMR_SYNAPSEAI_LIBRARY="$fake_synapse" HMR_HLTHUNK_LIBRARY="$fake_hlthunk"

check "fake libibverbs" '
verbs = d["nics"]["verbs"]
expect([x["name"] for x in verbs["devices"]] == ["fake_mlx5_0", "fake_efa_0"], verbs)
mlx, efa = verbs["devices"]
expect(mlx["dmabuf"]["supported"] and mlx["on_demand_paging"]["supported"], mlx)
expect(not efa["dmabuf"]["supported"] and efa["dmabuf"]["reason"], efa)
expect(d["nics"]["dmabuf_import"]["supported"], "dma-buf import not seen through fake_mlx5_0")
expect("\n  RDMA: 2 device(s) through " in text, "no RDMA summary line")
# The fake kernel copies pinned pages on fork (as 5.13+ does): nothing for hmr to do.
expect(verbs["fork_protection"]["state"] == "unneeded", verbs.get("fork_protection"))
# Through the verbs NIC of hmr: the fake mlx5 device has everything but indirect keys, which need
# libmlx5 (that of the machine, if any, cannot work with a fake libibverbs); the fake EFA device
# none (no windows, no ODP, and the EFA provider has no rereg_mr).
mlx_ops, efa_ops = operations(mlx, "fake_mlx5_0"), operations(efa, "fake_efa_0")
expect(all(mlx_ops[op] for op in OPS if op != "indirect"), mlx["operations"])
expect(not mlx_ops["indirect"], mlx["operations"]["indirect"])
expect("UMR" in mlx["operations"]["indirect"]["reason"] or "mlx5dv" in mlx["operations"]["indirect"]["reason"],
       mlx["operations"]["indirect"]["reason"])
expect(not any(efa_ops[op] for op in OPS), efa["operations"])
expect("rereg_mr" in efa["operations"]["rereg"]["reason"], efa["operations"]["rereg"])
expect("; verbs fake_mlx5_0: all but indirect keys; verbs fake_efa_0: none" in flat,
       "the summary misreports the memory operations of the verbs devices")
' "$no_ofi" HMR_IBVERBS_LIBRARY="$fake_ibverbs" HMR_MLX5_LIBRARY=/nonexistent/libmlx5.so.1

# With the fake libmlx5 beside it, the fake mlx5 device (opened with DEVX) has indirect keys too.
check "fake libibverbs and libmlx5" '
mlx, efa = d["nics"]["verbs"]["devices"]
mlx_ops, efa_ops = operations(mlx, "fake_mlx5_0"), operations(efa, "fake_efa_0")
expect(all(mlx_ops[op] for op in OPS), mlx["operations"])
expect("not an mlx5 device" in efa["operations"]["indirect"]["reason"], efa["operations"])
expect("; verbs fake_mlx5_0: all; verbs fake_efa_0: none" in flat,
       "the summary misreports the memory operations of the verbs devices")
' "$no_ofi" HMR_IBVERBS_LIBRARY="$fake_ibverbs" HMR_MLX5_LIBRARY="$fake_mlx5"

# Bad settings are reported, not fatal; odd bytes in a value still give valid JSON.
check "bad environment" '
errors = d["config"]["errors"]
expect(any("FI_HMEM_DISABLE_P2P" in e for e in errors), errors)
expect(any("FI_MR_CACHE_MAX_COUNT" in e for e in errors), errors)
expect(not d["config"]["environment"]["supported"], "a bad environment passed")
expect(d["config"]["set"]["FI_MR_CACHE_MONITOR"] == "bad\ufffd\t\"name\"", d["config"]["set"])
expect("chosen" in d["monitors"] and d["monitors"]["chosen"]["name"] is None, "a monitor chosen")
expect("Configuration error: FI_HMEM_DISABLE_P2P=" in text, "no configuration error line")
' FI_HMEM_DISABLE_P2P=maybe FI_MR_CACHE_MAX_COUNT=-1 FI_MR_CACHE_MONITOR=$'bad\xff\t"name"'

# A value domain open refuses is reported once, everywhere: set, errors, the environment's
# answer and the first screen agree (HMR_REG_THREADS' range is checked only as a whole).
check "HMR_REG_THREADS=0" '
expect(d["config"]["set"].get("HMR_REG_THREADS") == "0", d["config"]["set"])
expect(any(e.startswith("HMR_REG_THREADS=0") for e in d["config"]["errors"]), d["config"]["errors"])
expect(not d["config"]["environment"]["supported"], d["config"]["environment"])
expect("HMR_REG_THREADS" in d["config"]["environment"]["reason"], d["config"]["environment"])
expect("refuses" in d["summary"]["settings"] and "HMR_REG_THREADS=0" in screen, screen)
expect(d["summary"]["use"].startswith("nothing until"), d["summary"]["use"])
' "$no_ofi" HMR_REG_THREADS=0

# A value hmr ignores (it never stops a program for a log level) is still named.
check "HMR_LOG_LEVEL unknown" '
expect(d["config"]["environment"]["supported"], d["config"]["environment"])
expect(any("HMR_LOG_LEVEL=\x27loud\x27" in e for e in d["config"]["errors"]), d["config"]["errors"])
expect("wrong" in d["summary"]["settings"] and "HMR_LOG_LEVEL" in screen, screen)
' "$no_ofi" HMR_LOG_LEVEL=loud

# However long a value, the first screen keeps to 100 columns (checked in every run above).
check "a very long value" '
expect(any("FI_MR_CACHE_MAX_COUNT" in e for e in d["config"]["errors"]), d["config"]["errors"])
' "$no_ofi" FI_MR_CACHE_MAX_COUNT="$(printf "x%.0s" {1..300})"

# Wide characters take two columns, and neither C1 controls (U+009B, CSI) nor bytes that are
# not UTF-8 reach the terminal, on the first screen or in --full (each run above is checked
# for both; these values would have broken them).
check "wide characters and C1 controls" '
expect(any("FI_HMEM" in e for e in d["config"]["errors"]), d["config"]["errors"])
expect("\u6f22" * 10 in screen, "the wide characters are not shown")
' "$no_ofi" FI_HMEM="$(printf '\xe6\xbc\xa2%.0s' {1..150})"$'\xc2\x9b''31m'$'\xff' \
  HMR_LOG_LEVEL=$'\xc2\x9b''2J'

check "HMR_LOG_LEVEL in upper case" '
expect(d["config"]["effective"]["HMR_LOG_LEVEL"] == "debug", d["config"]["effective"]["HMR_LOG_LEVEL"])
' HMR_LOG_LEVEL=DEBUG

check "FI_HMEM excludes cuda" '
expect(not d["ifaces"][1]["enabled"] and "FI_HMEM" in d["ifaces"][1]["reason"], d["ifaces"][1])
expect(d["devices"] == [], "an excluded runtime gave devices")
' "$no_ofi" FI_HMEM=^cuda HMR_CUDA_LIBRARY="$fake_cuda"

# Under pressure: where the bound on pinned bytes comes from.  Without CAP_IPC_LOCK (root drops
# it from its bounding set with setpriv) and with RLIMIT_MEMLOCK at 64 KiB, it is that limit.
if command -v prlimit >/dev/null && command -v setpriv >/dev/null; then
  drop=()
  [[ $(id -u) -eq 0 ]] && drop=(setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock)
  json=$(prlimit --memlock=65536: "${drop[@]}" "$info" --json) || fail "hmr-info under a low memlock"
  HMR_INFO_JSON=$json python3 -c '
import json, os, sys
p = json.loads(os.environ["HMR_INFO_JSON"])["monitors"]["under_pressure"]
if p["source"] != "rlimit_memlock" or p["max_pinned_bytes"] != 65536 or "64 KiB" not in p["reason"]:
    sys.exit(f"under_pressure with a 64 KiB memlock: {p}")
' || fail "under_pressure does not report RLIMIT_MEMLOCK"
  echo "ok: under pressure"
fi

# The command line.
"$info" --help | grep -q -- "--json" || fail "--help does not document --json"
"$info" --version | grep -qE '^hmr-info: hmr [0-9]+\.[0-9]+\.[0-9]+ ' || fail "--version does not say the version"
status=0
"$info" --bogus >/dev/null 2>&1 || status=$?
[[ $status -eq 2 ]] || fail "an unknown argument exited $status, not 2"
echo "ok: command line"
