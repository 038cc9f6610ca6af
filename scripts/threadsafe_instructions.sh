#!/usr/bin/env bash
# Where the instructions of a call from another thread go, by callgrind:
# deferloop's call_soon_threadsafe (made, queued, taken and run) beside
# tokio's unbounded mpsc (sent and received), as benches/loop.rs's
# threadsafe table makes them (benches/loop_steps.rs `remote` and `mpsc`).
# Each side runs N and 2N calls: the difference over N is one call, set-up
# cancelled out; then each function's own instructions (inlined code
# counted where it lands) per call in the 2N run, both threads together.
# callgrind runs one thread at a time, so this counts the work, not the
# waits between the threads (nor cache lines moving between cores).
#
#   scripts/threadsafe_instructions.sh [N]      # default 1000000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
cargo bench --bench loop_steps --no-run >/dev/null 2>&1
bin=$(cargo bench --bench loop_steps --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*loop_steps[^"]*"' | tail -n 1 | cut -d'"' -f4)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() {
    valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out/$1.$2" "$bin" "$1" "$2" 2>&1 |
        awk '/refs:/ { gsub(",", "", $4); print $4 }'
}
declare -A per
for side in remote mpsc; do
    a=$(count "$side" "$n")
    b=$(count "$side" $((2 * n)))
    per[$side]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')
done
echo "| call from another thread, made and run | instructions per call |"
echo "|---|---:|"
echo "| deferloop call_soon_threadsafe | ${per[remote]} |"
echo "| tokio mpsc unbounded send + recv | ${per[mpsc]} |"
awk -v d="${per[remote]}" -v t="${per[mpsc]}" 'BEGIN {
    printf "\n- Not a target (the target is in nanoseconds, scripts/threadsafe_runs.sh): tokio / deferloop in instructions: %.2fx\n", t / d
}'
for side in remote mpsc; do
    echo
    echo "| $side: function (own instructions, inlined code included) | per call |"
    echo "|---|---:|"
    callgrind_annotate --auto=no --inclusive=no --threshold=100 "$out/$side.$((2 * n))" 2>/dev/null |
        grep -E '^ *[0-9,]+ \(' |
        awk -v m=$((2 * n)) '{
            c = $1; gsub(",", "", c)
            f = $0; sub(/^ *[0-9,]+ \([ 0-9.%]+\) */, "", f); sub(/ \[.*$/, "", f); sub(/^[^:]*:/, "", f)
            if (f != "PROGRAM TOTALS") own[f] += c
        } END { for (f in own) if (own[f] / m >= 1) printf "%.1f\t%s\n", own[f] / m, f }' |
        sort -rn | awk -F'\t' '{ printf "| `%s` | %s |\n", $2, $1 }'
done
