//! Work driven by time (Twisted's `twisted.internet.task`): [`defer_later`]
//! runs a function once after a delay, [`LoopingCall`] runs one every interval.
//!
//! Both take the clock to run on: the loop (`&ev`, or the `&Loop` a callback
//! gets) in programs, a [`ManualClock`](crate::ManualClock) in tests, so that
//! a test moves time by hand instead of sleeping.

// All arithmetic is on integer `Duration`s. Tests: tests/deferred_looping_call.rs,
// tests/deferred_timeout.rs (defer_later), tests/looping_call_stops_itself.rs.

use super::{maybe_deferred, succeed, Deferred, IntoStep, Resolver};
use crate::{AsClock, Clock, Error, Failure, Timer};
use std::cell::RefCell;
use std::fmt;
use std::panic::Location;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A Deferred that runs `f` after `delay` on `clock` and fires with its outcome
/// (Twisted's `deferLater`). `f` returning `Err`, or panicking, errbacks;
/// returning a Deferred chains it.
///
/// Cancelling before the delay cancels the timer, so `f` never runs, and the
/// Deferred fails with [`Cancelled`](super::Cancelled). If the clock cannot
/// schedule (a closed loop), the Deferred has failed with
/// [`LoopClosed`](super::LoopClosed).
#[track_caller]
pub fn defer_later<R: IntoStep>(
    clock: &impl AsClock,
    delay: Duration,
    f: impl FnOnce() -> R + 'static,
) -> Deferred<R::Output> {
    defer_later_on(clock.as_clock(), delay, f, Location::caller())
}

#[track_caller]
fn defer_later_on<C: Clock, R: IntoStep>(
    clock: &C,
    delay: Duration,
    f: impl FnOnce() -> R + 'static,
    at: &'static Location<'static>,
) -> Deferred<R::Output> {
    let slot: Rc<RefCell<Option<C::Timer>>> = Rc::new(RefCell::new(None));
    let s2 = slot.clone();
    let (d, r) = Deferred::<()>::with_canceller(move |_| {
        let timer = s2.borrow_mut().take();
        if let Some(t) = timer {
            t.cancel();
        }
    });
    match clock.call_later(delay, move || {
        r.callback_if_pending(());
    }) {
        Ok(t) => *slot.borrow_mut() = Some(t),
        Err(e) => return super::fail(super::errors::loop_failure(e, at)),
    }
    d.tag_wait(|| super::registry::Wait::Timer {
        deadline: clock.now() + delay,
    });
    d.add_callback(move |()| f())
}

type Body<C> = Box<dyn FnMut(&LoopingCall<C>, u64) -> Deferred<()>>;

/// Calls a function every `interval` on a clock (Twisted's `LoopingCall`).
///
/// - [`start`](Self::start) records the start time and makes the first call at
///   once; [`start_later`](Self::start_later) makes it at start + interval. Each returns a Deferred that fires
///   with `()` when the looping call is [stopped](Self::stop), or fails with the failure of
///   a call that failed (which also stops the looping call).
/// - Calls sit on the grid `start + k·interval`: after a call the next one is
///   `interval - ((now - start) % interval)` away, so missed ticks are skipped,
///   not bunched. An interval of zero reschedules with delay zero.
/// - If the function returns a Deferred, the next call is scheduled only when it
///   has fired.
/// - `stop()` cancels a scheduled call and fires the start Deferred at once; if a
///   call's Deferred is pending, the start Deferred fires when it completes. A
///   function made with [`with_handle`](Self::with_handle) is passed the
///   `LoopingCall`, to stop it from inside (Twisted's `f` calling `lc.stop()`).
///
/// The handle is cheap to clone; a scheduled call keeps the looping call alive.
///
/// # Examples
/// Three ticks on an event loop, the function stopping the looping call on the
/// third; then the Deferred from `start` fires:
/// ```
/// use deferloop::{EventLoop, LoopingCall};
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// let mut ticks = 0;
/// let lc = LoopingCall::with_handle(&ev, move |lc| {
///     ticks += 1;
///     println!("tick {ticks}");
///     if ticks == 3 {
///         lc.stop()?;
///     }
///     Ok(())
/// });
/// let done = lc.start(Duration::from_millis(2))?;
/// ev.run_until(done).unwrap();
/// assert!(!lc.is_running());
/// # Ok::<(), deferloop::Error>(())
/// ```
///
/// With a [`ManualClock`](crate::ManualClock), a test moves time by hand:
/// ```
/// use deferloop::{deferred::LoopingCall, Failure, ManualClock};
/// use std::{cell::Cell, rc::Rc, time::Duration};
///
/// let clock = ManualClock::new();
/// let n = Rc::new(Cell::new(0));
/// let n2 = n.clone();
/// let lc = LoopingCall::new(clock.clone(), move || { n2.set(n2.get() + 1); Ok(()) });
/// let done = lc.start(Duration::from_secs(1)).unwrap();
/// clock.pump(&[Duration::from_secs(1); 3]);
/// assert_eq!(n.get(), 4);
/// lc.stop().unwrap();
/// assert!(done.result().unwrap().is_ok());
/// ```
pub struct LoopingCall<C: Clock> {
    inner: Rc<RefCell<TaskState<C>>>,
}

