//! Giving up on a Deferred after a while: [`Deferred::add_timeout`] (Twisted's
//! `addTimeout`) and [`Deferred::add_timeout_with`].
//!
//! Time comes from the clock passed in: the loop (`&ev`, or the `&Loop` a
//! callback gets) in programs, a [`ManualClock`](crate::ManualClock) in tests.

// Tests: tests/deferred_timeout.rs, tests/clock_helpers_accept_event_loop.rs.

use super::errors::{Cancelled, TimedOut};
use super::Deferred;
use crate::{AsClock, Clock, Failure, Timer};
use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::rc::Rc;
use std::time::Duration;

impl<T: 'static> Deferred<T> {
    /// Cancels this Deferred if it has not fired `timeout` after now on `clock`,
    /// and turns the resulting [`Cancelled`] failure into [`TimedOut`]`{ after: timeout }`.
    ///
    /// - Only the callbacks added *before* this call are covered (a callback
    ///   already waiting on an inner Deferred gets that one cancelled).
    /// - The timer is cancelled when the Deferred fires first; then nothing is
    ///   cancelled later. Other failures, a success, or a `Cancelled` from a manual
    ///   `cancel()` before the timeout pass through unchanged.
    /// - If `clock.call_later` fails, the Deferred is cancelled at once and its
    ///   `Cancelled` failure replaced by the clock's refusal
    ///   ([`LoopClosed`](super::LoopClosed) for a closed loop).
    ///
    /// # Examples
    /// A reply that comes too late, and one in time:
    /// ```
    /// use deferloop::{defer_later, EventLoop, TimedOut};
    /// use std::time::Duration;
    ///
    /// let ev = EventLoop::new()?;
    /// let ms = Duration::from_millis;
    /// let slow = defer_later(&ev, ms(200), || Ok("slow")).add_timeout(ms(10), &ev);
    /// let f = ev.run_until(slow).unwrap_err();
    /// assert_eq!(f.downcast_ref::<TimedOut>(), Some(&TimedOut { after: ms(10) }));
    ///
    /// let quick = defer_later(&ev, ms(1), || Ok("quick")).add_timeout(ms(500), &ev);
    /// assert_eq!(ev.run_until(quick).unwrap(), "quick");
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn add_timeout(self, timeout: Duration, clock: &impl AsClock) -> Deferred<T> {
        let at = Location::caller();
        self.add_timeout_with(timeout, clock, move |r, after| match r {
            Err(f) if f.check::<Cancelled>() => Err(Failure::with_origin(TimedOut { after }, at)),
            r => r,
        })
    }

    /// Like [`add_timeout`](Self::add_timeout), but when the timeout expired the
    /// result — whatever it is, even a success — goes through `on_timeout(result,
    /// timeout)` instead of the default conversion.
    #[track_caller]
    pub fn add_timeout_with(
        self,
        timeout: Duration,
        clock: &impl AsClock,
        on_timeout: impl FnOnce(Result<T, Failure>, Duration) -> Result<T, Failure> + 'static,
    ) -> Deferred<T> {
        let at = Location::caller();
        let timed_out = Rc::new(Cell::new(false));
        let handle = self.cancel_handle();
        self.tag_timeout(|| clock.as_clock().now() + timeout);
        let flag = timed_out.clone();
        let timer = clock.as_clock().call_later(timeout, move || {
            flag.set(true);
            handle.cancel();
        });
        match timer {
            Ok(timer) => self.add_both(move |r| {
                timer.cancel();
                if timed_out.get() {
                    on_timeout(r, timeout)
                } else {
                    r
                }
            }),
            Err(e) => {
                let err = Rc::new(RefCell::new(Some(e)));
                let e2 = err.clone();
                let d = self.add_both(move |r| match r {
                    Err(f) if f.check::<Cancelled>() => match e2.borrow_mut().take() {
                        Some(e) => Err(super::errors::loop_failure(e, at)),
                        None => Err(f),
                    },
                    r => r,
                });
                d.cancel();
                d
            }
        }
    }
}
