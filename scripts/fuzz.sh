#!/usr/bin/env bash
# Fuzzes the targets in fuzz/ (cargo-fuzz, libFuzzer) with AddressSanitizer
# and LeakSanitizer, each for SECONDS (default 30: the CI smoke run).
#
#   scripts/fuzz.sh                      # every target, 30 s each
#   scripts/fuzz.sh 3600 line_decoder    # one target, an hour
#
# Stable Rust: cargo-fuzz's instrumentation flags are stable, but
# `-Zsanitizer=address` is not; RUSTC_BOOTSTRAP=1 lets the stable compiler
# take it (RELIABILITY.md says why this was chosen). FUZZ_SANITIZER=none
# fuzzes without a sanitizer (faster, and needs no RUSTC_BOOTSTRAP).
# The corpus grows in fuzz/corpus/<target> (not committed); the seeds in
# fuzz/seeds/<target> are read too. A crash fails the script and leaves
# its input in fuzz/artifacts/<target>/ (reproduce: the command printed).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-30}
shift || true
targets=("$@")
# Inputs that once failed sit among the seeds (fuzz/seeds/<target>/crash-*),
# so every run replays them first.
[ ${#targets[@]} -gt 0 ] || targets=(line_decoder length_decoder deferred_ops stream_reads
    framing_dispatch write_buffer deferred_lists http_request udp_dispatch)
sanitizer=${FUZZ_SANITIZER:-address}

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi
if [ "$sanitizer" != none ]; then
    export RUSTC_BOOTSTRAP=1
fi

cargo fuzz build --sanitizer "$sanitizer"
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log=$(mktemp)
    echo "== fuzz $t: ${secs}s, sanitizer $sanitizer"
    status=0
    cargo fuzz run --sanitizer "$sanitizer" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    if [ "$status" != 0 ]; then
        tail -n 60 "$log"
        echo "== fuzz $t: FAILED (input in fuzz/artifacts/$t/)"
        exit 1
    fi
    runs=$(grep -h 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -hE '(DONE|pulse|NEW|REDUCE) +cov:' "$log" | tail -n 1 | grep -o 'cov: [0-9]*' | cut -d' ' -f2 || true)
    rss=$(grep -h 'stat::peak_rss_mb' "$log" | awk '{print $2}')
    echo "== fuzz $t: ok, $runs runs in ${secs}s, ${cov:-?} coverage edges, corpus $(ls "fuzz/corpus/$t" | wc -l) inputs, peak RSS ${rss} MB"
    rm -f "$log"
done
