#!/usr/bin/env bash
# Server instructions per echoed request, counted by callgrind: the raw
# protocol (`echo server deferloop`, data_received writes the slice back)
# beside the Stream's read_some() loop (`echo server deferloop-reads`), at
# 1, 10 and 100 KiB — repeatable on a shared machine where CPU time is not.
# One connection, one message in flight (the echo bench's shape); each
# server answers N then 2N requests, and the difference divided by N is the
# cost of one request, set-up and tear-down cancelled out. User space only:
# the kernel's copies, the same for both, are not counted, so a ratio here
# is larger than the ratio of CPU time.
#
#   scripts/echo_instructions.sh [N]      # N defaults to 1000
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
cargo bench --bench echo --no-run >/dev/null 2>&1
bin=$(cargo bench --bench echo --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*/echo-[^"]*"' | tail -n 1 | cut -d'"' -f4)

# count SERVER SIZE REQUESTS: the server's instructions for that many.
count() {
    local dir
    dir=$(mktemp -d)
    mkfifo "$dir/in"
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" server "$1" \
        <"$dir/in" >"$dir/addr" 2>"$dir/log" &
    local vg=$!
    exec {keep}>"$dir/in" # the server exits when its stdin closes
    until grep -q : "$dir/addr" 2>/dev/null; do sleep 0.2; done
    python3 - "$(head -n 1 "$dir/addr")" "$2" "$3" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
size, n = int(sys.argv[2]), int(sys.argv[3])
msg = b"x" * (size - 1) + b"\n"
s = socket.create_connection((host, int(port)))
for _ in range(n):
    s.sendall(msg)
    got = 0
    while got < size:
        b = s.recv(1 << 20)
        if not b:
            raise SystemExit("the server closed")
        got += len(b)
s.close()
PY
    exec {keep}>&-
    wait "$vg" || true
    awk '/refs:/ { gsub(",", "", $4); print $4 }' "$dir/log"
    rm -rf "$dir"
}

echo "| message | raw protocol, instructions per request | Stream, instructions per request | Stream / raw |"
echo "|---|---:|---:|---:|"
for size in 1024 10240 102400; do
    declare -A per
    for server in deferloop deferloop-reads; do
        a=$(count "$server" "$size" "$n")
        b=$(count "$server" "$size" $((2 * n)))
        per[$server]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / n }')
    done
    awk -v s="$size" -v r="${per[deferloop]}" -v d="${per[deferloop-reads]}" 'BEGIN {
        printf "| %d KiB | %d | %d | %.3fx |\n", s / 1024, r, d, d / r
    }'
done
