// Time as a value: the `Clock` trait that time-based helpers take, `AsClock`
// (what they accept), and `ManualClock`, a clock that only moves when told to
// (Twisted's `task.Clock`). The Deferred does not know the loop: helpers that
// need time take a clock. Tests: below, tests/deferred_*.rs,
// tests/clock_helpers_accept_event_loop.rs.

use crate::timers::{later, Removed, TimerId, TimerWheel};
use crate::Error;
use std::cell::RefCell;
use std::fmt;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// A source of monotonic time that can run a function later.
///
/// Implemented by [`Loop`](crate::Loop) and [`ManualClock`]. A clock is a cheap handle
/// (`Clone`) so that a helper can keep it to schedule again later. Helpers take
/// an [`AsClock`], which the owning [`EventLoop`](crate::EventLoop) also is.
pub trait Clock: Clone + 'static {
    /// The handle of one delayed call.
    type Timer: Timer;

    /// The current time of this clock.
    fn now(&self) -> Instant;

    /// Runs `f` once, when the clock reaches `now() + delay`.
    ///
    /// # Errors
    /// [`Error::Closed`] if the clock can no longer run anything (a closed loop).
    #[track_caller]
    fn call_later<F: FnOnce() + 'static>(
        &self,
        delay: Duration,
        f: F,
    ) -> Result<Self::Timer, Error>;
}

/// What the helpers that need time accept: a [`Clock`], or what holds one.
///
/// [`Deferred::add_timeout`](crate::Deferred::add_timeout),
/// [`defer_later`](crate::defer_later) and [`LoopingCall`](crate::LoopingCall)
/// take an `AsClock`, so the owning [`EventLoop`](crate::EventLoop) works where its
/// [`Loop`](crate::Loop) handle does: `&ev`, `&ev.to_loop()`, the `&Loop` a callback gets,
/// and a [`ManualClock`] or `&ManualClock` in tests. Every [`Clock`] is one.
///
/// # Examples
/// ```
/// use deferloop::{Deferred, EventLoop, TimedOut};
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// let (d, _r) = Deferred::<()>::new();
/// let d = d.add_timeout(Duration::from_millis(5), &ev); // `&ev.to_loop()` works too
/// assert!(ev.run_until(d).unwrap_err().check::<TimedOut>());
/// # Ok::<(), deferloop::Error>(())
/// ```
pub trait AsClock {
    /// The clock handed over.
    type Clock: Clock;

    /// Borrows the clock.
    fn as_clock(&self) -> &Self::Clock;
}

impl<C: Clock> AsClock for C {
    type Clock = C;

    fn as_clock(&self) -> &C {
        self
    }
}

impl AsClock for &ManualClock {
    type Clock = ManualClock;

    fn as_clock(&self) -> &ManualClock {
        self
    }
}

/// A delayed call that can be cancelled.
pub trait Timer {
    /// Cancels the call if it has not run yet; returns whether it was pending.
    /// Idempotent.
    fn cancel(&self) -> bool;

    /// Whether the call is still waiting to run.
    fn is_active(&self) -> bool;
}

/// A deterministic clock for tests: time stands still until [`advance`](Self::advance).
///
/// Calls that come due during an advance run within that same advance, in
/// deadline order, equal deadlines in the order they were scheduled; a call
/// scheduled by a running call is relative to the advanced time and runs in the
/// same advance if it is already due (as in Twisted's `Clock`). A panic in a call
/// propagates out of `advance`.
///
/// Pending calls are dropped with the last handle to the clock — except
/// those that hold a clone of it, as a running [`LoopingCall`](crate::LoopingCall)
/// does: such a cycle is never freed (there is no `close` to break it, as an
/// [`EventLoop`](crate::EventLoop) has). Stop loops, or advance past their
/// calls, before dropping the clock.
///
/// # Examples
/// ```
/// use deferloop::{Clock, ManualClock};
/// use std::{cell::Cell, rc::Rc, time::Duration};
///
/// let clock = ManualClock::new();
/// let fired = Rc::new(Cell::new(false));
/// let f = fired.clone();
/// clock.call_later(Duration::from_secs(2), move || f.set(true)).unwrap();
/// clock.advance(Duration::from_secs(1));
/// assert!(!fired.get());
/// clock.advance(Duration::from_secs(1));
/// assert!(fired.get());
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Rc<RefCell<ManualInner>>,
}

struct ManualInner {
    start: Instant,
    now: Instant,
    heap: TimerWheel<Box<dyn FnOnce()>>,
}

impl ManualClock {
    /// A clock at time zero (its [`elapsed`](Self::elapsed) is 0).
    pub fn new() -> ManualClock {
        let start = Instant::now();
        ManualClock {
            inner: Rc::new(RefCell::new(ManualInner {
                start,
                now: start,
                heap: TimerWheel::new(start),
            })),
        }
    }

