#!/usr/bin/env bash
# The threadsafe-call table of `cargo bench --bench loop` (deferloop's
# call_soon_threadsafe beside tokio's unbounded mpsc, interleaved in one
# run) run five times, and the two targets on it: the deferloop call at
# least 1.5x cheaper than tokio's channel (the median of the five runs'
# ratios, each within one run), and no slow mode (the slowest of the five
# deferloop medians within 1.5x of their median). Prints markdown.
#
#   scripts/threadsafe_runs.sh [RUNS]      # default 5
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
prio=()
[ -n "${BENCH_NICE:-}" ] && prio=(nice -n "$BENCH_NICE")
cargo bench --bench loop --no-run >/dev/null 2>&1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$runs"); do
    # Kept out of the report's results file: this table's rows are there
    # once already, from the loop bench's own run.
    env -u DEFERLOOP_BENCH_RESULTS "${prio[@]}" cargo bench --bench loop -- threadsafe 2>/dev/null |
        awk -F'|' -v run="$i" '
            /^\| deferloop call_soon_threadsafe \|/ { d = $3; dr = $4 }
            /^\| tokio mpsc unbounded \|/ { t = $3; tr = $4 }
            END { gsub(/ /, "", d); gsub(/ /, "", t); gsub(/ /, "", dr); gsub(/ /, "", tr); print run, d, dr, t, tr }' >>"$out"
done
awk -v runs="$runs" '
function median(a, n,    i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
}
function verdict(ok) { return ok ? "met" : "**not met**" }
BEGIN {
    print "| run | deferloop call_soon_threadsafe ns/call (min–max) | tokio mpsc unbounded ns/call (min–max) | tokio / deferloop |"
    print "|---:|---:|---:|---:|"
}
{
    n++; d[n] = $2; t[n] = $4; r[n] = $4 / $2
    printf "| %d | %.1f (%s) | %.1f (%s) | %.2f× |\n", $1, $2, $3, $4, $5, r[n]
    if ($2 > dmax) dmax = $2
}
END {
    md = median(d, n); mt = median(t, n); mr = median(r, n)
    printf "| median | %.1f | %.1f | %.2f× |\n", md, mt, mr
    printf "\n- Target: threadsafe call at least 1.5x cheaper than tokio mpsc send+recv, median of %d runs of per-run ratios: measured %.2f× (needed 1.50×): %s\n", n, mr, verdict(mr >= 1.5)
    printf "- Target: threadsafe call without a slow mode, the slowest of %d runs within 1.5x their median: measured %.2f× (%.1f ns over %.1f ns; allowed 1.50×): %s\n", n, dmax / md, dmax, md, verdict(dmax / md <= 1.5)
}' "$out"
