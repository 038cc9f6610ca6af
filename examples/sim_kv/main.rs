//! A seed search over a simulated primary/backup key-value store
//! (examples/sim_kv/kv.rs): finds a seed whose run loses an acknowledged
//! write, and replays one seed with its trace.
//!
//! ```text
//! cargo run --release --features sim --example sim_kv -- --naive --seeds 1000
//! cargo run --release --features sim --example sim_kv -- --naive --seed 3 --trace
//! cargo run --release --features sim --example sim_kv -- --seeds 1000
//! ```

mod kv;

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut naive = false;
    let mut seeds = 1000u64;
    let mut one = None;
    let mut show_trace = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--naive" => naive = true,
            "--trace" => show_trace = true,
            "--seeds" => seeds = args.next().and_then(|n| n.parse().ok()).unwrap_or(seeds),
            "--seed" => one = args.next().and_then(|n| n.parse().ok()),
            _ => {
                eprintln!("usage: sim_kv [--naive] [--seeds N | --seed S [--trace]]");
                return ExitCode::from(2);
            }
        }
    }
    let version = if naive { "naive" } else { "corrected" };
    if let Some(seed) = one {
        let run = kv::run(seed, naive);
        if show_trace {
            print!("{}", run.trace);
        }
        println!(
            "seed {seed} ({version}): crash at {:?}, {} writes acknowledged, lost {:?}, failed over: {}, done: {}",
            run.crash_at,
            run.outcome.acked.len(),
            run.outcome.lost,
            run.outcome.failed_over,
            run.outcome.done
        );
        return if run.failed() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let start = Instant::now();
    for seed in 0..seeds {
        let run = kv::run(seed, naive);
        if run.failed() {
            println!(
                "seed {seed} ({version}) loses acknowledged writes {:?} (crash at {:?}), found in {:.2?} after {} seeds",
                run.outcome.lost,
                run.crash_at,
                start.elapsed(),
                seed + 1
            );
            let flag = if naive { " --naive" } else { "" };
            println!(
                "replay: cargo run --release --features sim --example sim_kv --{flag} --seed {seed} --trace"
            );
            return ExitCode::FAILURE;
        }
    }
    println!(
        "{seeds} seeds ({version}): no acknowledged write lost, in {:.2?}",
        start.elapsed()
    );
    ExitCode::SUCCESS
}
