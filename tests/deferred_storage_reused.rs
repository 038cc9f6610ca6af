//! A Deferred whose chain is over and that nothing refers to any more gives
//! its storage back to its thread: the next `Deferred::new` takes it, so a
//! Deferred made, fired and done with in a loop allocates nothing after the
//! first. The reuse must be invisible: a reused Deferred starts unfired,
//! unpaused, with no callbacks and no result, and a failure nobody handled is
//! still reported, once. Allocations are counted per thread (the tests of this
//! binary run in parallel).

use deferloop::deferred::{set_unhandled_failure_hook, Deferred};
use deferloop::Failure;
use std::cell::Cell;
use std::rc::Rc;

#[path = "util/alloc_count.rs"]
mod alloc_count;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

fn chain(i: u64) -> u64 {
    let (d, r) = Deferred::<u64>::new();
    let mut d = d;
    for _ in 0..10 {
        d = d.add_callback(|x| Ok::<_, Failure>(x + 1));
    }
    r.callback(i).unwrap();
    d.result().unwrap().unwrap()
}

#[test]
fn a_ten_step_chain_in_a_loop_allocates_nothing_after_the_first() {
    assert_eq!(chain(0), 10);
    let before = alloc_count::allocs();
    for i in 0..1000 {
        assert_eq!(chain(i), i + 10);
    }
    assert_eq!(alloc_count::allocs() - before, 0);
}

#[test]
fn a_reused_deferred_starts_as_a_new_one() {
    // Leave a node in the pool that fired, was paused and unpaused, and was
    // cancelled after firing (which does nothing).
    let (d, r) = Deferred::<u8>::new();
    d.pause();
    r.callback(1).unwrap();
    d.unpause().unwrap();
    d.cancel();
    assert_eq!(d.result().unwrap().unwrap(), 1);
    drop(r);

    let (d, r) = Deferred::<u8>::new();
    assert!(!d.is_called() && !d.is_paused() && !r.is_called());
    assert_eq!(d.created_at().line(), line!() - 2);
    let d = d.result().unwrap_err(); // no result carried over
    let seen = Rc::new(Cell::new(0));
    let s = seen.clone();
    let d = d.add_callback(move |x| {
        s.set(s.get() + 1);
        Ok::<_, Failure>(x * 2)
    });
    r.callback(21).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 42);
    assert_eq!(seen.get(), 1);
}

#[test]
fn an_unhandled_failure_is_reported_once_when_its_storage_is_reused() {
    let reports = Rc::new(Cell::new(0));
    let n = reports.clone();
    set_unhandled_failure_hook(Some(Box::new(move |u| {
        assert!(u.failure.to_string().contains("nobody-took-it"));
        n.set(n.get() + 1);
    })));
    let (d, r) = Deferred::<u8>::new();
    r.errback(Failure::msg("nobody-took-it")).unwrap();
    drop(d);
    drop(r); // the last reference: reported, and the storage kept
    assert_eq!(reports.get(), 1);
    for _ in 0..3 {
        let (d, r) = Deferred::<u8>::new();
        r.callback(0).unwrap();
        assert_eq!(d.result().unwrap().unwrap(), 0);
    }
    assert_eq!(reports.get(), 1);
    set_unhandled_failure_hook(None);
}
