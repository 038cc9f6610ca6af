#!/usr/bin/env bash
# Instructions per step of a loop whose steps answer at once: deferloop's
# loop_fn beside tokio's `loop { x = step(x).await }` (benches/loop_steps.rs),
# counted by callgrind — repeatable on a shared machine where nanoseconds
# are not. Each side runs N and 2N steps; the difference divided by N is the
# cost of one step, set-up and tear-down cancelled out. Then the same for
# a call from another thread: call_soon_threadsafe beside tokio's mpsc.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
cargo bench --bench loop_steps --no-run >/dev/null 2>&1
bin=$(cargo bench --bench loop_steps --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*loop_steps[^"]*"' | tail -n 1 | cut -d'"' -f4)
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        awk '/refs:/ { gsub(",", "", $4); print $4 }'
}
echo "| loop of steps that answer at once | instructions per step |"
echo "|---|---:|"
declare -A per
for side in loop_fn tokio; do
    a=$(count "$side" "$n")
    b=$(count "$side" $((2 * n)))
    per[$side]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }')
    echo "| $side | ${per[$side]} |"
done
awk -v l="${per[loop_fn]}" -v t="${per[tokio]}" 'BEGIN {
    r = l / t
    printf "\n- Target: loop_fn step at most 1.0x tokio'"'"'s loop, in instructions: measured %.2fx: %s\n", r, (r <= 1.0 ? "met" : "**not met**")
}'

# Calls from another thread (benches/loop.rs's threadsafe table): both
# threads' instructions, per call. Not a target: callgrind runs one thread
# at a time, so this counts the work, not the waits between the threads.
echo
echo "| call from another thread, made and run | instructions per call |"
echo "|---|---:|"
for side in remote mpsc; do
    a=$(count "$side" "$n")
    b=$(count "$side" $((2 * n)))
    echo "| $side | $(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }') |"
done
