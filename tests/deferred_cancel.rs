//! Cancellation (Twisted rules R26–R31): cancellers, suppression of one late
//! fire, cancel after firing, cancelling a chained inner, panicking cancellers.

use deferloop::deferred::{Cancelled, Deferred};
use deferloop::Failure;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

mod util;

/// R26: the canceller runs once, with the Deferred's resolver; since it did not
/// fire, a `Cancelled` failure follows. R29: a later fire is AlreadyCalled.
#[test]
fn canceller_runs_once_then_cancelled_follows_and_no_suppression() {
    let calls = Rc::new(Cell::new(0));
    let c = calls.clone();
    let (d, r) = Deferred::<u8>::with_canceller(move |res| {
        assert!(!res.is_called());
        c.set(c.get() + 1);
    });
    d.cancel();
    d.cancel();
    assert_eq!(calls.get(), 1);
    assert!(r.callback(1).is_err());
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<Cancelled>());
}

/// R26: the canceller gets a resolver of the identical Deferred.
#[test]
fn canceller_receives_the_same_deferreds_resolver() {
    let (d, _r) = Deferred::<u8>::with_canceller(|res| res.callback(77).unwrap());
    d.cancel();
    assert_eq!(d.result().unwrap().unwrap(), 77);
}

/// R27: a canceller that errbacks leaves its own error, not Cancelled.
#[test]
fn canceller_that_errbacks_keeps_its_error() {
    let (d, _r) = Deferred::<u8>::with_canceller(|res| res.errback(Failure::msg("mine")).unwrap());
    d.cancel();
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "mine");
}

/// R28: without a canceller, cancel errbacks Cancelled and absorbs exactly one
/// later fire of either kind; the second late fire is AlreadyCalled.
#[test]
fn no_canceller_absorbs_exactly_one_late_fire() {
    for late_ok in [true, false] {
        let (d, r) = Deferred::<u8>::new();
        d.cancel();
        if late_ok {
            assert!(r.callback(1).is_ok());
        } else {
            assert!(r.errback(Failure::msg("late")).is_ok());
        }
        assert!(r.callback(2).is_err());
        assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    }
}

/// R30: cancel after firing does nothing (the canceller is not called).
#[test]
fn cancel_after_firing_is_a_no_op() {
    let called = Rc::new(Cell::new(false));
    let c = called.clone();
    let (d, r) = Deferred::<u8>::with_canceller(move |_| c.set(true));
    r.callback(3).unwrap();
    d.cancel();
    assert!(!called.get());
    assert_eq!(d.result().unwrap().unwrap(), 3);

    let (d, r) = Deferred::<u8>::new();
    r.errback(Failure::msg("e")).unwrap();
    d.cancel();
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "e");
}

/// R30 exception: an outer waiting on an inner cancels the inner instead.
#[test]
fn cancel_of_a_waiting_outer_cancels_the_inner() {
    let inner_cancelled = Rc::new(Cell::new(false));
    let ic = inner_cancelled.clone();
    let outer_cancelled = Rc::new(Cell::new(false));
    let oc = outer_cancelled.clone();
    let (inner, ir) = Deferred::<u8>::with_canceller(move |_| ic.set(true));
    let slot = Rc::new(RefCell::new(Some(inner)));
    let (outer, or) = Deferred::<()>::with_canceller(move |_| oc.set(true));
    let outer = outer.add_callback(move |()| slot.borrow_mut().take().unwrap());
    or.callback(()).unwrap();
    assert!(outer.is_paused());
    outer.cancel();
    assert!(inner_cancelled.get());
    assert!(!outer_cancelled.get());
    assert!(ir.is_called());
    let f = outer.result().unwrap().unwrap_err();
    assert!(f.check::<Cancelled>());
}

/// R31 (port): a panicking canceller is logged with the creation site and the
/// Deferred stays unfired.
#[test]
fn panicking_canceller_is_logged_and_deferred_stays_unfired() {
    let logs = util::logs();
    let line = line!() + 1;
    let (d, r) = Deferred::<u8>::with_canceller(|_| panic!("canceller-kaboom"));
    d.cancel();
    assert!(!r.is_called());
    let recs: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| r.message.contains("canceller-kaboom"))
        .collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].level, log::Level::Error);
    assert!(recs[0].message.contains(&format!("{}:{line}", file!())));
    r.callback(1).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 1);
}

/// R5: the canceller is dropped when the Deferred fires (breaking cycles).
#[test]
fn canceller_is_dropped_on_fire() {
    let token = Rc::new(());
    let t = token.clone();
    let (d, r) = Deferred::<u8>::with_canceller(move |_| drop(t));
    assert_eq!(Rc::strong_count(&token), 2);
    r.callback(1).unwrap();
    assert_eq!(Rc::strong_count(&token), 1);
    drop(d);
}

/// Errbacks added before cancel see the Cancelled failure; it can be recovered.
#[test]
fn errback_sees_cancelled_and_may_recover() {
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_errback(|f| {
        f.trap::<Cancelled>()?;
        Ok(0)
    });
    d.cancel();
    assert_eq!(d.result().unwrap().unwrap(), 0);
}
