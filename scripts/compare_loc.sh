#!/usr/bin/env bash
# Regenerates the line-count table of COMPARISON.md from examples/compare/.
# Counts lines of code: not blank, not only a comment; whole files, `main`
# included (it is the same argument handling on both sides).
set -euo pipefail
cd "$(dirname "$0")/.."
count() { grep -cvE '^\s*($|//)' "$1"; }
table=$(
  echo "| program | deferloop (callbacks) | tokio (async) |"
  echo "|---|---:|---:|"
  for p in echo proxy fan_out http_client pubsub; do
    d=examples/compare/${p}_deferloop.rs
    t=examples/compare/${p}_tokio.rs
    echo "| ${p//_/-} | $(count "$d") | $(count "$t") |"
  done
  echo "| shared fake backends (fan-out) | $(count examples/compare/backends.rs) | (same file) |"
  echo "| shared fake HTTP server (http-client) | $(count examples/compare/http_backend.rs) | (same file) |"
)
awk -v table="$table" '
  /<!-- loc:begin -->/ { print; print table; skip = 1; next }
  /<!-- loc:end -->/ { skip = 0 }
  !skip { print }
' COMPARISON.md > COMPARISON.md.new
mv COMPARISON.md.new COMPARISON.md
echo "updated COMPARISON.md"
