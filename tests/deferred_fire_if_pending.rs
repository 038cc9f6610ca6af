//! `callback_if_pending` / `errback_if_pending`: "fire if still pending", for
//! producers that expect to finish twice (an answer, then the close).

use deferloop::deferred::Deferred;
use deferloop::Failure;

/// The first call fires; later ones report `false` and change nothing.
#[test]
fn fire_if_pending_fires_once_and_then_reports_false() {
    let (d, r) = Deferred::<u8>::new();
    assert!(r.callback_if_pending(1));
    assert!(!r.errback_if_pending(Failure::msg("closed")));
    assert!(!r.callback_if_pending(2));
    assert_eq!(d.result().unwrap().unwrap(), 1);

    let (d, r) = Deferred::<u8>::new();
    assert!(r.errback_if_pending(Failure::msg("closed")));
    assert!(!r.callback_if_pending(2));
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "closed");

    let (d, r) = Deferred::<u8>::new();
    assert!(r.resolve_if_pending(Ok(3)));
    assert!(!r.resolve_if_pending(Err(Failure::msg("late"))));
    assert_eq!(d.result().unwrap().unwrap(), 3);
}

/// The strict calls still refuse a second fire: misuse stays visible.
#[test]
fn callback_still_refuses_a_second_fire() {
    let (_d, r) = Deferred::<u8>::new();
    r.callback(1).unwrap();
    assert!(r.callback(2).is_err());
}
