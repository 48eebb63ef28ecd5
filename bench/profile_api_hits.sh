#!/bin/sh
# Profiles hmr's C-ABI cache hit (hmr_mr_reg + hmr_mr_key + hmr_mr_desc + hmr_mr_close at
# 100k cached regions, sim NIC, no UCX in the process) and prints the top symbols.
#
#   bench/profile_api_hits.sh [path/to/hmr_api_hit_vs_ucx] [hits, default 5M] [regions, default 100k]
#
# Only the hits are recorded: perf starts with its events off (-D -1) and the program switches
# them on and off around the hits through perf's control fifo (HMR_BENCH_PERF_CTL/_ACK), so
# populating the cache stays out of the profile.  Needs perf 5.10 or newer and permission to
# profile (root, or kernel.perf_event_paranoid <= 1).  Extra perf record options can be given
# in PERF_RECORD_OPTIONS (e.g. "-g" for call graphs, "-e cycles" where the PMU is available).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-}
if [ -z "$bench" ]; then
  for candidate in "$here/build/bench/hmr_api_hit_vs_ucx" "$here"/build-*/bench/hmr_api_hit_vs_ucx; do
    if [ -x "$candidate" ]; then bench=$candidate; break; fi
  done
fi
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
  echo "profile_api_hits.sh: build the hmr_api_hit_vs_ucx target first, or give its path" >&2
  exit 1
fi
hits=${2:-5000000}
regions=${3:-100000}
command -v perf >/dev/null 2>&1 || { echo "profile_api_hits.sh: perf is not installed" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
mkfifo "$work/ctl" "$work/ack"

# cpu-clock works in guests without a PMU; its samples land on the instruction after a miss.
HMR_BENCH_PERF_CTL="$work/ctl" HMR_BENCH_PERF_ACK="$work/ack" \
  perf record -q -e cpu-clock -F ${PERF_FREQUENCY:-999} ${PERF_RECORD_OPTIONS:-} -D -1 \
    --control="fifo:$work/ctl,$work/ack" -o "$work/perf.data" -- "$bench" --profile-hits="$hits" --profile-regions="$regions"

echo
echo "== top symbols (self time, % of samples during the hits) =="
perf report -i "$work/perf.data" --stdio --no-children --sort dso,symbol --percent-limit 0.5 \
  2>/dev/null | grep -v '^#' | grep -v '^$' | head -40
