#!/usr/bin/env bash
# Instructions per UDP datagram and per accepted TCP connection, counted by
# callgrind (benches/sources.rs): a UDP client and echo server on one loop
# make N round trips (2N datagrams, each a dispatch of a socket's source),
# and a listener accepts N connections made and closed by blocking connects.
# Each runs N and 2N; the difference divided by the datagrams (or
# connections) added is the cost of one, set-up and tear-down cancelled out.
#
#   scripts/source_instructions.sh [N]      # N defaults to 2000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
cargo bench --bench sources --no-run >/dev/null 2>&1
bin=$(cargo bench --bench sources --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*sources[^"]*"' | tail -n 1 | cut -d'"' -f4)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        awk '/refs:/ { gsub(",", "", $4); print $4 }'
}
echo "| source | instructions each |"
echo "|---|---:|"
for mode in udp accept; do
    a=$(count $mode "$n")
    b=$(count $mode $((2 * n)))
    added=$n
    [ $mode = udp ] && added=$((2 * n))
    awk -v m="$mode" -v a="$a" -v b="$b" -v k="$added" 'BEGIN {
        printf "| %s | %.1f |\n", (m == "udp" ? "UDP datagram (echoed)" : "TCP connection accepted"), (b - a) / k
    }'
done
