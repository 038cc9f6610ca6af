//! `scope`: a scope owns what is spawned in it, waits for it, cancels it
//! on the first failure or when cancelled, and fails with one shape.

use deferloop::deferred::{defer_later, scope, scope_collect_all, Scope, ScopeEnded, ScopeFailed};
use deferloop::{succeed, Cancelled, Deferred, Failure, ManualClock, TimedOut};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn child(
    clock: &ManualClock,
    after: u64,
    ok: bool,
    log: &Rc<RefCell<Vec<String>>>,
) -> Deferred<()> {
    let log = log.clone();
    defer_later(clock, secs(after), move || {
        log.borrow_mut().push(format!("child {after} ended"));
        if ok {
            Ok(())
        } else {
            Err(Failure::msg(format!("child {after} failed")))
        }
    })
}

#[test]
fn the_scope_fires_with_the_bodys_value_once_every_child_has_ended() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope(move |s| {
        s.spawn(child(&c, 1, true, &l))?;
        s.spawn(child(&c, 3, true, &l))?;
        Ok("body value")
    });
    clock.advance(secs(1));
    let d = d.result().unwrap_err(); // a child still runs
    clock.advance(secs(2));
    assert_eq!(d.result().unwrap().unwrap(), "body value");
    assert_eq!(log.borrow().len(), 2);
}

#[test]
fn the_first_failure_cancels_the_other_children_and_the_body() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope(move |s| {
        // `spawn` cannot fail while the body runs.
        s.spawn(child(&c, 1, false, &l)).unwrap();
        s.spawn(child(&c, 5, true, &l)).unwrap();
        defer_later(&c, secs(10), || Ok("body"))
    });
    clock.advance(secs(1));
    assert_eq!(
        clock.pending(),
        0,
        "the other child's and the body's timers are gone"
    );
    let f = d.result().unwrap().unwrap_err();
    let failed = f.downcast_ref::<ScopeFailed>().expect("one shape");
    assert_eq!(
        failed.failures.len(),
        1,
        "the scope's own cancellations are not failures"
    );
    assert_eq!(failed.first().to_string(), "child 1 failed");
    assert_eq!(f.to_string(), "scope failed: child 1 failed");
    assert!(std::error::Error::source(failed).unwrap().to_string() == "child 1 failed");
}

#[test]
fn collect_all_lets_every_child_finish_and_gathers_all_failures() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope_collect_all(move |s| {
        s.spawn(child(&c, 1, false, &l))?;
        s.spawn(child(&c, 2, true, &l))?;
        s.spawn(child(&c, 3, false, &l))?;
        Ok(())
    });
    clock.pump(&[secs(1); 3]);
    assert_eq!(log.borrow().len(), 3);
    let f = d.result().unwrap().unwrap_err();
    let failed = f.downcast_ref::<ScopeFailed>().unwrap();
    let msgs: Vec<_> = failed.failures.iter().map(ToString::to_string).collect();
    assert_eq!(msgs, ["child 1 failed", "child 3 failed"]);
    assert_eq!(
        f.to_string(),
        "scope failed (2 failures, the first follows): child 1 failed"
    );
}

#[test]
fn children_spawned_while_the_scope_runs_are_owned_too() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope(move |s| {
        let s2 = s.clone();
        let (c2, l2) = (c.clone(), l.clone());
        // A child that, when it ends, spawns another.
        s.spawn(defer_later(&c, secs(1), move || {
            s2.spawn(child(&c2, 4, true, &l2)).unwrap();
            Ok(())
        }))?;
        Ok(7u8)
    });
    clock.advance(secs(1));
    let d = d.result().unwrap_err();
    clock.advance(secs(4));
    assert_eq!(d.result().unwrap().unwrap(), 7);
    assert_eq!(*log.borrow(), ["child 4 ended"]);
}