impl<C: Clock> Clone for LoopingCall<C> {
    fn clone(&self) -> Self {
        LoopingCall {
            inner: self.inner.clone(),
        }
    }
}

struct TaskState<C: Clock> {
    clock: C,
    body: Option<Body<C>>,
    counted: bool,
    running: bool,
    interval: Duration,
    start: Instant,
    run_at_start: bool,
    last: Option<Instant>,
    call: Option<C::Timer>,
    resolver: Option<Resolver<()>>,
}

impl<C: Clock> LoopingCall<C> {
    /// A looping call of `f()` on `clock` (`&ev`, a `Loop`, a `ManualClock`);
    /// `f` returns `Result<U, Failure>` or `Deferred<U>` (the value is ignored).
    pub fn new<R: IntoStep>(
        clock: impl AsClock<Clock = C>,
        mut f: impl FnMut() -> R + 'static,
    ) -> LoopingCall<C> {
        LoopingCall::build(
            clock.as_clock().clone(),
            false,
            Box::new(move |_, _| maybe_deferred(&mut f).map(|_| ())),
        )
    }

    /// Like [`new`](Self::new), but `f` is passed this `LoopingCall`, so it can
    /// [`stop`](Self::stop) or [`reset`](Self::reset) it from inside. The
    /// handle is lent for the call: no reference cycle is made unless `f`
    /// stores a clone.
    pub fn with_handle<R: IntoStep>(
        clock: impl AsClock<Clock = C>,
        mut f: impl FnMut(&LoopingCall<C>) -> R + 'static,
    ) -> LoopingCall<C> {
        LoopingCall::build(
            clock.as_clock().clone(),
            false,
            Box::new(move |lc, _| maybe_deferred(|| f(lc)).map(|_| ())),
        )
    }

    /// Twisted's `LoopingCall.withCount`: calls `f(n)` where `n` is the number of
    /// grid intervals since the previous call (1 normally; more after the clock
    /// skipped ticks). When no grid point has passed, `f` is not called. With
    /// interval zero, `n` is always 1.
    pub fn with_count<R: IntoStep>(
        clock: impl AsClock<Clock = C>,
        mut f: impl FnMut(u64) -> R + 'static,
    ) -> LoopingCall<C> {
        LoopingCall::build(
            clock.as_clock().clone(),
            true,
            Box::new(move |_, n| maybe_deferred(|| f(n)).map(|_| ())),
        )
    }

    fn build(clock: C, counted: bool, body: Body<C>) -> LoopingCall<C> {
        let start = clock.now();
        LoopingCall {
            inner: Rc::new(RefCell::new(TaskState {
                clock,
                body: Some(body),
                counted,
                running: false,
                interval: Duration::ZERO,
                start,
                run_at_start: true,
                last: None,
                call: None,
                resolver: None,
            })),
        }
    }

    /// Starts the looping call with a first call now, then one every
    /// `interval` (Twisted's `start(interval, now=True)`, its default).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the looping call is already running. A
    /// failure of the first call is not an error here: the returned Deferred
    /// has failed.
    pub fn start(&self, interval: Duration) -> Result<Deferred<()>, Error> {
        self.begin(interval, true)
    }

    /// Starts the looping call with its first call one `interval` from now
    /// (Twisted's `start(interval, now=False)`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the looping call is already running; the
    /// clock's error if it cannot schedule the first call.
    pub fn start_later(&self, interval: Duration) -> Result<Deferred<()>, Error> {
        self.begin(interval, false)
    }

    fn begin(&self, interval: Duration, now: bool) -> Result<Deferred<()>, Error> {
        let (d, r) = Deferred::new();
        {
            let mut s = self.inner.borrow_mut();
            if s.running {
                return Err(Error::InvalidInput("LoopingCall is already running"));
            }
            s.running = true;
            s.resolver = Some(r);
            s.start = s.clock.now();
            s.interval = interval;
            s.run_at_start = now;
            s.last = None;
        }
        if now {
            run(&self.inner);
        } else if let Err(e) = schedule(&self.inner) {
            let mut s = self.inner.borrow_mut();
            s.running = false;
            s.resolver = None;
            return Err(e);
        }
        Ok(d)
    }

