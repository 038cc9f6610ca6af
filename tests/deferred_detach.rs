//! `detach()` lets a chain go on purpose: it still runs when fired, and a
//! failure at its end is still reported as unhandled.

use deferloop::deferred::{set_unhandled_failure_hook, Deferred};
use deferloop::Failure;
use std::cell::RefCell;
use std::rc::Rc;

/// A detached chain runs its callbacks when fired later.
#[test]
fn a_detached_chain_still_runs() {
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    let (d, r) = Deferred::<u8>::new();
    d.map(move |n| g.borrow_mut().push(n)).detach();
    r.callback(3).unwrap();
    assert_eq!(*got.borrow(), [3]);
}

/// A detached chain that ends in a failure reports it, once.
#[test]
fn a_detached_chain_reports_its_final_failure() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let previous = set_unhandled_failure_hook(Some(Box::new(move |u| {
        s.borrow_mut().push(u.failure.to_string())
    })));
    let (d, r) = Deferred::<u8>::new();
    d.add_callback(|_| Err::<u8, _>(Failure::msg("detached-end")))
        .detach();
    assert!(seen.borrow().is_empty());
    r.callback(1).unwrap();
    drop(r);
    set_unhandled_failure_hook(previous);
    assert_eq!(*seen.borrow(), ["detached-end"]);
}