#[test]
fn cancelling_the_scope_cancels_everything_it_owns() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope(move |s| {
        s.spawn(child(&c, 1, true, &l)).unwrap();
        s.spawn(child(&c, 2, true, &l)).unwrap();
        defer_later(&c, secs(3), || Ok(()))
    });
    assert_eq!(clock.pending(), 3);
    d.cancel();
    assert_eq!(clock.pending(), 0);
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    assert!(log.borrow().is_empty());
}

#[test]
fn a_timeout_on_the_scope_is_a_deadline_for_all_of_it() {
    let clock = ManualClock::new();
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (c, l) = (clock.clone(), Rc::clone(&log));
    let d = scope(move |s| {
        s.spawn(child(&c, 10, true, &l))?;
        Ok(())
    })
    .add_timeout(secs(2), &clock);
    clock.advance(secs(2));
    assert!(d.result().unwrap().unwrap_err().check::<TimedOut>());
    assert_eq!(clock.pending(), 0);
}

#[test]
fn scope_cancel_after_the_body_finished_stops_background_children() {
    let clock = ManualClock::new();
    let kept: Rc<RefCell<Option<Scope>>> = Rc::default();
    let (c, k) = (clock.clone(), kept.clone());
    let d = scope(move |s| {
        *k.borrow_mut() = Some(s.clone());
        s.spawn(defer_later(&c, secs(100), || Ok(())))?;
        Ok("answer")
    });
    let d = d.result().unwrap_err();
    kept.borrow().as_ref().unwrap().cancel();
    assert_eq!(d.result().unwrap().unwrap(), "answer");
    assert_eq!(clock.pending(), 0);
}

#[test]
fn spawning_into_an_ended_scope_is_refused_and_cancels_the_child() {
    let kept: Rc<RefCell<Option<Scope>>> = Rc::default();
    let k = kept.clone();
    let d = scope(move |s| {
        *k.borrow_mut() = Some(s.clone());
        Ok(())
    });
    d.result().unwrap().unwrap();
    let s = kept.borrow_mut().take().unwrap();
    assert!(s.is_ended());
    let cancelled = Rc::new(Cell::new(false));
    let c = cancelled.clone();
    let (late, _r) = Deferred::<()>::with_canceller(move |_| c.set(true));
    assert_eq!(s.spawn(late), Err(ScopeEnded));
    assert!(cancelled.get(), "nothing outlives the scope by mistake");
}

#[test]
fn a_failing_or_panicking_body_fails_the_scope_and_cancels_children() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let d = scope(move |s| -> Result<(), Failure> {
        s.spawn(defer_later(&c, secs(5), || Ok(())))?;
        Err(Failure::msg("body failed"))
    });
    assert_eq!(clock.pending(), 0);
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(
        f.downcast_ref::<ScopeFailed>().unwrap().first().to_string(),
        "body failed"
    );

    let d = scope(|_| -> Result<(), Failure> { panic!("body broke") });
    let f = d.result().unwrap().unwrap_err();
    assert!(f.downcast_ref::<ScopeFailed>().unwrap().first().is_panic());
}

#[test]
fn a_child_that_already_fired_is_counted_at_once() {
    let d = scope(|s| {
        s.spawn(succeed(1u8))?;
        assert_eq!(s.len(), 0);
        Ok(())
    });
    d.result().unwrap().unwrap();
}

#[test]
fn a_scope_in_a_scope_is_cancelled_with_its_parent() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let d = scope(move |outer| {
        let c2 = c.clone();
        outer.spawn(scope(move |inner| {
            inner.spawn(defer_later(&c2, secs(9), || Ok(())))?;
            Ok(())
        }))?;
        outer.spawn(defer_later(&c, secs(1), || -> Result<(), Failure> {
            Err(Failure::msg("boom"))
        }))?;
        Ok(())
    });
    clock.advance(secs(1));
    assert_eq!(
        clock.pending(),
        0,
        "the inner scope's child was cancelled too"
    );
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(f.downcast_ref::<ScopeFailed>().unwrap().failures.len(), 1);
}
