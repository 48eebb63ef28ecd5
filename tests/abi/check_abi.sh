#!/usr/bin/env bash
# The ABI check: libhmr as built against the committed baseline (abi/<soname>.abi.xz), with
# libabigail's abidiff, over the exported functions and the types they reach.  Fails on any
# change of the exported C ABI (a symbol removed, a type under a function changed, a function
# added) until it is undone, or the baseline is written again on purpose
# (scripts/abi-baseline.sh) — with the soname moved where the change breaks callers.
# Changes of hmr's internals do not count.  Run by ctest as hmr_abi_check (docs/api.md, "ABI").
#
#   usage: check_abi.sh <source_dir> <library>
set -euo pipefail
source_dir=$1
library=$(readlink -f "$2")
if ! command -v abidiff >/dev/null; then
  echo "SKIP: abidiff is not installed (abigail-tools; scripts/install-deps.sh installs it)"
  exit 77
fi
soname=$(objdump -p "$library" | awk '$1 == "SONAME" {print $2}')
baseline="$source_dir/abi/$soname.abi.xz"
if [[ ! -f "$baseline" ]]; then
  echo "FAILED: no ABI baseline for $soname ($baseline): a new soname needs one" \
       "(scripts/abi-baseline.sh)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hmr-abi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
xz -dc "$baseline" >"$tmp/baseline.abi"
status=0
# Over the exported functions and every type they reach (hmr's internals reach none of them,
# so a change there is no change here).
abidiff "$tmp/baseline.abi" "$library" >"$tmp/report.txt" 2>&1 || status=$?
cat "$tmp/report.txt"
if ((status & 1)); then echo "FAILED: abidiff could not compare (status $status)"; exit 1; fi
if ((status & 8)); then
  echo "FAILED: an incompatible change of $soname's ABI (above: a symbol went away). Keep the" \
       "ABI, or move the soname (project VERSION's major) and write a new baseline on purpose."
  exit 1
fi
if ((status & 4)); then
  echo "FAILED: $soname's ABI changed (above). A function added or a field appended to an" \
       "extensible struct keeps it: write the baseline again in the same commit" \
       "(scripts/abi-baseline.sh). A field moved, resized or retyped breaks it: undo that," \
       "or move the soname with a new baseline (docs/api.md, \"ABI\")."
  exit 1
fi
echo "ok: $soname's ABI is the baseline's"
