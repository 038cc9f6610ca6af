#!/usr/bin/env bash
# Instructions per removal of a watched file descriptor, at several n, counted
# by callgrind (benches/scale/main.rs's `count` mode) — repeatable on a shared
# machine where nanoseconds are not. For each n: the count of watching n fds
# and removing them all, less the count of only watching them, over n.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench scale --no-run >/dev/null 2>&1
bin=$(cargo bench --bench scale --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*scale[^"]*"' | tail -n 1 | cut -d'"' -f4)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" count "$1" "$2" 2>&1 |
        awk '/refs:/ { gsub(",", "", $4); print $4 }'
}
ns=${*:-1000 5000 10000 19000}
echo "| n watched, then all removed | instructions per removal |"
echo "|---:|---:|"
per=()
for n in $ns; do
    a=$(count add "$n")
    b=$(count remove "$n")
    p=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')
    per+=("$p")
    echo "| $n | $p |"
done
printf '%s\n' "${per[@]}" | awk -v first="${ns%% *}" -v last="${ns##* }" '
    NR == 1 { lo = $1; hi = $1 }
    { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END {
        r = hi / lo
        printf "\n- Target: removal of a watched fd flat within 1.5x from n = %s to n = %s, in instructions: measured %.2fx: %s\n",
            first, last, r, (r <= 1.5 ? "met" : "**not met**")
    }'
