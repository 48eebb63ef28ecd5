# shellcheck shell=bash
# Sourced by the hmr-perftest tests that drive a scripted peer (perftest_peer.py): the Python
# that runs it (Debian's, which the test scripts name; the test is skipped, exit 77, without
# one), a work folder for what each side prints, and fail(), which shows those files.  The
# sourcing script removes $work in its own EXIT trap, beside whatever else it must stop.
python=$(command -v /usr/bin/python3 || command -v python3 || true)
if [[ -z $python ]]; then
  echo "SKIP: python3 is needed for the scripted peer"
  exit 77
fi
# shellcheck disable=SC2034  # (used by the sourcing script)
peer=("$python" "$(dirname "${BASH_SOURCE[0]}")/perftest_peer.py")
work=$(mktemp -d)

fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/*; do [[ -s $f ]] && { echo "--- $(basename "$f")"; cat "$f"; } >&2; done
  exit 1
}
