#!/usr/bin/env bash
# Regenerates the line-count table of COMPARISON.md from examples/compare/.
# Counts lines of code: not blank, not only a comment; whole files, `main`
# included (it is the same argument handling on both sides).
# With --check (CI), changes nothing and fails if the table is out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
count() { grep -cvE '^\s*($|//)' "$1"; }
table=$(
  echo "| program | deferloop (callbacks) | tokio (async) |"
  echo "|---|---:|---:|"
  for p in echo proxy fan_out http_client pubsub transaction crawler; do
    d=examples/compare/${p}_deferloop.rs
    t=examples/compare/${p}_tokio.rs
    echo "| ${p//_/-} | $(count "$d") | $(count "$t") |"
  done
  echo "| shared fake backends (fan-out) | $(count examples/compare/backends.rs) | (same file) |"
  echo "| shared fake HTTP server (http-client) | $(count examples/compare/http_backend.rs) | (same file) |"
  echo "| shared fake line server (transaction) | $(count examples/compare/txn_backend.rs) | (same file) |"
  echo "| shared fake page server (crawler) | $(count examples/compare/crawl_backend.rs) | (same file) |"
)
awk -v table="$table" '
  /<!-- loc:begin -->/ { print; print table; skip = 1; next }
  /<!-- loc:end -->/ { skip = 0 }
  !skip { print }
' COMPARISON.md > COMPARISON.md.new
if [ "${1:-}" = --check ]; then
  if ! diff -u COMPARISON.md COMPARISON.md.new; then
    rm COMPARISON.md.new
    echo "COMPARISON.md's line counts are out of date: run scripts/compare_loc.sh" >&2
    exit 1
  fi
  rm COMPARISON.md.new
  echo "COMPARISON.md's line counts are up to date"
  exit 0
fi
mv COMPARISON.md.new COMPARISON.md
echo "updated COMPARISON.md"
