//! `Handle`: one call scheduled with `call_soon`, `call_later` or `call_at`,
//! its state, and moving a timer (`reset`, `delay`). Tests:
//! tests/loop_callbacks.rs, tests/loop_timers.rs, tests/timers_reset.rs.

use super::Inner;
use crate::clock::Timer;
use crate::reactor::ready::Job;
use crate::timers::{self, TimerId};
use crate::Error;
use std::cell::Cell;
use std::fmt;
use std::rc::Weak;
use std::time::{Duration, Instant};

/// The state of a [`Handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandleState {
    /// Waiting to run.
    Pending,
    /// Cancelled before it ran.
    Cancelled,
    /// Ran, or was dropped by `close()`.
    Done,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum HandleId {
    Ready(u64),
    Timer(TimerId, Instant),
}

/// One call scheduled with `call_soon`, `call_later` or `call_at`.
///
/// Dropping the handle does not cancel the call. It holds only a weak
/// reference to the loop. A timer's handle can move it:
/// [`reset`](Self::reset), [`reset_at`](Self::reset_at) and
/// [`delay`](Self::delay) (Twisted's `IDelayedCall.reset`/`delay`).
pub struct Handle {
    pub(crate) lp: Weak<Inner>,
    pub(crate) id: Cell<HandleId>,
    pub(crate) cancelled: Cell<bool>,
}

impl Handle {
    /// Cancels the call if it has not run; returns whether it was pending.
    /// Idempotent. A cancelled timer leaves the timer wheel at once (O(1)); the
    /// callback and what it captured are dropped before `cancel` returns.
    pub fn cancel(&self) -> bool {
        let Some(inner) = self.lp.upgrade() else {
            return false;
        };
        // What was cancelled is dropped here, outside every borrow (dropping
        // a closure may run arbitrary code). A pending timer's task is dropped
        // where it lies, not moved out first: copying it through temporaries
        // stalled on store-to-load forwarding.
        let cancel_ready = |seq| -> bool {
            let dropped: Option<Job> = inner.ready.borrow_mut().cancel(seq);
            dropped.is_some()
        };
        let was_pending = match self.id.get() {
            HandleId::Ready(seq) => cancel_ready(seq),
            HandleId::Timer(id, _) => {
                let c = inner.timers.borrow_mut().cancel(id);
                match c {
                    timers::Removed::Pending(task) => {
                        drop(task);
                        true
                    }
                    timers::Removed::Ready(seq) => cancel_ready(seq),
                    timers::Removed::Gone => false,
                }
            }
        };
        if was_pending {
            self.cancelled.set(true);
        }
        was_pending
    }

    /// Whether the call is pending, cancelled, or done.
    pub fn state(&self) -> HandleState {
        if self.cancelled.get() {
            return HandleState::Cancelled;
        }
        let Some(inner) = self.lp.upgrade() else {
            return HandleState::Done;
        };
        let pending = match self.id.get() {
            HandleId::Ready(seq) => inner.ready.borrow().is_pending(seq),
            HandleId::Timer(id, _) => inner.timers.borrow().contains(id),
        };
        if pending {
            HandleState::Pending
        } else {
            HandleState::Done
        }
    }

    /// Whether [`cancel`](Self::cancel) succeeded on this handle.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }

    /// The deadline, for `call_later`/`call_at` handles (the latest one
    /// after a [`reset`](Self::reset) or [`delay`](Self::delay)).
    pub fn deadline(&self) -> Option<Instant> {
        match self.id.get() {
            HandleId::Timer(_, when) => Some(when),
            HandleId::Ready(_) => None,
        }
    }

    /// Moves a pending timer so that it is due `delay` from now (the loop's
    /// [`time`](crate::Loop::time)), Twisted's `IDelayedCall.reset`: a
    /// connection's idle timer re-armed at each read, without a cancel and
    /// a new `call_later`. O(1) in the timer wheel (O(log n) for a timer due
    /// within the current millisecond), and no allocation: the callback
    /// stays where it is. The timer counts as scheduled anew: among timers
    /// with the same deadline it runs after those scheduled before the reset.
    /// A timer already due but not yet run (queued for this turn) can still
    /// be moved, and then does not run this turn.
    ///
    /// ```
    /// use deferloop::{EventLoop, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let ev = EventLoop::with_manual_clock(clock.clone())?;
    /// let s = Duration::from_secs;
    /// let idle = ev.call_later(s(10), |lp| lp.stop())?;
    /// clock.advance(s(8));
    /// idle.reset(s(10))?; // due at 18 s, not 10 s
    /// idle.delay(s(2))?; // due at 20 s
    /// assert_eq!(idle.deadline(), Some(ev.time() + s(12)));
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Gone`] if the call already ran or was cancelled
    /// ([`state`](Self::state) says which: Twisted's `AlreadyCalled` and
    /// `AlreadyCancelled`); [`Error::Closed`] if the loop is closed or gone;
    /// [`Error::InvalidInput`] for a `call_soon` handle, which has no time.
    pub fn reset(&self, delay: Duration) -> Result<(), Error> {
        let inner = self.lp.upgrade().ok_or(Error::Closed)?;
        let when = timers::later(inner.now(), delay);
        self.move_to(&inner, |_| when)
    }

    /// Moves a pending timer to `when` (or the next turn, if `when` has
    /// passed); see [`reset`](Self::reset).
    ///
    /// # Errors
    /// As for [`reset`](Self::reset).
    pub fn reset_at(&self, when: Instant) -> Result<(), Error> {
        let inner = self.lp.upgrade().ok_or(Error::Closed)?;
        self.move_to(&inner, |_| when)
    }

    /// Pushes a pending timer back by `by` from its current deadline
    /// (Twisted's `IDelayedCall.delay`); see [`reset`](Self::reset).
    ///
    /// # Errors
    /// As for [`reset`](Self::reset).
    pub fn delay(&self, by: Duration) -> Result<(), Error> {
        let inner = self.lp.upgrade().ok_or(Error::Closed)?;
        self.move_to(&inner, |deadline| timers::later(deadline, by))
    }

    /// Files the timer again at `when(its deadline)`; updates the handle.
    fn move_to(&self, inner: &Inner, when: impl FnOnce(Instant) -> Instant) -> Result<(), Error> {
        inner.check_open()?;
        let HandleId::Timer(id, deadline) = self.id.get() else {
            return Err(Error::InvalidInput(
                "reset and delay need a call_later or call_at handle",
            ));
        };
        if self.cancelled.get() {
            return Err(Error::Gone);
        }
        let when = when(deadline);
        let moved = inner.timers.borrow_mut().reset(id, when);
        let new = match moved {
            timers::Reset::Moved(new) => new,
            timers::Reset::Ready(seq) => {
                // Due and queued: its task comes back out of the ready queue
                // (a tombstone stays) and is set anew.
                let task = inner.ready.borrow_mut().take(seq);
                let Some(task) = task else {
                    return Err(Error::Gone);
                };
                inner.timers.borrow_mut().insert(when, task)
            }
            timers::Reset::Gone => return Err(Error::Gone),
        };
        self.id.set(HandleId::Timer(new, when));
        inner.wake_host();
        Ok(())
    }
}

impl Timer for Handle {
    fn cancel(&self) -> bool {
        Handle::cancel(self)
    }
    fn is_active(&self) -> bool {
        self.state() == HandleState::Pending
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("state", &self.state())
            .field("deadline", &self.deadline())
            .finish()
    }
}
