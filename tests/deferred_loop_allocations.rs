//! `loop_fn` allocates nothing per iteration beyond the step's own Deferred:
//! none for steps that answer at once, and for steps that wait, no more
//! than the same Deferreds cost without the loop.

#[path = "util/alloc_count.rs"]
mod alloc_count;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

use deferloop::deferred::loop_fn;
use deferloop::{Deferred, Failure, Resolver};
use std::cell::RefCell;
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;

fn ready_loop(n: u64) -> u64 {
    let before = alloc_count::allocs();
    let d = loop_fn(0u64, move |x| {
        Ok::<_, Failure>(if x == n { Break(x) } else { Continue(x + 1) })
    });
    assert_eq!(d.result().unwrap().unwrap(), n);
    alloc_count::allocs() - before
}

#[test]
fn steps_that_answer_at_once_allocate_nothing_per_step() {
    let few = ready_loop(10);
    let many = ready_loop(100_000);
    assert_eq!(
        few, many,
        "{few} allocations for 10 steps, {many} for 100,000"
    );
}

type Step = ControlFlow<u64, u64>;

/// Runs `n` waiting steps, each a `Deferred::new()` fired from outside, and
/// returns the allocations per step.
fn waiting_loop(n: u64) -> f64 {
    let pending: Rc<RefCell<Option<Resolver<Step>>>> = Rc::default();
    let p = pending.clone();
    let before = alloc_count::allocs();
    let d = loop_fn(0u64, move |x| {
        let (d, r) = Deferred::<Step>::new();
        *p.borrow_mut() = Some(r);
        d.map(move |_| if x == n { Break(x) } else { Continue(x + 1) })
    });
    loop {
        let r = pending.borrow_mut().take();
        let Some(r) = r else { break };
        r.callback(Continue(0)).unwrap();
    }
    assert_eq!(d.result().unwrap().unwrap(), n);
    (alloc_count::allocs() - before) as f64 / n as f64
}

/// The same Deferreds, created, mapped, given a callback and fired
/// without a loop.
fn bare_steps(n: u64) -> f64 {
    let keep = Rc::new(0u64);
    let before = alloc_count::allocs();
    for x in 0..n {
        let (d, r) = Deferred::<Step>::new();
        let d: Deferred<Step> = d.map(move |_| Continue(x + 1));
        let k = keep.clone();
        d.add_both(move |_| {
            drop(k);
            Ok(())
        })
        .detach();
        r.callback(Continue(0)).unwrap();
    }
    (alloc_count::allocs() - before) as f64 / n as f64
}

#[test]
fn a_waiting_step_costs_no_more_than_its_own_deferred() {
    let looped = waiting_loop(10_000);
    let bare = bare_steps(10_000);
    assert!(
        looped <= bare + 0.01,
        "{looped} allocations a step in the loop, {bare} bare"
    );
}
