//! Embedding: a host loop (a GUI toolkit's, calloop, a tokio runtime, another
//! deferloop) drives this one, as libuv's `uv_backend_fd`, `uv_backend_timeout`
//! and `uv_run(UV_RUN_NOWAIT)` let it. Owns `AsFd`/`AsRawFd` on the loop,
//! [`Loop::timeout`] and [`Loop::run_once_timeout`].
//! Tests: tests/loop_embed.rs, tests/examples_embed.rs.
//!
//! The fd is the selector's own (epoll, kqueue), which is itself pollable: it
//! is readable while a registered source is ready, and the remote queue's
//! waker makes it readable on a call from another thread. What the selector
//! cannot show — callbacks already queued, a pending stop, the next timer —
//! is in the timeout. Work scheduled on the loop *between* turns (a
//! `call_soon` from host code, a timer, a transport's write, `stop()`) wakes
//! the fd through the same waker once a host has asked for the fd, so a host
//! asleep on the fd and an old timeout hears of it. Inside a turn no wake is
//! made: the next step 2 sees the work.

use super::run::RunGuard;
use super::{EventLoop, Inner, Loop};
use crate::Error;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

impl Inner {
    /// Makes the poll fd readable if a host watches it and no turn is running
    /// (one `eventfd` write per burst: the remote queue's wake is coalesced).
    #[inline(always)]
    pub(super) fn wake_host(&self) {
        if self.watched.get() && !self.running.get() {
            self.shared.wake();
        }
    }

    /// Recomputes `push_check` after `closed`, `watched` or `running` changed.
    pub(super) fn refresh_push_check(&self) {
        let closed = self.closed.get();
        self.push_check
            .set(closed || (self.watched.get() && !self.running.get()));
    }

    /// The rare part of a push: the loop is closed, or a host must be woken.
    #[cold]
    #[inline(never)]
    pub(super) fn checked_push(&self) -> Result<(), Error> {
        self.check_open()?;
        self.wake_host();
        Ok(())
    }
}

impl Loop {
    /// How long a host may wait on the loop's fd before the loop needs a turn:
    /// `Some(ZERO)` while callbacks are queued, a stop is pending, or the loop
    /// is closed (the turn then says [`Error::Closed`]); else until the
    /// earliest timer (at most 24 h); `None` if only the fd can bring work.
    /// At most 100 ms while a past burst's buffer room waits to be given
    /// back (reactor/decay.rs): a few more turns after a burst.
    ///
    /// It is exact (a host whose clock counts whole milliseconds rounds it
    /// *up*, or it wakes early and finds the timer not yet due), except with
    /// more than 32 timers in the timer wheel's earliest slot: then it is that
    /// slot's start, and the turn there files them finer (timers/mod.rs).
    pub fn timeout(&self) -> Option<Duration> {
        if self.inner.closed.get() {
            return Some(Duration::ZERO);
        }
        self.inner.poll_timeout(None)
    }

    /// Runs one turn (the six steps once) whose poll waits at most `max_wait`
    /// — less if the loop has work or a timer due sooner; `ZERO` never waits.
    /// Returns whether [`stop`](Self::stop) was called: the host should stop
    /// driving the loop then.
    ///
    /// Unlike [`run_once`](Self::run_once) it may be called from a callback of
    /// *another* loop on this thread (a deferloop hosting this one); inside
    /// the turn [`Loop::current`] is this loop. A [`Remote::call_blocking`]
    /// made between turns waits for the next ones, until a turn ends stopped.
    ///
    /// # The host's side
    /// ```text
    /// let fd = lp.as_raw_fd();      // once: readable when there is I/O, a remote
    ///                               // call, or work scheduled between turns
    /// loop {
    ///     if lp.run_once_timeout(Duration::ZERO)? { break }   // stopped
    ///     wait until fd is readable, at most lp.timeout()     // None: no limit
    /// }
    /// ```
    /// The fd is level-triggered: it stays readable until a turn has polled.
    /// A host that watches it edge-triggered (tokio's `AsyncFd`) clears its
    /// readiness *before* the turn, never after. Host code may call into the
    /// loop between turns (schedule, write, stop); callbacks run only in turns.
    ///
    /// # Errors
    /// [`Error::Closed`]; [`Error::Running`] from inside this loop's own turn;
    /// a selector error.
    ///
    /// [`Remote::call_blocking`]: super::Remote::call_blocking
    pub fn run_once_timeout(&self, max_wait: Duration) -> Result<bool, Error> {
        let guard = RunGuard::enter(self, true)?;
        self.inner.watched.set(true);
        self.inner.refresh_push_check();
        self.inner.turn(self, Some(max_wait))?;
        let stopped = self.inner.stopping.get();
        drop(guard);
        Ok(stopped)
    }

    fn poll_fd(&self) -> BorrowedFd<'_> {
        self.inner.watched.set(true);
        self.inner.refresh_push_check();
        // SAFETY: the descriptor belongs to the `mio::Poll` in `Inner`, which
        // is created with it and dropped only with `Inner` (closing the loop
        // keeps it); `self` holds an `Rc<Inner>`, so it stays open for the
        // borrow's lifetime. Tests: tests/loop_embed.rs.
        unsafe { BorrowedFd::borrow_raw(self.inner.poll_fd) }
    }
}

/// The selector's descriptor: readable when the loop has I/O, a remote call,
/// or work scheduled between turns to handle (see
/// [`Loop::run_once_timeout`]). Asking for it tells the loop a host watches.
impl AsFd for Loop {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.poll_fd()
    }
}

/// As [`AsFd`]: the selector's descriptor, for hosts that take a raw one.
impl AsRawFd for Loop {
    fn as_raw_fd(&self) -> RawFd {
        self.poll_fd().as_raw_fd()
    }
}

/// The loop's descriptor (see [`Loop`]'s `AsFd`).
impl AsFd for EventLoop {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.lp.poll_fd()
    }
}

/// The loop's descriptor (see [`Loop`]'s `AsFd`).
impl AsRawFd for EventLoop {
    fn as_raw_fd(&self) -> RawFd {
        self.lp.poll_fd().as_raw_fd()
    }
}
