//! A Deferred whose every Resolver was dropped before firing fails with
//! `Abandoned` at that moment, as a dropped `oneshot::Sender` does: nothing
//! waits forever for a result nobody can deliver.

use deferloop::deferred::{fail, Abandoned, Deferred, DeferredQueue};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::rc::Rc;

mod util;

/// The chain runs its errbacks with `Abandoned` when the last Resolver goes;
/// the failure names the creation site and the last Resolver's.
#[test]
fn dropping_the_last_resolver_fails_the_chain_with_abandoned() {
    let created = line!() + 1;
    let (d, r) = Deferred::<u8>::new();
    let cloned = line!() + 1;
    let r2 = r.clone();
    let seen = Rc::new(RefCell::new(None));
    let s = seen.clone();
    let d = d.add_errback(move |f| {
        *s.borrow_mut() = Some(f);
        Ok(0)
    });
    drop(r);
    assert!(seen.borrow().is_none(), "a clone can still fire it");
    drop(r2);
    let f = seen.borrow_mut().take().expect("errback ran at the drop");
    let a = f.downcast_ref::<Abandoned>().unwrap();
    assert_eq!(a.created_at.line(), created);
    assert_eq!(a.resolver_made_at.line(), cloned);
    assert_eq!(f.origin().line(), cloned);
    assert!(f.to_string().contains("abandoned"), "{f}");
    assert_eq!(d.result().unwrap().unwrap(), 0);
}

/// `run_until` on a Deferred whose producer gives up returns instead of
/// running forever.
#[test]
fn run_until_returns_when_the_producer_drops_its_resolver() {
    let ev = EventLoop::new().unwrap();
    let (d, r) = Deferred::<u8>::new();
    ev.call_soon(move |_| drop(r)).unwrap();
    let f = ev.run_until(d).unwrap_err();
    assert!(f.check::<Abandoned>());
}

/// A fired Deferred is not affected by its Resolvers going away, nor is one
/// that nobody listens to reported.
#[test]
fn fired_or_unobserved_deferreds_are_left_alone() {
    let (d, r) = Deferred::<u8>::new();
    r.callback(1).unwrap();
    drop(r);
    assert_eq!(d.result().unwrap().unwrap(), 1);

    util::logs();
    let (d, r) = Deferred::<u8>::new();
    drop(r);
    let f = d.result().unwrap().unwrap_err();
    assert!(
        f.check::<Abandoned>(),
        "a handle still held sees the failure"
    );
    let (d, r) = Deferred::<u8>::new();
    drop(d);
    drop(r); // nobody waits: nothing to report
    assert!(util::logs()
        .mine()
        .iter()
        .all(|r| !r.message.contains("abandoned")));
}

/// An abandoned Deferred that a callback returned fails the outer chain.
#[test]
fn an_abandoned_inner_deferred_fails_the_outer_chain() {
    let keep = Rc::new(RefCell::new(None));
    let k = keep.clone();
    let (d, r) = Deferred::<u8>::new();
    let d = d.add_callback(move |_| {
        let (inner, ir) = Deferred::<u8>::new();
        *k.borrow_mut() = Some(ir);
        inner
    });
    r.callback(1).unwrap();
    let d = d.result().unwrap_err();
    keep.borrow_mut().take();
    assert!(d.result().unwrap().unwrap_err().check::<Abandoned>());
}

/// Getters waiting on a queue that is dropped are abandoned, not stuck.
#[test]
fn getters_of_a_dropped_queue_are_abandoned() {
    let q = DeferredQueue::<u8>::unbounded();
    let waiting = q.get().unwrap();
    drop(q);
    assert!(waiting.result().unwrap().unwrap_err().check::<Abandoned>());
}

/// A `chain_deferred` target is still fed by its source: dropping its own
/// Resolver does not abandon it.
#[test]
fn a_chain_deferred_target_is_not_abandoned_while_its_source_lives() {
    let (src, sr) = Deferred::<u8>::new();
    let (target, tr) = Deferred::<u8>::new();
    src.chain_deferred(&tr);
    drop(tr);
    let target = target.result().unwrap_err();
    sr.callback(4).unwrap();
    assert_eq!(target.result().unwrap().unwrap(), 4);
    let _ = fail::<u8>(Failure::msg("x")).result();
}