    /// Time since the clock was created, as moved by `advance`.
    pub fn elapsed(&self) -> Duration {
        let i = self.inner.borrow();
        i.now - i.start
    }

    /// Moves time forward by `by` and runs every call that is due by then
    /// (`Duration::MAX` runs everything pending).
    pub fn advance(&self, by: Duration) {
        let now = {
            let mut i = self.inner.borrow_mut();
            i.now = later(i.now, by);
            i.now
        };
        loop {
            let due = self.inner.borrow_mut().heap.pop_due(now);
            match due {
                Some((_, f)) => f(),
                None => break,
            }
        }
        self.inner.borrow_mut().heap.trim();
    }

    /// Calls `advance` once per element (Twisted's `pump`).
    pub fn pump(&self, steps: &[Duration]) {
        for d in steps {
            self.advance(*d);
        }
    }

    /// Number of calls waiting to run.
    pub fn pending(&self) -> usize {
        self.inner.borrow().heap.len()
    }

    /// When the earliest call is due (a bound at or before it).
    #[cfg(feature = "sim")]
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.inner.borrow().heap.next_deadline()
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("elapsed", &self.elapsed())
            .field("pending", &self.pending())
            .finish()
    }
}

impl Clock for ManualClock {
    type Timer = ManualTimer;

    fn now(&self) -> Instant {
        self.inner.borrow().now
    }

    fn call_later<F: FnOnce() + 'static>(
        &self,
        delay: Duration,
        f: F,
    ) -> Result<ManualTimer, Error> {
        let mut i = self.inner.borrow_mut();
        let deadline = later(i.now, delay);
        let id = i.heap.insert(deadline, Box::new(f));
        Ok(ManualTimer {
            clock: Rc::downgrade(&self.inner),
            id,
        })
    }
}

/// A call scheduled on a [`ManualClock`].
#[derive(Clone)]
pub struct ManualTimer {
    clock: Weak<RefCell<ManualInner>>,
    id: TimerId,
}

impl ManualTimer {
    /// When the call is due, if it is still pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.clock.upgrade()?.borrow().heap.deadline(self.id)
    }
}

impl Timer for ManualTimer {
    fn cancel(&self) -> bool {
        let Some(clock) = self.clock.upgrade() else {
            return false;
        };
        let cancelled = {
            let mut clock = clock.borrow_mut();
            let c = clock.heap.cancel(self.id);
            clock.heap.trim(); // no turn here to do it
            c
        };
        // The payload (and whatever it captured) drops outside the borrow.
        matches!(cancelled, Removed::Pending(_))
    }

    fn is_active(&self) -> bool {
        self.clock
            .upgrade()
            .is_some_and(|c| c.borrow().heap.contains(self.id))
    }
}

impl fmt::Debug for ManualTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualTimer")
            .field("active", &self.is_active())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn calls_due_during_advance_run_in_the_same_advance() {
        let clock = ManualClock::new();
        let log = Rc::new(RefCell::new(Vec::new()));
        let (c, l) = (clock.clone(), log.clone());
        clock
            .call_later(secs(0.5), move || {
                l.borrow_mut().push("a");
                let l2 = l.clone();
                // Relative to the advanced time (1.0): lands at 1.5, not run now.
                c.call_later(secs(0.5), move || l2.borrow_mut().push("late"))
                    .unwrap();
                let l3 = l.clone();
                c.call_later(secs(0.0), move || l3.borrow_mut().push("now"))
                    .unwrap();
            })
            .unwrap();
        clock.advance(secs(1.0));
        assert_eq!(*log.borrow(), ["a", "now"]);
        clock.advance(secs(0.5));
        assert_eq!(*log.borrow(), ["a", "now", "late"]);
    }

    #[test]
    fn equal_deadlines_run_in_scheduling_order() {
        let clock = ManualClock::new();
        let log = Rc::new(RefCell::new(Vec::new()));
        for i in 0..10 {
            let l = log.clone();
            clock
                .call_later(secs(1.0), move || l.borrow_mut().push(i))
                .unwrap();
        }
        clock.advance(secs(1.0));
        assert_eq!(*log.borrow(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn cancelled_calls_never_run_and_cancel_is_idempotent() {
        let clock = ManualClock::new();
        let ran = Rc::new(RefCell::new(false));
        let r = ran.clone();
        let t = clock
            .call_later(secs(1.0), move || *r.borrow_mut() = true)
            .unwrap();
        assert!(t.is_active());
        assert!(t.cancel());
        assert!(!t.cancel());
        assert!(!t.is_active());
        assert_eq!(clock.pending(), 0);
        clock.advance(secs(2.0));
        assert!(!*ran.borrow());
    }

    #[test]
    fn elapsed_starts_at_zero_and_follows_advance() {
        let clock = ManualClock::new();
        assert_eq!(clock.elapsed(), Duration::ZERO);
        clock.pump(&[secs(1.0), secs(0.25)]);
        assert_eq!(clock.elapsed(), secs(1.25));
    }
}
