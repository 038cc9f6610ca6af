#!/usr/bin/env bash
# Where the instructions of the 10-step chain (benches/deferred.rs's first
# table: create, 10 callbacks, fire, take the result) go, by callgrind:
# the total per chain from N and 2N chains (set-up cancelled out), then each
# function's own instructions (inlined code counted where it lands) per chain
# in the 2N run.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
cargo bench --bench scale --no-run >/dev/null 2>&1
bin=$(cargo bench --bench scale --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*scale[^"]*"' | tail -n 1 | cut -d'"' -f4)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
count() {
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" count chain "$1" 2>&1 |
        awk '/refs:/ { gsub(",", "", $4); print $4 }'
}
a=$(count "$n")
b=$(count $((2 * n)))
awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "10-step chain: %.1f instructions per chain (%.1f per step)\n\n", (b - a) / n, (b - a) / n / 10 }'
echo "| function (own instructions, inlined code included) | per chain |"
echo "|---|---:|"
callgrind_annotate --auto=no --inclusive=no "$out" 2>/dev/null | grep -E '^ *[0-9,]+ \(' |
    awk -v m=$((2 * n)) '{
        c = $1; gsub(",", "", c)
        f = $0; sub(/^ *[0-9,]+ \([ 0-9.%]+\) */, "", f); sub(/ \[.*$/, "", f); sub(/^[^:]*:/, "", f)
        if (f != "PROGRAM TOTALS") own[f] += c
    } END { for (f in own) if (own[f] / m >= 5) printf "%.1f\t%s\n", own[f] / m, f }' |
    sort -rn | awk -F'\t' '{ printf "| `%s` | %s |\n", $2, $1 }'
