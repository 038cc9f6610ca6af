//! A small interleaved benchmark harness: contenders run A B A B … so drift on a
//! shared machine hits both; reported as per-operation medians, min–max, and the
//! ratio to the first contender, all from one run.
//!
//! With `DEFERLOOP_BENCH_RESULTS=FILE` set, every table row and target verdict is
//! also appended to FILE as one tab-separated line (see [`record`]), for the chart
//! that `scripts/bench_report.sh` draws (`svg.rs`).
#![allow(dead_code)]

pub mod coro;
pub mod hist;
pub mod svg;

use std::io::Write;
use std::time::Instant;

/// The server-process side of the echo and idle benches (`BENCH server NAME`):
/// a thread answers each line read from standard input with one line that
/// `stats` writes, and exits the process when standard input closes, so a
/// server never outlives its harness. Call, then serve with [`print_bound`].
///
/// `stats` writes straight into the locked standard output: the answer must
/// not allocate, or the allocation counts it reports would count it.
pub fn answer_stdin(stats: impl Fn(&mut dyn Write) -> std::io::Result<()> + Send + 'static) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::with_capacity(64);
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(_) => {
                    let mut out = std::io::stdout().lock();
                    let _ = stats(&mut out)
                        .and_then(|()| writeln!(out))
                        .and_then(|()| out.flush());
                }
            }
        }
    });
}

/// Tells the harness where a server listens: its first line of output.
pub fn print_bound(addr: std::net::SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{addr}");
    let _ = out.flush();
}

/// Whether we were started by `cargo bench` (full run) or `cargo test` (smoke).
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub struct Contender<'a> {
    pub name: &'a str,
    /// Runs `ops` operations once.
    pub run: Box<dyn FnMut(u64) + 'a>,
}

/// The filter given after `--` (`cargo bench --bench loop -- timers`): only
/// sections whose title contains it run. None: all run.
pub fn filter() -> Option<String> {
    std::env::args().skip(1).find(|a| !a.starts_with('-'))
}

/// Runs every contender `rounds` times, interleaved, and prints a table row each.
/// A section the filter leaves out runs nothing and measures NaN (which
/// [`target`] skips).
pub fn compare(title: &str, ops: u64, contenders: &mut [Contender<'_>]) -> Vec<f64> {
    if filter().is_some_and(|f| !title.contains(&f)) {
        return vec![f64::NAN; contenders.len()];
    }
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
        record_value(
            title,
            c.name,
            "ns/op",
            Better::Lower,
            medians[i],
            s[0],
            s[s.len() - 1],
        );
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
    if ours.is_nan() || theirs.is_nan() {
        return;
    }
    let ratio = theirs / ours;
    let verdict = if ratio >= factor {
        "met"
    } else {
        "**not met**"
    };
    let shown = shown(ratio, factor);
    println!("\n- Target: {what}: measured {shown}× (needed {factor:.2}×): {verdict}");
    record(&["target", what, &shown, &format!("{factor:.2}"), verdict]);
}

/// Prints whether `ours` costs at most `limit` times `theirs` (for "no more
/// than 1.10× the floor" targets).
pub fn target_at_most(what: &str, ours: f64, theirs: f64, limit: f64) {
    if ours.is_nan() || theirs.is_nan() {
        return;
    }
    let ratio = ours / theirs;
    let verdict = if ratio <= limit { "met" } else { "**not met**" };
    let shown = shown(ratio, limit);
    println!("\n- Target: {what}: measured {shown}× (allowed {limit:.2}×): {verdict}");
    record(&["target", what, &shown, &format!("<={limit:.2}"), verdict]);
}

/// Prints whether `ours`, a median in ns per operation, is at most `limit_ns`
/// (for targets stated as a time rather than a ratio).
pub fn target_ns(what: &str, ours: f64, limit_ns: f64) {
    if ours.is_nan() {
        return;
    }
    let verdict = if ours <= limit_ns {
        "met"
    } else {
        "**not met**"
    };
    println!("\n- Target: {what}: measured {ours:.1} ns (allowed {limit_ns:.0} ns): {verdict}");
    record(&[
        "target",
        what,
        &format!("{ours:.1} ns"),
        &format!("<={limit_ns:.0} ns"),
        verdict,
    ]);
}

/// `ratio` to two decimals, or three when two would print the threshold
/// itself (so "1.10× (allowed 1.10×): not met" cannot happen).
pub fn shown(ratio: f64, threshold: f64) -> String {
    if (ratio - threshold).abs() < 0.005 {
        format!("{ratio:.3}")
    } else {
        format!("{ratio:.2}")
    }
}

/// Which way a measurement improves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Better {
    Lower,
    Higher,
}

/// Records one table row: `value`, section, contender, unit, better, median, min, max.
#[allow(clippy::too_many_arguments)]
pub fn record_value(
    section: &str,
    contender: &str,
    unit: &str,
    better: Better,
    median: f64,
    min: f64,
    max: f64,
) {
    let better = match better {
        Better::Lower => "lower",
        Better::Higher => "higher",
    };
    record(&[
        "value",
        section,
        contender,
        unit,
        better,
        &median.to_string(),
        &min.to_string(),
        &max.to_string(),
    ]);
}

/// Appends `fields` as one tab-separated line to `$DEFERLOOP_BENCH_RESULTS`, if set.
pub fn record(fields: &[&str]) {
    let Some(path) = std::env::var_os("DEFERLOOP_BENCH_RESULTS") else {
        return;
    };
    let line: Vec<String> = fields
        .iter()
        .map(|f| f.replace(['\t', '\n'], " "))
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the results file");
    writeln!(f, "{}", line.join("\t")).expect("write the results file");
}

/// Median, min and max of `s` (sorted in place).
pub fn summary(s: &mut [f64]) -> (f64, f64, f64) {
    let m = median(s);
    (m, s[0], s[s.len() - 1])
}

/// The median of `s` (sorted in place): the middle sample, or the mean of
/// the two middle ones for an even count.
fn median(s: &mut [f64]) -> f64 {
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}
