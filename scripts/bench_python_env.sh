#!/usr/bin/env bash
# Makes (once) the virtualenv of the echo comparison's Python peers under
# target/, with pinned uvloop and Twisted, and prints its python's path.
# Fails, with the reason as its last line on stderr, when Python 3, venv or
# the install is missing; scripts/bench_report.sh then skips the peers.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/bench-venv
pins=(uvloop==0.23.0 Twisted==26.10.0)
py=$(command -v python3) || { echo "python3 not found" >&2; exit 1; }
if ! "$venv/bin/python" -c 'import uvloop, twisted' 2>/dev/null; then
  "$py" -m venv "$venv" >&2 || { echo "python3 -m venv failed" >&2; exit 1; }
  "$venv/bin/python" -m pip install -q "${pins[@]}" >&2 \
    || { echo "pip install ${pins[*]} failed" >&2; exit 1; }
fi
echo "$PWD/$venv/bin/python"
