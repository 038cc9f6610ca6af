#!/usr/bin/env bash
# Regenerates BENCHMARKS.md and benchmarks.svg from one run of every benchmark:
# the loop and Deferred micro-benchmarks beside tokio, and the TCP
# echo comparison (deferloop callbacks, coroutines on deferloop, tokio, a
# hand-written mio server, and the Python peers when they install), then many
# idle connections beside tokio, and the cost per item as n grows (scale).
# About thirty minutes on 2 cores once built. Never edit the figures by hand:
# notes (causes, not numbers) go in scripts/bench_notes.md; before-and-after
# comparisons one run cannot repeat, copied from the programs' output at the
# commits they name, in scripts/bench_history.md (appended at the end).
#
# ECHO_SECONDS, ECHO_ROUNDS, ECHO_PY_SECONDS, ECHO_PY_ROUNDS shorten the echo
# run while developing (defaults 3, 7, 3, 3), as IDLE_ROUNDS (default 7) does the
# idle-connections one; commit only a default run.
# BENCH_PRIORITY=-10 (needs root) runs the benches at that nice value, so that
# other work on a shared machine takes less of their CPU; the report says so.
# BASELINE=COMMIT (default 34c40ee, the last report before the Deferred's
# speed-ups b827221 to 441b6b3; BASELINE=none skips it) also builds that commit in a worktree and
# runs its loop, Deferred and echo benches in the same run, each just
# before the current one: the "Before and after" section compares the two.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
start=$(date +%s)
work=target/bench-report
rm -rf "$work"
mkdir -p "$work"
export DEFERLOOP_BENCH_RESULTS="$PWD/$work/results.tsv"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

prio=()
niceness=$(nice)
if [ -n "${BENCH_PRIORITY:-}" ]; then
  if [ "$(nice -n "$BENCH_PRIORITY" nice 2>/dev/null)" = "$((niceness + BENCH_PRIORITY))" ]; then
    prio=(nice -n "$BENCH_PRIORITY")
    niceness=$((niceness + BENCH_PRIORITY))
  else
    echo "bench_report: cannot change the nice value by $BENCH_PRIORITY; running unchanged" >&2
  fi
fi

baseline=${BASELINE:-34c40ee}
[ "$baseline" = none ] && baseline=
# Outside this checkout, or cargo would take it for a member of this workspace.
base_dir=${BASELINE_DIR:-${TMPDIR:-/tmp}/deferloop-baseline}
if [ -n "$baseline" ]; then
  echo "bench_report: building the baseline $baseline" >&2
  # Kept between runs (with its build) while it is at the baseline commit.
  if [ "$(git -C "$base_dir" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$baseline^{commit}")" ]; then
    git worktree remove --force "$base_dir" 2>/dev/null || rm -rf "$base_dir"
    git worktree add --detach "$base_dir" "$baseline" >/dev/null 2>"$work/baseline-build.log"
  fi
  (cd "$base_dir" && cargo bench --no-run --bench loop --bench deferred --bench echo) \
    2>>"$work/baseline-build.log" ||
    { cat "$work/baseline-build.log" >&2; exit 1; }
fi
# Runs a baseline bench (if any), its results kept apart.
run_baseline() {
  [ -n "$baseline" ] || return 0
  echo "bench_report: baseline $baseline: $*" >&2
  (cd "$base_dir" && DEFERLOOP_BENCH_RESULTS="$here/$work/baseline.tsv" \
    "${prio[@]}" cargo bench "$@" 2>/dev/null >/dev/null)
}

echo "bench_report: building the benches" >&2
if ! cargo bench --features tls --no-run --bench loop --bench deferred --bench echo --bench idle --bench scale 2>"$work/build.log"; then
  cat "$work/build.log" >&2
  exit 1
fi
built=$(date +%s)

# The Python peers are optional: skipped, with the reason, if they cannot install.
if py=$(scripts/bench_python_env.sh 2>"$work/python.log"); then
  python=(--python "$py")
else
  python=(--no-python "$(tail -n 1 "$work/python.log")")
fi

run_baseline --bench loop
echo "bench_report: loop micro-benchmarks" >&2
"${prio[@]}" cargo bench --bench loop 2>/dev/null >"$work/loop.md"
echo "bench_report: threadsafe calls, five runs" >&2
BENCH_NICE="${prio[2]:-}" scripts/threadsafe_runs.sh 5 >"$work/threadsafe.md"
run_baseline --bench deferred
echo "bench_report: Deferred micro-benchmarks" >&2
"${prio[@]}" cargo bench --bench deferred 2>/dev/null >"$work/deferred.md"
ECHO_PY_ROUNDS=0 run_baseline --bench echo -- --no-python "baseline: Rust contenders only"
echo "bench_report: TCP echo" >&2
"${prio[@]}" cargo bench --features tls --bench echo -- "${python[@]}" --chart benchmarks.svg \
  >"$work/echo.md" 2> >(grep -v -E '^ *(Finished|Running)' >&2)
