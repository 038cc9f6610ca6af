//! What a loop records for whoever watches it from another thread (a
//! [`Monitor`](super::Monitor), the blocked-loop watchdog): the callback it
//! runs now, and a summary of its queues published at most every
//! [`PUBLISH_EVERY`]. Owns `MonitorState`, `Published`, [`TimerInfo`],
//! [`IoInfo`]. Held in the loop's `CrossThread` (`remote.rs`), read by
//! `monitor.rs`. Tests: tests/loop_debug.rs, tests/threads_watchdog.rs.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the loop publishes its summary, at most.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_millis(10);
/// How many timers and ready callbacks a snapshot lists (the counts are exact).
pub(crate) const LIST_AT_MOST: usize = 100;

#[derive(Default)]
pub(crate) struct MonitorState {
    pub(crate) enabled: AtomicBool,
    pub(crate) current: Mutex<Option<(&'static Location<'static>, Instant)>>,
    pub(crate) published: Mutex<Published>,
}

#[derive(Default, Clone)]
pub(crate) struct Published {
    pub(crate) at: Option<Instant>,
    pub(crate) turns: u64,
    pub(crate) ready: usize,
    pub(crate) ready_sites: Vec<&'static Location<'static>>,
    pub(crate) timer_count: usize,
    pub(crate) timers: Vec<TimerInfo>,
    pub(crate) io_sources: Vec<IoInfo>,
}

impl MonitorState {
    pub(crate) fn set_current(&self, now: Option<(&'static Location<'static>, Instant)>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = now;
    }

    pub(crate) fn current(&self) -> Option<(&'static Location<'static>, Instant)> {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }
}

/// One pending timer in a [`Snapshot`](super::Snapshot).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TimerInfo {
    /// When it is due.
    pub deadline: Instant,
    /// Where it was scheduled.
    pub scheduled_at: &'static Location<'static>,
}

/// One registered I/O source in a [`Snapshot`](super::Snapshot).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IoInfo {
    /// What it is: `"reader"`, `"tcp"`, `"listener"`, …
    pub kind: &'static str,
    /// Whether it is waiting to read, and to write.
    pub interest: (bool, bool),
    /// Where it was registered.
    pub registered_at: &'static Location<'static>,
}
