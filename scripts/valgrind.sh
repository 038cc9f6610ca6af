#!/usr/bin/env bash
# Runs test binaries under valgrind's memcheck and fails on any invalid
# memory access, use of uninitialised memory, or definite leak.
#
#   scripts/valgrind.sh                       # the CI set (below)
#   scripts/valgrind.sh --test loop_order     # any `cargo test` target selection
#
# The CI set: the unit tests (src/), every tests/deferred_*.rs, and the two
# model tests of the loop — the code with `unsafe` (node.rs's inline values,
# links.rs, reactor/callback.rs's inline callbacks)
# and the code most of the rest is built on; then the connection core over
# the in-memory transport (net_memory, net_flow_control) and the fault tests
# (net_faults), and the signal tests (signal_*). The other network tests and
# the process tests are left out (RELIABILITY.md says why and what they would
# cost): over sockets valgrind runs them 20-140x slower, past their waits;
# valgrind has no pidfd_open, so the process tests would not test the code
# that runs. Tests that assert wall-clock bounds are left out too. Model tests run
# PROPTEST_CASES=100 cases here unless told otherwise; VALGRIND_JOBS (2)
# binaries run at once. Logs: target/valgrind/<binary>.{log,out}.
#
# Skipped under valgrind: the two `value_type_mismatch_is_a_clear_bug_*` unit
# tests. They provoke the panic of a deferloop bug (a Deferred value taken as
# the wrong type), on which `Value::take` deliberately leaks the value rather
# than drop it while unwinding (see node.rs); that leak is the behaviour they
# pin, not a defect. Every other test runs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null; then
    echo "valgrind is not installed (Debian: apt-get install valgrind)" >&2
    exit 1
fi
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
    args=(--lib --test 'deferred_*' --test timers_model --test loop_snapshot_model
        --test net_memory --test net_flow_control --test net_faults --test 'signal_*')
fi
export PROPTEST_CASES=${PROPTEST_CASES:-100}
jobs=${VALGRIND_JOBS:-2}

rm -rf target/valgrind
mkdir -p target/valgrind
bins=$(cargo test --no-run "${args[@]}" --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4)
[ -n "$bins" ] || { echo "no test binaries built for: ${args[*]}" >&2; exit 1; }

# One binary: its summary line goes to <name>.summary, "ok" or "FAILED" first.
run_one() {
    local bin=$1 name log out start status=0 secs tests errors lost
    name=$(basename "$bin" | sed 's/-[0-9a-f]*$//')
    log=target/valgrind/$name.log
    out=target/valgrind/$name.out
    start=$(date +%s)
    valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite --log-file="$log" "$bin" -q \
        --skip value_type_mismatch_is_a_clear_bug >"$out" 2>&1 || status=$?
    secs=$(($(date +%s) - start))
    tests=$(grep -o 'test result: [a-z]*\. [0-9]* passed' "$out" | awk '{s += $4} END {print s + 0}')
    errors=$(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log" | awk '{print $3}')
    lost=$(grep -o 'definitely lost: [0-9,]* bytes' "$log" | awk '{print $3}')
    if [ "$status" = 0 ]; then
        echo "ok $name: $tests tests, ${errors:-0} errors, definitely lost ${lost:-0} bytes, ${secs}s" \
            >"target/valgrind/$name.summary"
    else
        echo "FAILED $name: exit $status, ${errors:-?} errors, definitely lost ${lost:-0} bytes" \
            >"target/valgrind/$name.summary"
    fi
}
export -f run_one

printf '%s\n' $bins | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}

failed=0
total=0
for s in target/valgrind/*.summary; do
    line=$(cat "$s")
    echo "valgrind ${line#* }" | sed "s/^valgrind \([^:]*\):/valgrind \1: ${line%% *},/"
    name=$(basename "$s" .summary)
    total=$((total + $(grep -o 'test result: [a-z]*\. [0-9]* passed' "target/valgrind/$name.out" |
        awk '{s += $4} END {print s + 0}')))
    if [ "${line%% *}" != ok ]; then
        failed=1
        tail -n 40 "target/valgrind/$name.out"
        grep -A 30 -m 3 'Invalid\|uninitialised\|definitely lost in' "target/valgrind/$name.log" || true
    fi
done
echo "valgrind: $total tests in $(echo "$bins" | wc -w) binaries, PROPTEST_CASES=$PROPTEST_CASES, $([ $failed = 0 ] && echo clean || echo FAILED)"
exit "$failed"