echo "bench_report: loop steps in instructions (callgrind)" >&2
scripts/loop_instructions.sh >"$work/steps.md"
echo "bench_report: ps's registry off and on in instructions (callgrind)" >&2
scripts/ps_cost.sh >"$work/ps_cost.md"
echo "bench_report: the 10-step chain, cross-thread calls and sources in instructions (callgrind)" >&2
scripts/chain_profile.sh >"$work/chain.md"
scripts/threadsafe_instructions.sh >"$work/threadsafe_instructions.md"
scripts/source_instructions.sh >"$work/sources.md"
echo "bench_report: costs as the work grows" >&2
"${prio[@]}" cargo bench --bench scale 2>/dev/null >"$work/scale.md"
scripts/scale_instructions.sh >"$work/scale_instructions.md"
echo "bench_report: many idle connections" >&2
"${prio[@]}" cargo bench --bench idle \
  >"$work/idle.md" 2> >(grep -v -E '^ *(Finished|Running)' >&2)
echo "bench_report: the simulation's speed" >&2
"${prio[@]}" cargo bench --features sim --bench sim 2>/dev/null >"$work/sim.md"

end=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Benchmarks"
  echo
  echo "Generated by \`scripts/bench_report.sh\` from one run; everything below the notes is the"
  echo "programs' own output, and [benchmarks.svg](benchmarks.svg) is drawn from the same figures."
  echo "Every table interleaves its contenders (A B A B …) and gives medians with min–max: the"
  echo "spread is this run's noise. Ratios compare contenders of the same run only."
  echo
  echo "- Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(uname -sr)"
  echo "- Load average (1, 5, 15 min): $load_before before, $load_after after; the benches ran at nice $niceness"
  echo "- Date: $(date -u +%Y-%m-%d)"
  echo "- Toolchain: $(rustc --version)"
  echo "- Commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches || echo ' plus uncommitted changes')"
  echo "- Commands: \`cargo bench --bench loop\`, \`cargo bench --bench deferred\`,"
  echo "  \`cargo bench --bench echo -- ${python[*]/#$PWD\//} --chart benchmarks.svg\`, \`cargo bench --bench idle\`,"
  echo "  \`cargo bench --bench scale\`, \`cargo bench --features sim --bench sim\`"
  echo "- Wall time: $((end - start)) s ($((built - start)) s building, $((end - built)) s benchmarking)"
  echo
  echo "![medians and min–max of every table](benchmarks.svg)"
  echo
  echo "## Targets"
  echo
  grep -h '^- Target:' "$work/echo.md" "$work/loop.md" "$work/threadsafe.md" "$work/deferred.md" \
    "$work/steps.md" "$work/ps_cost.md" "$work/scale.md" "$work/scale_instructions.md" || true
  grep -h '^- Beside tokio' "$work/idle.md" | sed 's/^- /- Many idle connections, not a target: /' || true
  echo
  cat scripts/bench_notes.md
  echo
  if [ -n "$baseline" ]; then
    echo "## Before and after: $baseline and $(git rev-parse --short HEAD), in this run"
    echo
    echo "Each baseline bench ran just before the current one. Ratios are within one"
    echo "program's run (its contender over the first contender of the same table),"
    echo "so they hold better than the absolute figures across the two programs."
    echo
    scripts/bench_compare.awk "$work/baseline.tsv" "$DEFERLOOP_BENCH_RESULTS"
    echo
  fi
  echo "## TCP echo: cargo bench --bench echo"
  cat "$work/echo.md"
  echo
  echo "## Many idle connections: cargo bench --bench idle"
  cat "$work/idle.md"
  echo
  echo "## Simulation: cargo bench --features sim --bench sim"
  echo
  cat "$work/sim.md"
  echo
  echo "## Costs as the work grows: cargo bench --bench scale"
  cat "$work/scale.md"
  echo
  echo "## Removal of a watched fd in instructions: scripts/scale_instructions.sh"
  echo
  cat "$work/scale_instructions.md"
  echo
  echo "## cargo bench --bench loop"
  cat "$work/loop.md"
  echo
  echo "## Threadsafe calls, five runs: scripts/threadsafe_runs.sh"
  echo
  cat "$work/threadsafe.md"
  echo
  echo "## cargo bench --bench deferred"
  cat "$work/deferred.md"
  echo
  echo "## Loop steps in instructions: scripts/loop_instructions.sh"
  echo
  cat "$work/steps.md"
  echo
  echo "## ps's registry off and on, in instructions: scripts/ps_cost.sh"
  echo
  cat "$work/ps_cost.md"
  echo
  echo "## The 10-step chain in instructions: scripts/chain_profile.sh"
  echo
  cat "$work/chain.md"
  echo
  echo "## Cross-thread calls in instructions: scripts/threadsafe_instructions.sh"
  echo
  cat "$work/threadsafe_instructions.md"
  echo
  echo "## Sources in instructions: scripts/source_instructions.sh"
  echo
  cat "$work/sources.md"
  echo
  cat scripts/bench_history.md
} >BENCHMARKS.md
echo "bench_report: wrote BENCHMARKS.md and benchmarks.svg in $((end - start)) s" >&2
