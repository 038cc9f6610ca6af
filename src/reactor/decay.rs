//! How long a buffer keeps room for a past burst: the most it held recently,
//! halved once per [`DECAY`] of loop time. Owns `Peak`. Used by the ready
//! queue and the remote queue's buffers (step 1 of a turn).
//!
//! Time, not turns: a loop that turns thousands of times a second (a trickle
//! of calls, each its own turn) would otherwise forget a burst within
//! microseconds, free its buffers, and fault fresh pages in for the next
//! one; jemalloc's `dirty_decay_ms` makes the same choice. An idle loop
//! still gives the memory back: while a buffer holds more than it keeps,
//! the turn's poll waits at most `DECAY` (turn.rs, step 2). Tests: below,
//! ready.rs, turn.rs.

use std::time::{Duration, Instant};

/// How long a burst's size is remembered at full height.
pub(crate) const DECAY: Duration = Duration::from_millis(100);

/// The most a buffer needed recently, and since when.
#[derive(Default, Debug)]
pub(crate) struct Peak {
    most: usize,
    /// When `most` was last raised or halved.
    since: Option<Instant>,
    /// The use noted last, until [`room`](Self::room) takes it.
    last: usize,
}

impl Peak {
    /// Notes that `used` was needed; reads the clock only if it raises the
    /// peak.
    #[inline]
    pub(crate) fn note(&mut self, used: usize, now: impl FnOnce() -> Instant) {
        self.last = used;
        if used > self.most {
            self.most = used;
            self.since = Some(now());
        }
    }

    /// Halves the peak once per [`DECAY`] since it was last raised or
    /// halved, and returns it.
    pub(crate) fn decay(&mut self, now: Instant) -> usize {
        let Some(since) = self.since else {
            return self.most;
        };
        let periods = now.saturating_duration_since(since).as_nanos() / DECAY.as_nanos();
        if periods >= 64 {
            self.most = 0;
            self.since = Some(now);
        } else if periods > 0 {
            self.most >>= periods;
            // What is left of a period counts toward the next one.
            self.since = Some(since + DECAY * periods as u32);
        }
        self.most
    }

    /// What to keep room for: the decayed peak, and at least the use noted
    /// since the last call, however long ago the peak was raised (turns a
    /// `DECAY` apart halve each burst before the next trim sees it).
    pub(crate) fn room(&mut self, now: Instant) -> usize {
        self.decay(now).max(std::mem::take(&mut self.last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_halves_per_period_of_time_not_per_call() {
        let t0 = Instant::now();
        let mut p = Peak::default();
        assert_eq!(p.decay(t0), 0, "nothing noted");
        p.note(1000, || t0);
        for _ in 0..100 {
            assert_eq!(p.decay(t0 + DECAY / 2), 1000, "within a period");
        }
        assert_eq!(p.decay(t0 + DECAY), 500);
        assert_eq!(p.decay(t0 + DECAY + DECAY / 2), 500);
        assert_eq!(p.decay(t0 + 3 * DECAY), 125, "two periods at once");
        assert_eq!(p.decay(t0 + 6 * DECAY), 15);
        // Calls a little less than a period apart still halve once a period.
        let mut q = Peak::default();
        q.note(1 << 20, || t0);
        let mut t = t0;
        for _ in 0..20 {
            t += DECAY * 99 / 100;
            q.decay(t);
        }
        assert_eq!(q.decay(t), 1 << (20 - 19), "19 periods in 19.8");
        p.note(10, || unreachable!("a lower use reads no clock"));
        p.note(40, || t0 + 6 * DECAY);
        assert_eq!(p.decay(t0 + 6 * DECAY), 40, "raised: full height again");
        assert_eq!(p.decay(t0 + 1000 * DECAY), 0, "long past: nothing kept");
        p.note(8, || t0 + 1000 * DECAY);
        assert_eq!(
            p.room(t0 + 1001 * DECAY),
            8,
            "the last use, whatever the decay"
        );
        assert_eq!(p.room(t0 + 1001 * DECAY), 4, "taken once");
    }
}
