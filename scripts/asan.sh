#!/usr/bin/env bash
# Runs the unit and integration tests (not the doc tests) built with
# AddressSanitizer, whose LeakSanitizer checks for leaks at each exit.
# Fails on any invalid access, use after free, double free, or leak.
#
#   scripts/asan.sh                   # every test target
#   scripts/asan.sh --test soak       # any `cargo test` target selection
#
# Stable Rust: -Zsanitizer is a nightly flag; RUSTC_BOOTSTRAP=1 lets the
# stable compiler take it (the sanitizer runtimes ship with the stable
# x86_64-unknown-linux-gnu toolchain). `--target` keeps the flag off build
# scripts and proc macros. A separate target dir: target/asan.
set -euo pipefail
cd "$(dirname "$0")/.."

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--lib --tests)
target=$(rustc -vV | sed -n 's/^host: //p')
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="${RUSTFLAGS:-} -Zsanitizer=address"
export CARGO_TARGET_DIR=target/asan
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# The soak's RSS bound does not hold under ASan (its quarantine keeps freed
# memory); its heap-byte bound still does.
export SOAK_RSS_SLACK_MIB=${SOAK_RSS_SLACK_MIB:-4096}
cargo test --target "$target" --no-fail-fast "${args[@]}"
