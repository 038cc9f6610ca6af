//! Counters a metrics exporter can poll: [`Loop::stats`] and [`Stats`].
//! Each counter is a `Cell` bumped where the event happens (a callback run,
//! bytes read or written on a stream connection, a connection made or
//! dropped); the snapshot adds the queue lengths the loop already keeps.
//! Nothing is allocated or locked. Tests: tests/loop_stats.rs.

use super::{Inner, Loop};
use std::cell::Cell;
use std::panic::Location;
use std::time::Duration;

/// The loop's running counts, bumped in place (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    conns_open: Cell<u64>,
    conns_opened: Cell<u64>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    callbacks: Cell<u64>,
    slow: Cell<u64>,
}

fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get().wrapping_add(n));
}

impl Counters {
    pub(crate) fn conn_opened(&self) {
        bump(&self.conns_open, 1);
        bump(&self.conns_opened, 1);
    }
    pub(crate) fn conn_dropped(&self) {
        self.conns_open.set(self.conns_open.get().saturating_sub(1));
    }
    pub(crate) fn received(&self, n: usize) {
        bump(&self.bytes_in, n as u64);
    }
    pub(crate) fn sent(&self, n: usize) {
        bump(&self.bytes_out, n as u64);
    }
    pub(crate) fn callback_ran(&self) {
        bump(&self.callbacks, 1);
    }
    pub(crate) fn slow_callback(&self) {
        bump(&self.slow, 1);
    }
}

/// A timed callback ran for `took`: a slow one is counted, and reported in
/// debug mode.
pub(super) fn timed(inner: &Inner, loc: &'static Location<'static>, took: Duration) {
    if took < inner.slow_callback.get() {
        return;
    }
    inner.counters.slow_callback();
    if inner.debug.get() {
        log::warn!(
            scheduled_at:% = loc, took_ms = took.as_millis() as u64;
            "deferloop: executing callback scheduled at {loc} took {took:.3?}"
        );
    }
}

/// A snapshot of a loop's counters, from [`Loop::stats`]: cheap to take
/// (a few loads, no allocation), so an exporter can poll it on a timer.
/// Totals only grow (they wrap at `u64::MAX`); the others are gauges.
///
/// Stream connections are TCP, Unix, TLS, adopted and in-memory ones, and a
/// child's pipes; bytes are what their protocols received and wrote
/// (plaintext under TLS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Stream connections registered now (connecting or open).
    pub connections_open: u64,
    /// Stream connections made since the loop was created (total).
    pub connections_opened: u64,
    /// Bytes read from stream connections (total).
    pub bytes_received: u64,
    /// Bytes written to stream connections' sockets (total).
    pub bytes_sent: u64,
    /// Timers waiting now.
    pub timers: u64,
    /// Callbacks in the ready queue now.
    pub ready: u64,
    /// Registered I/O sources now (connections, listeners, readers, ...).
    pub io_sources: u64,
    /// Callbacks run from the ready queue and the timers (total).
    pub callbacks_run: u64,
    /// Callbacks that ran at least the slow-callback threshold (total);
    /// counted while callbacks are timed: in debug mode, or while a
    /// [`Monitor`](crate::Monitor) or watchdog watches.
    pub slow_callbacks: u64,
    /// Turns the loop has run (total).
    pub turns: u64,
}

impl Loop {
    /// The loop's counters now: connections, bytes, timers, ready-queue
    /// depth, callbacks run and slow ones. See [`Stats`].
    ///
    /// # Examples
    /// ```
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// let ev = EventLoop::new()?;
    /// ev.call_soon(|_| {})?;
    /// ev.call_later(Duration::from_secs(60), |_| {})?;
    /// let before = ev.stats();
    /// assert_eq!((before.ready, before.timers), (1, 1));
    /// ev.run_once()?;
    /// assert_eq!(ev.stats().callbacks_run, before.callbacks_run + 1);
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        Stats {
            connections_open: c.conns_open.get(),
            connections_opened: c.conns_opened.get(),
            bytes_received: c.bytes_in.get(),
            bytes_sent: c.bytes_out.get(),
            timers: self.timer_count() as u64,
            ready: self.ready_len() as u64,
            io_sources: self.io_source_count() as u64,
            callbacks_run: c.callbacks.get(),
            slow_callbacks: c.slow.get(),
            turns: self.turn_count(),
        }
    }

    /// The counters, for the places that bump them.
    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }
}
