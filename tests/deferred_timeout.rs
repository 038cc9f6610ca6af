//! `add_timeout` (R44–R46) and `defer_later` (R50), on a ManualClock.

use deferloop::deferred::{defer_later, Cancelled, Deferred, TimedOut};
use deferloop::{Failure, ManualClock};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

const S: Duration = Duration::from_secs(1);

/// R44/R45: the timeout fires when the clock reaches exactly `t`; Cancelled
/// becomes TimedOut{after}.
#[test]
fn timeout_cancels_at_exactly_t_and_reports_timed_out() {
    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(10 * S, &clock);
    clock.advance(9 * S);
    assert!(!d.is_called());
    clock.advance(S);
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(
        f.downcast_ref::<TimedOut>(),
        Some(&TimedOut { after: 10 * S })
    );
}

/// R46: firing first cancels the timer: nothing happens later.
#[test]
fn result_before_timeout_cancels_the_timer() {
    let clock = ManualClock::new();
    let (d, r) = Deferred::<u8>::new();
    let d = d.add_timeout(10 * S, &clock);
    assert_eq!(clock.pending(), 1);
    r.callback(3).unwrap();
    assert_eq!(clock.pending(), 0);
    clock.advance(20 * S);
    assert_eq!(d.result().unwrap().unwrap(), 3);

    let (d, r) = Deferred::<u8>::new();
    let d = d.add_timeout(S, &clock);
    r.errback(Failure::msg("own")).unwrap();
    clock.advance(2 * S);
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "own");
}

/// R46: a manual cancel before the timeout keeps Cancelled (no conversion).
#[test]
fn manual_cancel_before_timeout_keeps_cancelled() {
    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(S, &clock);
    d.cancel();
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<Cancelled>());
    assert_eq!(clock.pending(), 0);
}

/// R45: the custom function is called on timeout, even with a success result
/// (a canceller that callbacks), and gets the timeout.
#[test]
fn custom_on_timeout_sees_even_a_success() {
    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::with_canceller(|r| r.callback(5).unwrap());
    let seen = Rc::new(RefCell::new(None));
    let s = seen.clone();
    let d = d.add_timeout_with(2 * S, &clock, move |r, t| {
        *s.borrow_mut() = Some((r.as_ref().ok().copied(), t));
        r.map(|x| x + 1)
    });
    clock.advance(2 * S);
    assert_eq!(*seen.borrow(), Some((Some(5), 2 * S)));
    assert_eq!(d.result().unwrap().unwrap(), 6);
}

/// R45: default conversion passes a non-Cancelled failure through unchanged.
#[test]
fn other_failures_from_the_canceller_pass_through() {
    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::with_canceller(|r| r.errback(Failure::msg("custom")).unwrap());
    let d = d.add_timeout(S, &clock);
    clock.advance(S);
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "custom");
}

/// R44: only callbacks added before add_timeout are covered: an errback added
/// before it that recovers from Cancelled suppresses the timeout failure.
#[test]
fn errback_added_before_timeout_suppresses_cancellation() {
    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_errback(|f| {
        f.trap::<Cancelled>()?;
        Ok(0)
    });
    let d = d.add_timeout(S, &clock);
    clock.advance(S);
    assert_eq!(d.result().unwrap().unwrap(), 0);
}

/// A chained inner Deferred is cancelled by the timeout (callback added before).
#[test]
fn timeout_cancels_a_chained_inner() {
    let clock = ManualClock::new();
    let inner_cancelled = Rc::new(Cell::new(false));
    let ic = inner_cancelled.clone();
    let (inner, _ir) = Deferred::<u8>::with_canceller(move |_| ic.set(true));
    let slot = Rc::new(RefCell::new(Some(inner)));
    let (d, r) = Deferred::<()>::new();
    let d = d.add_callback(move |()| slot.borrow_mut().take().unwrap());
    let d = d.add_timeout(S, &clock);
    r.callback(()).unwrap();
    clock.advance(S);
    assert!(inner_cancelled.get());
    assert!(d.result().unwrap().unwrap_err().check::<TimedOut>());
}

/// R50: defer_later runs f after the delay and fires with its value.
#[test]
fn defer_later_runs_f_after_the_delay() {
    let clock = ManualClock::new();
    let d = defer_later(&clock, 2 * S, || Ok(7u8));
    clock.advance(S);
    assert!(!d.is_called());
    clock.advance(S);
    assert_eq!(d.result().unwrap().unwrap(), 7);
}

/// R50: f's error and panic errback.
#[test]
fn defer_later_error_and_panic_errback() {
    let clock = ManualClock::new();
    let d = defer_later(&clock, S, || Err::<u8, _>(Failure::msg("later")));
    let p = defer_later(&clock, S, || -> Result<u8, Failure> {
        panic!("later-panic")
    });
    clock.advance(S);
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "later");
    assert!(p.result().unwrap().unwrap_err().is_panic());
}

/// R50: cancelling before the delay cancels the timer; f never runs.
#[test]
fn defer_later_cancel_cancels_the_timer_and_f_never_runs() {
    let clock = ManualClock::new();
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    let d = defer_later(&clock, S, move || {
        r.set(true);
        Ok(())
    });
    d.cancel();
    assert_eq!(clock.pending(), 0);
    clock.advance(2 * S);
    assert!(!ran.get());
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
}

/// defer_later may return a Deferred, which is chained.
#[test]
fn defer_later_f_returning_a_deferred_chains() {
    let clock = ManualClock::new();
    let c2 = clock.clone();
    let d = defer_later(&clock, S, move || defer_later(&c2, S, || Ok("done")));
    clock.advance(S);
    assert!(d.is_paused());
    clock.advance(S);
    assert_eq!(d.result().unwrap().unwrap(), "done");
}

/// A clock that can no longer schedule anything (a closed loop).
#[derive(Clone)]
struct ClosedClock;

struct NoTimer;

impl deferloop::Timer for NoTimer {
    fn cancel(&self) -> bool {
        false
    }
    fn is_active(&self) -> bool {
        false
    }
}

impl deferloop::Clock for ClosedClock {
    type Timer = NoTimer;
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
    fn call_later<F: FnOnce() + 'static>(
        &self,
        _: Duration,
        _: F,
    ) -> Result<NoTimer, deferloop::Error> {
        Err(deferloop::Error::Closed)
    }
}

/// If the clock cannot schedule, add_timeout cancels at once and the Cancelled
/// failure is replaced by the clock's refusal; defer_later fails with it. A
/// closed loop is the chain condition `LoopClosed` (it used to be the loop's
/// own `Error::Closed`).
#[test]
fn clock_errors_become_failures() {
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(S, &ClosedClock);
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<deferloop::deferred::LoopClosed>(), "{f:?}");

    let d = defer_later(&ClosedClock, S, || Ok(1u8));
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<deferloop::deferred::LoopClosed>(), "{f:?}");
}