    /// Stops the looping call: no further calls. The start Deferred fires with `()` now if
    /// a call was scheduled, or when the running call's Deferred completes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the looping call is not running.
    pub fn stop(&self) -> Result<(), Error> {
        let mut s = self.inner.borrow_mut();
        if !s.running {
            return Err(Error::InvalidInput("LoopingCall is not running"));
        }
        s.running = false;
        if let Some(call) = s.call.take() {
            let r = s.resolver.take();
            drop(s);
            call.cancel();
            if let Some(r) = r {
                r.callback_if_pending(());
            }
        }
        Ok(())
    }

    /// Restarts the grid from now: a scheduled call is moved to now + interval
    /// (nothing changes while a call is running).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the looping call is not running; the clock's error if it
    /// cannot reschedule (the looping call then stops and its Deferred fails).
    pub fn reset(&self) -> Result<(), Error> {
        let mut s = self.inner.borrow_mut();
        if !s.running {
            return Err(Error::InvalidInput("LoopingCall is not running"));
        }
        if let Some(call) = s.call.take() {
            s.start = s.clock.now();
            drop(s);
            call.cancel();
            if let Err(e) = schedule(&self.inner) {
                let f = match &e {
                    Error::Closed => Failure::new(super::errors::LoopClosed),
                    other => Failure::msg(other.to_string()),
                };
                fail_loop(&self.inner, f);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether the looping call is started and not stopped.
    pub fn is_running(&self) -> bool {
        self.inner.borrow().running
    }

    /// The interval given to the last `start`.
    pub fn interval(&self) -> Duration {
        self.inner.borrow().interval
    }
}

impl<C: Clock> fmt::Debug for LoopingCall<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.borrow();
        f.debug_struct("LoopingCall")
            .field("running", &s.running)
            .field("interval", &s.interval)
            .finish()
    }
}

/// One call of the body, then reschedule (or finish) when its Deferred fires.
fn run<C: Clock>(lc: &Rc<RefCell<TaskState<C>>>) {
    let (body, count) = {
        let mut s = lc.borrow_mut();
        s.call = None;
        let count = if s.counted { count(&mut s) } else { Some(1) };
        (s.body.take(), count)
    };
    let Some(mut body) = body else { return };
    let d = match count {
        // The handle is lent, not stored: no cycle through the body.
        Some(n) => body(&LoopingCall { inner: lc.clone() }, n),
        None => succeed(()),
    };
    lc.borrow_mut().body = Some(body);
    let (ok, err) = (lc.clone(), lc.clone());
    d.add_callbacks(
        move |()| {
            let running = ok.borrow().running;
            if running {
                if let Err(e) = schedule(&ok) {
                    fail_loop(&ok, super::errors::loop_failure(e, Location::caller()));
                }
            } else {
                let r = ok.borrow_mut().resolver.take();
                if let Some(r) = r {
                    r.callback_if_pending(());
                }
            }
            Ok(())
        },
        move |f| {
            fail_loop(&err, f);
            Ok(())
        },
    )
    .detach();
}

/// `withCount`'s count: grid intervals between the last real call and now.
fn count<C: Clock>(s: &mut TaskState<C>) -> Option<u64> {
    let now = s.clock.now();
    if s.interval.is_zero() {
        s.last = Some(now);
        return Some(1);
    }
    let iv = s.interval.as_nanos() as i128;
    let offset = |t: Instant| t.saturating_duration_since(s.start).as_nanos() as i128;
    let last = match s.last {
        Some(t) => offset(t),
        None if s.run_at_start => -iv,
        None => 0,
    };
    let n = offset(now) / iv - last / iv;
    if n > 0 {
        s.last = Some(now);
        Some(n as u64)
    } else {
        None
    }
}

fn schedule<C: Clock>(lc: &Rc<RefCell<TaskState<C>>>) -> Result<(), Error> {
    let (clock, delay) = {
        let s = lc.borrow();
        let delay = if s.interval.is_zero() {
            Duration::ZERO
        } else {
            let since = s.clock.now().saturating_duration_since(s.start).as_nanos();
            let iv = s.interval.as_nanos();
            nanos(iv - since % iv)
        };
        (s.clock.clone(), delay)
    };
    let lc2 = lc.clone();
    let t = clock.call_later(delay, move || run(&lc2))?;
    lc.borrow_mut().call = Some(t);
    Ok(())
}

fn nanos(n: u128) -> Duration {
    Duration::new((n / 1_000_000_000) as u64, (n % 1_000_000_000) as u32)
}

fn fail_loop<C: Clock>(lc: &Rc<RefCell<TaskState<C>>>, f: Failure) {
    let r = {
        let mut s = lc.borrow_mut();
        s.running = false;
        s.resolver.take()
    };
    if let Some(r) = r {
        r.errback_if_pending(f);
    }
}
