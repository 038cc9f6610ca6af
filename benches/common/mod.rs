//! A small interleaved benchmark harness: contenders run A B A B … so drift on a
//! shared machine hits both; reported as per-operation medians, min–max, and the
//! ratio to the first contender, all from one run.
#![allow(dead_code)]

use std::time::Instant;

/// Whether we were started by `cargo bench` (full run) or `cargo test` (smoke).
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub struct Contender<'a> {
    pub name: &'a str,
    /// Runs `ops` operations once.
    pub run: Box<dyn FnMut(u64) + 'a>,
}

/// Runs every contender `rounds` times, interleaved, and prints a table row each.
pub fn compare(title: &str, ops: u64, contenders: &mut [Contender<'_>]) -> Vec<f64> {
    let (ops, rounds) = if full_run() {
        (ops, 11)
    } else {
        (ops.clamp(1, 100), 1)
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for c in contenders.iter_mut() {
        (c.run)(ops.min(1000)); // warm-up
    }
    for _ in 0..rounds {
        for (i, c) in contenders.iter_mut().enumerate() {
            let t0 = Instant::now();
            (c.run)(ops);
            samples[i].push(t0.elapsed().as_nanos() as f64 / ops as f64);
        }
    }
    println!("\n### {title}\n");
    println!("{ops} operations per sample, {rounds} samples each, interleaved.\n");
    println!(
        "| contender | median ns/op | min–max ns/op | ratio to {} |",
        contenders[0].name
    );
    println!("|---|---:|---:|---:|");
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    for (i, c) in contenders.iter().enumerate() {
        let s = &samples[i];
        println!(
            "| {} | {:.1} | {:.1}–{:.1} | {:.2}× |",
            c.name,
            medians[i],
            s.first().unwrap(),
            s.last().unwrap(),
            medians[i] / medians[0]
        );
    }
    medians
}

/// Prints whether `ours` is at least `factor` times cheaper than `theirs`
/// (a factor below 1 allows ours to be that much slower).
pub fn target(what: &str, ours: f64, theirs: f64, factor: f64) {
    let ratio = theirs / ours;
    let verdict = if ratio >= factor {
        "met"
    } else {
        "**not met**"
    };
    println!("\n- Target: {what}: measured {ratio:.2}× (needed {factor:.2}×): {verdict}");
}

fn median(s: &mut [f64]) -> f64 {
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[s.len() / 2]
}
