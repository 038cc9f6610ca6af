//! Diagnostics from outside the loop: `Monitor` (what a running loop holds right
//! now) and the blocked-loop watchdog. Owns `Monitor`, `Snapshot`, `CurrentCallback`.
//!
//! Both are off until asked for, and cost nothing until then. Once on, the loop
//! records the callback it is running (location and start time, under a mutex
//! no one else holds for long) and, at most every 10 ms, publishes a summary of
//! its queues at the start of step 6. A monitor or the watchdog, on another
//! thread, reads those; so a loop stuck inside one callback can be diagnosed
//! *while* it is stuck — asyncio's debug mode reports a slow callback only after
//! it returns. What the loop records and publishes is `published.rs`.
//! Tests: tests/loop_debug.rs, tests/threads_watchdog.rs.

use super::published::{IoInfo, TimerInfo};
use super::remote::CrossThread;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The callback a loop is running, in a [`Snapshot`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CurrentCallback {
    /// Where the callback was scheduled.
    pub scheduled_at: &'static Location<'static>,
    /// How long it has been running.
    pub running_for: Duration,
}

/// What a loop holds, as seen from any thread. See [`Loop::monitor`](crate::Loop::monitor).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Snapshot {
    /// When the loop last published its queues (`None`: not yet); the lists
    /// below are as of then, at most 10 ms before the current turn ran its callbacks.
    pub published_at: Option<Instant>,
    /// Turns completed by then.
    pub turns: u64,
    /// Callbacks in the ready queue.
    pub ready: usize,
    /// Where the first of them were scheduled (at most 100).
    pub ready_sites: Vec<&'static Location<'static>>,
    /// Pending timers.
    pub timer_count: usize,
    /// The earliest pending timers, soonest first (at most 100).
    pub timers: Vec<TimerInfo>,
    /// Registered I/O sources (at most 100).
    pub io_sources: Vec<IoInfo>,
    /// The callback running right now, read live.
    pub current: Option<CurrentCallback>,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.current {
            Some(c) => writeln!(
                f,
                "running callback scheduled at {} for {:?}",
                c.scheduled_at, c.running_for
            )?,
            None => writeln!(f, "not inside a callback")?,
        }
        let age = self.published_at.map(|t| t.elapsed());
        writeln!(
            f,
            "after {} turns (published {age:?} ago): {} ready, {} timers, {} I/O sources",
            self.turns,
            self.ready,
            self.timer_count,
            self.io_sources.len()
        )?;
        for site in &self.ready_sites {
            writeln!(f, "  ready: scheduled at {site}")?;
        }
        let now = Instant::now();
        for t in &self.timers {
            let due = t.deadline.saturating_duration_since(now);
            writeln!(
                f,
                "  timer: due in {due:?}, scheduled at {}",
                t.scheduled_at
            )?;
        }
        for io in &self.io_sources {
            writeln!(
                f,
                "  {}: read={} write={}, registered at {}",
                io.kind, io.interest.0, io.interest.1, io.registered_at
            )?;
        }
        Ok(())
    }
}

/// A `Send + Sync` window onto a loop, for diagnosing it from another thread.
#[derive(Clone)]
pub struct Monitor {
    pub(crate) shared: Arc<CrossThread>,
}

impl Monitor {
    /// What the loop holds now: the live current callback, and its queues as
    /// last published.
    pub fn snapshot(&self) -> Snapshot {
        let m = &self.shared.monitor;
        let p = m
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let current = m.current().map(|(loc, since)| CurrentCallback {
            scheduled_at: loc,
            running_for: since.elapsed(),
        });
        Snapshot {
            published_at: p.at,
            turns: p.turns,
            ready: p.ready,
            ready_sites: p.ready_sites,
            timer_count: p.timer_count,
            timers: p.timers,
            io_sources: p.io_sources,
            current,
        }
    }
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

/// Starts the watchdog thread: it logs (`log::warn!`) a callback that has been
/// running for `threshold`, while it still runs, then again each time the
/// time doubles; it ends when the loop is closed.
pub(crate) fn spawn_watchdog(shared: Arc<CrossThread>, threshold: Duration) -> std::io::Result<()> {
    shared.monitor.enable();
    let tick = (threshold / 4).clamp(Duration::from_millis(1), Duration::from_millis(50));
    std::thread::Builder::new()
        .name("deferloop-watchdog".into())
        .spawn(move || {
            let mut reported: Option<(Instant, Duration)> = None;
            loop {
                std::thread::sleep(tick);
                if shared.is_closed() {
                    return;
                }
                let Some((loc, since)) = shared.monitor.current() else {
                    reported = None;
                    continue;
                };
                let blocked = since.elapsed();
                let next = match reported {
                    Some((s, next)) if s == since => next,
                    _ => threshold,
                };
                if blocked >= next {
                    log::warn!(
                        scheduled_at:% = loc, blocked_ms = blocked.as_millis() as u64;
                        "deferloop: the loop has been blocked for {blocked:?} in a callback scheduled at {loc} (still running)"
                    );
                    reported = Some((since, next * 2));
                }
            }
        })?;
    Ok(())
}
