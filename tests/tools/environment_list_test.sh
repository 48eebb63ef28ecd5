#!/usr/bin/env bash
# One list of the environment variables hmr reads (util/environment_variables.cpp): every
# variable the code reads must be on it, in hmr-info's config section and in
# docs/environment.md, and everything on it must be documented there too.
#
# "Read by the code": in a source file of hmr (library, tools, NCCL plugin; not tests, benches
# or python/setup.py, whose HMR_BUILD_DIR and HMR_PREFIX are read at build time) that calls
# getenv, env_bool, env_unsigned or setenv, every string literal that is exactly an HMR_* or
# FI_* name; and HMR_<VENDOR>_LIBRARY for every vendor a library is dlopen'ed under
# (SymbolTable::load("VENDOR", ...) or a k...Vendor = "VENDOR" constant).
# Usage: environment_list_test.sh <source dir> <hmr-info>
set -euo pipefail
source_dir=$1 info=$2

if ! python3 -c 'import json' 2>/dev/null; then
  echo "SKIP: python3 is needed"
  exit 77
fi

json=$(HMR_OFI_LIBRARY=/nonexistent/libfabric.so.1 "$info" --json) || {
  echo "FAILED: hmr-info --json" >&2
  exit 1
}

HMR_INFO_JSON=$json python3 - "$source_dir" <<'PY'
import json, os, pathlib, re, sys, tempfile

source = pathlib.Path(sys.argv[1])
config = json.loads(os.environ["HMR_INFO_JSON"])["config"]
listed = set(config["variables"])
reported = set(config["effective"]) | set(config["nccl_plugin"])
docs = (source / "docs" / "environment.md").read_text()
documented = set(re.findall(r"`((?:HMR|FI|HLS)_[A-Z0-9_]+)`", docs))

READS = re.compile(r"\b(getenv|env_bool|env_unsigned|setenv)\s*\(")
NAME = re.compile(r'"((?:HMR|FI|HLS)_[A-Z0-9_]+)"')
VENDOR = re.compile(r'SymbolTable::load\(\s*"([A-Z0-9_]+)"|\bk\w*Vendor\s*=\s*"([A-Z0-9_]+)"')
SKIP_DIRS = {"tests", "bench", ".git"}

def read_by_code(root):
    """{variable: first file that reads it} for the sources under root."""
    found = {}
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p in SKIP_DIRS or p.startswith("build") for p in parts[:-1]):
            continue
        if path.suffix not in (".c", ".cc", ".cpp", ".h", ".hpp") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        where = str(path.relative_to(root))
        for match in VENDOR.finditer(text):
            found.setdefault(f"HMR_{match.group(1) or match.group(2)}_LIBRARY", where)
        if READS.search(text):
            for name in NAME.findall(text):
                found.setdefault(name, where)
    return found

def problems(found):
    out = []
    for name, where in sorted(found.items()):
        if name not in listed:
            out.append(f"{name} (read in {where}) is not in util/environment_variables.cpp")
        if name not in reported:
            out.append(f"{name} (read in {where}) is not in hmr-info's config section")
        if name not in documented:
            out.append(f"{name} (read in {where}) is not in docs/environment.md")
    return out

found = read_by_code(source)
# The scan must see what is known to be read, or it proves nothing.
for known in ("HMR_REG_THREADS", "HMR_UFFD_ASK_KERNEL", "HMR_MLX5_LIBRARY", "HMR_HLTHUNK_LIBRARY",
              "HMR_OFI_LIBRARY", "FI_HMEM", "FI_MR_CACHE_MONITOR", "HMR_NCCL_PROVIDER"):
    if known not in found:
        sys.exit(f"FAILED: the scan does not find {known}: the scan is broken")
errors = problems(found)
for name in sorted(listed - documented):
    errors.append(f"{name} is on the list but not in docs/environment.md")
for name in sorted(listed - reported):
    errors.append(f"{name} is on the list but not in hmr-info's config section")

# And the scan fails on a variable nobody listed.
with tempfile.TemporaryDirectory() as scratch:
    fake = pathlib.Path(scratch) / "core" / "new_knob.cpp"
    fake.parent.mkdir()
    fake.write_text('const char* v = std::getenv("HMR_NOT_ON_THE_LIST");\n')
    if not problems(read_by_code(pathlib.Path(scratch))):
        errors.append("the scan accepts a variable that is on no list")

if errors:
    sys.exit("FAILED:\n  " + "\n  ".join(errors))
print(f"ok: {len(found)} variables read by the code, each listed, reported and documented")
PY
