//! The load client's latency histogram, as vmbench's `echo_client` keeps it:
//! 10 µs buckets over 2 s (a slower reply lands in the last bucket), and
//! percentiles by weighted interpolation over the non-empty buckets.

use std::time::Duration;

/// Width of one bucket.
pub const BUCKET: Duration = Duration::from_micros(10);
/// Buckets kept: 2 s of 10 µs.
pub const BUCKETS: usize = 200_000;

/// Counts of round trips per 10 µs of latency.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS + 1],
            total: 0,
        }
    }
}

impl Histogram {
    /// Records one latency: bucket `round(latency / 10 µs)`, as vmbench does.
    pub fn record(&mut self, latency: Duration) {
        let i = ((latency.as_nanos() + 5_000) / 10_000) as usize;
        self.counts[i.min(BUCKETS)] += 1;
        self.total += 1;
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Round trips recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (0 ≤ q ≤ 1) in milliseconds, by weighted interpolation:
    /// each non-empty bucket sits at its cumulative weight minus half its own,
    /// normalised to 0..1, and `q` is interpolated linearly between them
    /// (numpy's `interp` over vmbench's `weighted_quantile`). `None` if empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let total = self.total as f64;
        let mut prev: Option<(f64, f64)> = None; // (position, value in ms)
        let mut cum = 0.0;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let w = c as f64;
            cum += w;
            let pos = (cum - 0.5 * w) / total;
            let value = i as f64 * 0.01;
            if pos >= q {
                return Some(match prev {
                    None => value,
                    Some((p0, v0)) => v0 + (value - v0) * (q - p0) / (pos - p0),
                });
            }
            prev = Some((pos, value));
        }
        prev.map(|(_, v)| v)
    }

    /// Mean latency in milliseconds (bucket values), `None` if empty.
    pub fn mean_ms(&self) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let sum: f64 = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, &c)| i as f64 * 0.01 * c as f64)
            .sum();
        Some(sum / self.total as f64)
    }
}

/// Checks the percentiles against values worked out by hand; run by the echo
/// bench's smoke (`cargo test`), since benches have no test harness.
pub fn selftest() {
    let ms = |m: f64| Duration::from_secs_f64(m / 1000.0);
    let mut h = Histogram::default();
    assert_eq!(h.quantile_ms(0.5), None);
    h.record(ms(0.1));
    assert_eq!(h.quantile_ms(0.0), Some(0.1));
    assert_eq!(h.quantile_ms(0.99), Some(0.1));
    // Two equal buckets at 0.1 and 0.3 ms sit at positions 0.25 and 0.75.
    h.record(ms(0.3));
    let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
    assert!(close(h.quantile_ms(0.5), 0.2));
    assert!(close(h.quantile_ms(0.25), 0.1));
    assert!(
        close(h.quantile_ms(0.1), 0.1),
        "below the first position: the first value"
    );
    assert!(
        close(h.quantile_ms(0.9), 0.3),
        "past the last position: the last value"
    );
    assert!(close(h.mean_ms(), 0.2));
    // 98 fast round trips (position 0.49) and 2 slow ones (0.99): p99 is the
    // slow value, and p50 interpolates a little way towards it.
    let mut h = Histogram::default();
    for _ in 0..98 {
        h.record(ms(0.05));
    }
    let mut slow = Histogram::default();
    slow.record(ms(5.0));
    slow.record(ms(5.0));
    h.merge(&slow);
    assert_eq!(h.count(), 100);
    assert!(close(h.quantile_ms(0.49), 0.05));
    assert!(close(h.quantile_ms(0.5), 0.05 + 4.95 * 0.01 / 0.5));
    assert!(close(h.quantile_ms(0.99), 5.0));
    // Rounding to the nearest bucket, and the overflow bucket.
    let mut h = Histogram::default();
    h.record(Duration::from_nanos(14_999));
    assert!(close(h.quantile_ms(0.5), 0.01));
    h.record(Duration::from_secs(10));
    assert!(close(h.quantile_ms(1.0), 2000.0));
}
