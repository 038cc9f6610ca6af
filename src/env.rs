//! What a new loop takes from the environment: the public constructors
//! [`EventLoop::new`] and [`EventLoop::with_manual_clock`], which make the
//! reactor's loop and then hand it to the layers above the reactor that read
//! a variable (`DEFERLOOP_PS`, see [`crate::ps`]). Here, above both, so that
//! the reactor never imports them. (`DEFERLOOP_DEBUG` is the reactor's own.)
//! Tests: tests/ps_env.rs.

use crate::{EventLoop, ManualClock};

impl EventLoop {
    /// Creates a loop with its own selector.
    ///
    /// Debug mode starts on if the environment variable `DEFERLOOP_DEBUG` is
    /// set to anything but `0` or the empty string; `DEFERLOOP_PS` (`1` or
    /// `serve`) turns [`ps`](crate::ps) on.
    ///
    /// # Errors
    /// The selector or its waker could not be created (file descriptor limit).
    pub fn new() -> std::io::Result<EventLoop> {
        EventLoop::with_time(None).inspect(from_env)
    }

    /// Creates a loop whose time is `clock`'s: it stands still until the
    /// test calls [`ManualClock::advance`], so `call_later` and everything
    /// built on it (timeouts, `LoopingCall`, accept back-off, idle timeouts,
    /// lingering closes) is tested without sleeping (Twisted's `task.Clock`,
    /// for a whole loop).
    ///
    /// A turn never waits for a timer: it runs the timers due by the clock's
    /// time, and otherwise waits only for I/O and wake-ups, as a loop with no
    /// timers does. So advance the clock, then run a turn.
    ///
    /// # Examples
    /// ```
    /// use deferloop::{EventLoop, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let ev = EventLoop::with_manual_clock(clock.clone())?;
    /// let d = deferloop::defer_later(&ev.to_loop(), Duration::from_secs(3600), || Ok(42));
    /// clock.advance(Duration::from_secs(3600)); // an hour, at once
    /// assert_eq!(ev.run_until(d).unwrap(), 42);
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for [`new`](Self::new).
    pub fn with_manual_clock(clock: ManualClock) -> std::io::Result<EventLoop> {
        EventLoop::with_time(Some(clock)).inspect(from_env)
    }
}

/// The layers above the reactor look at the environment for a new loop.
fn from_env(ev: &EventLoop) {
    crate::ps::from_env(ev);
}
