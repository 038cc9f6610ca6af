//! `run_until`'s edges match asyncio's `run_until_complete`: the loop's checks
//! come first even for a fired Deferred, and its hold on the Deferred ends
//! when it returns.

use deferloop::deferred::{fail, succeed, Deferred};
use deferloop::{Error, EventLoop, Failure};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// The loop's own refusal: an `Error` that is not the Deferred's failure.
fn loop_error(e: &Error) -> Option<&Error> {
    e.failure().is_none().then_some(e)
}

/// On a closed loop, even an already-fired Deferred gives `Closed`.
#[test]
fn a_closed_loop_refuses_even_a_fired_deferred() {
    let ev = EventLoop::new().unwrap();
    ev.close().unwrap();
    let f = ev.run_until(succeed(1u8)).unwrap_err();
    assert!(matches!(loop_error(&f), Some(Error::Closed)), "{f:?}");
}

/// From inside a running loop, `run_until` gives `Running` and leaves the
/// outer run alone (it keeps running to its own stop).
#[test]
fn inside_a_running_loop_it_refuses_and_the_outer_run_goes_on() {
    let ev = EventLoop::new().unwrap();
    let inner = Rc::new(RefCell::new(None));
    let later_ran = Rc::new(Cell::new(false));
    let (i, l) = (inner.clone(), later_ran.clone());
    ev.call_soon(move |lp| {
        *i.borrow_mut() = Some(lp.run_until(succeed(1u8)));
        let l = l.clone();
        lp.call_soon(move |lp| {
            l.set(true);
            lp.stop();
        })
        .unwrap();
    })
    .unwrap();
    ev.run().unwrap();
    let f = inner.borrow_mut().take().unwrap().unwrap_err();
    assert!(matches!(loop_error(&f), Some(Error::Running)), "{f:?}");
    assert!(later_ran.get(), "the outer run was not stopped");
}

/// A fired Deferred returns without a turn, and leaves no stop behind: the
/// next `run()` runs until its own stop, not for one turn.
#[test]
fn a_fired_deferred_leaves_no_pending_stop() {
    let ev = EventLoop::new().unwrap();
    assert_eq!(ev.run_until(succeed(5u8)).unwrap(), 5);
    assert_eq!(ev.turn_count(), 0);
    let timer_ran = Rc::new(Cell::new(false));
    let t = timer_ran.clone();
    ev.call_later(Duration::from_millis(5), move |lp| {
        t.set(true);
        lp.stop();
    })
    .unwrap();
    ev.run().unwrap();
    assert!(timer_ran.get(), "run() ran until the timer, not one turn");
}

/// A `run_until` that was stopped early lets go of its Deferred: when that
/// fires during a later run, it does not stop that run, and its failure is
/// reported as unhandled rather than lost.
#[test]
fn an_early_stopped_run_until_lets_go_of_its_deferred() {
    let ev = EventLoop::new().unwrap();
    let (d, r) = Deferred::<u8>::new();
    ev.call_soon(|lp| lp.stop()).unwrap();
    let f = ev.run_until(d).unwrap_err();
    assert!(matches!(loop_error(&f), Some(Error::Stopped)), "{f:?}");

    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let previous = deferloop::deferred::set_unhandled_failure_hook(Some(Box::new(move |u| {
        s.borrow_mut().push(u.failure.to_string())
    })));
    let finished = Rc::new(Cell::new(false));
    let fin = finished.clone();
    ev.call_soon(move |_| r.errback(Failure::msg("late")).unwrap())
        .unwrap();
    ev.call_later(Duration::from_millis(5), move |lp| {
        fin.set(true);
        lp.stop();
    })
    .unwrap();
    ev.run().unwrap();
    deferloop::deferred::set_unhandled_failure_hook(previous);
    assert!(finished.get(), "the later run went on to its own stop");
    assert_eq!(*seen.borrow(), ["late"]);
}

/// The Deferred's own failure comes back as is.
#[test]
fn the_deferreds_failure_comes_back_unchanged() {
    let ev = EventLoop::new().unwrap();
    let failure = Failure::msg("mine");
    let f = ev.run_until(fail::<u8>(failure.clone())).unwrap_err();
    assert!(Failure::ptr_eq(f.failure().unwrap(), &failure));
}
