//! Unhandled failures are never silent (R32, R16): a Deferred dropped with a
//! failure as its final result logs exactly once, with its creation site and the
//! failure's origin; handled, taken or moved failures are not logged.

use deferloop::deferred::{fail, succeed, Deferred};
use deferloop::Failure;
use std::cell::RefCell;
use std::rc::Rc;

mod util;

fn unhandled_with(needle: &str) -> Vec<util::Record> {
    util::logs()
        .mine()
        .into_iter()
        .filter(|r| r.message.contains("Unhandled error in Deferred") && r.message.contains(needle))
        .collect()
}

/// Dropping a failed Deferred logs once at error level, with the creation site,
/// the failure's origin and its Display.
#[test]
fn dropped_failure_is_logged_once_with_both_locations() {
    util::logs();
    let created = line!() + 1;
    let (d, r) = Deferred::<u8>::new();
    let origin = line!() + 1;
    r.errback(Failure::msg("unhandled-1")).unwrap();
    drop(d);
    assert!(
        unhandled_with("unhandled-1").is_empty(),
        "resolver still alive"
    );
    drop(r);
    let recs = unhandled_with("unhandled-1");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].level, log::Level::Error);
    assert!(recs[0].message.contains(&format!("{}:{created}", file!())));
    assert!(recs[0].message.contains(&format!("{}:{origin}", file!())));
}

/// A failure produced by a callback is reported with the Deferred's creation site.
#[test]
fn failure_from_a_callback_is_reported() {
    util::logs();
    let created = line!() + 1;
    let d = succeed(1u8).add_callback(|_| Err::<u8, _>(Failure::msg("unhandled-2")));
    drop(d);
    let recs = unhandled_with("unhandled-2");
    assert_eq!(recs.len(), 1);
    assert!(recs[0].message.contains(&format!("{}:{created}", file!())));
}

/// An errback that consumes the failure, and `result()`, both count as handling.
#[test]
fn consumed_or_taken_failures_are_not_logged() {
    util::logs();
    drop(fail::<u8>(Failure::msg("handled-3")).add_errback(|_| Ok(0)));
    let f = fail::<u8>(Failure::msg("handled-3"))
        .result()
        .unwrap()
        .unwrap_err();
    drop(f);
    assert!(unhandled_with("handled-3").is_empty());
}

/// An errback that returns the failure does not consume it (R32).
#[test]
fn errback_returning_the_failure_does_not_consume_it() {
    util::logs();
    drop(fail::<u8>(Failure::msg("unhandled-4")).add_errback(Err));
    assert_eq!(unhandled_with("unhandled-4").len(), 1);
}

/// R16: a failure moved into an outer by chaining is reported once (by the outer).
#[test]
fn chained_failure_is_reported_once_by_the_outer() {
    util::logs();
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let created = line!() + 1;
    let (outer, or) = Deferred::<()>::new();
    let outer = outer.add_callback(move |()| slot.borrow_mut().take().unwrap());
    or.callback(()).unwrap();
    ir.errback(Failure::msg("unhandled-5")).unwrap();
    drop(ir);
    drop(outer);
    drop(or);
    let recs = unhandled_with("unhandled-5");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0].message.contains(&format!("{}:{created}", file!())));
}

/// A pending, never-fired Deferred logs nothing; nor does a success.
#[test]
fn unfired_and_successful_deferreds_log_nothing() {
    util::logs();
    let before = util::logs().mine().len();
    let (d, r) = Deferred::<u8>::new();
    drop((d, r));
    drop(succeed(1u8));
    assert_eq!(util::logs().mine().len(), before);
}
