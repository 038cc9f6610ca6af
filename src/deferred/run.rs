//! The iterative chain runner: how a result flows through callbacks and from
//! one Deferred into the next without growing the native stack.
//!
//! Owns `run` (the general runner, for CONTINUE and FORWARD links),
//! `run_calls` (the hot loop over consecutive callbacks) and what a callback's
//! outcome does to its node (`settle`, `chain_to`). Tests: in `node.rs` and
//! tests/deferred_stack_safety.rs.

use super::errors::ChainedToSelf;
use super::node::{Callback, Link, Node, NodeRef, Outcome, Res};
use crate::Failure;
use smallvec::SmallVec;
use std::cell::RefMut;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;

/// Runs the chain of `start`, and of every Deferred its result flows into.
///
/// Iterative, not recursive (Twisted's `_runCallbacks`): `stack` holds the nodes
/// whose result is flowing, the top one runs. On a `Continue` link the result
/// moves to the waiting outer node, which is pushed; on a `Forward` link the
/// target is fired and pushed. When the top node finishes, is paused, or is
/// already being run by a frame further up the native stack, it is popped and
/// the one below resumes (Twisted returns on a paused top, stranding the links
/// queued behind the marker below it). So a result can flow through any number
/// of nodes at constant native stack depth.
pub(super) fn run(start: NodeRef) {
    let mut stack: SmallVec<[NodeRef; 4]> = SmallVec::new();
    stack.push(start);
    'nodes: while let Some(top) = stack.last() {
        let cur = top.clone();
        loop {
            let mut n = cur.borrow_mut();
            if !n.runnable() {
                drop(n);
                stack.pop();
                continue 'nodes;
            }
            let Some(link) = n.links.pop_front() else {
                drop(n);
                stack.pop();
                continue 'nodes;
            };
            match link {
                Link::Call(f, at) => {
                    let r = n.result.take().expect("runnable node has a result");
                    n.running = true;
                    drop(n);
                    if run_calls(&cur, f, at, r) != Next::More {
                        stack.pop();
                        continue 'nodes;
                    }
                }
                Link::Continue(waiter) => {
                    let r = n.result.take();
                    drop(n);
                    let mut w = waiter.borrow_mut();
                    w.result = r;
                    w.waiting = false;
                    w.chained_to = None;
                    drop(w);
                    stack.push(waiter);
                    continue 'nodes;
                }
                Link::Forward(target, at) => {
                    let r = n.result.take().expect("runnable node has a result");
                    drop(n);
                    let mut t = target.borrow_mut();
                    if t.called {
                        let suppressed = t.suppress_already_called;
                        t.suppress_already_called = false;
                        let err = t.already_called(at);
                        drop(t);
                        drop(r);
                        if !suppressed {
                            cur.borrow_mut().result = Some(Err(Failure::with_origin(err, at)));
                        }
                    } else {
                        t.called = true;
                        t.fired_at = Some(at);
                        t.result = Some(r);
                        t.chained_to = None;
                        let canceller = t.canceller.take();
                        drop(t);
                        drop(canceller);
                        // `cur` keeps no result: it was handed on.
                        stack.push(target);
                        continue 'nodes;
                    }
                }
            }
        }
    }
}

/// Calls one callback on the result in `slot`, leaving its outcome there; a
/// panic becomes a failure whose origin is `at`.
#[inline(always)]
pub(super) fn call(
    f: impl FnOnce(&mut Outcome),
    slot: &mut Outcome,
    at: &'static Location<'static>,
) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(slot))) {
        *slot = Outcome::Done(Err(Failure::from_panic(p, at)));
    }
}

/// Where a node stands after the outcome of a callback was settled.
#[derive(PartialEq, Eq)]
pub(super) enum Next {
    /// It has its result and links are queued: the runner goes on with it.
    More,
    /// It has its result and nothing is queued.
    Idle,
    /// It waits on a Deferred that a callback returned.
    Wait,
}

/// Runs the callback `f` of `cur` (marked running, its result taken out as
/// `r`) and, while `cur` stays unpaused and its next link is a callback, that
/// one too: the result stays in one local slot from one callback to the next,
/// and the node is borrowed once per callback. Then settles the outcome.
pub(super) fn run_calls(
    cur: &NodeRef,
    mut f: Callback,
    mut at: &'static Location<'static>,
    r: Res,
) -> Next {
    let mut slot = Outcome::Done(r);
    loop {
        call(|slot: &mut Outcome| f.run(slot), &mut slot, at);
        let mut n = cur.borrow_mut();
        if let Outcome::Done(_) = slot {
            if n.paused == 0 {
                if let Some((g, g_at)) = n.links.pop_call() {
                    drop(n);
                    (f, at) = (g, g_at);
                    continue;
                }
            }
        }
        n.running = false;
        return settle(n, cur, slot, at);
    }
}

/// Stores the outcome of a callback of `cur` (borrowed as `n`, not running).
#[inline]
pub(super) fn settle(
    mut n: RefMut<'_, Node>,
    cur: &NodeRef,
    out: Outcome,
    at: &'static Location<'static>,
) -> Next {
    match out {
        Outcome::Done(r) => {
            n.result = Some(r);
            n.next()
        }
        Outcome::Chain(inner) => chain_to(n, cur, inner, at),
        Outcome::Taken => unreachable!("a callback leaves an outcome"),
    }
}

/// A callback of `cur` (borrowed as `n`, not running) returned the Deferred
/// `inner`. If `inner` is ready, its result is taken over (the inner
/// keeps none, so its failure is not reported twice); if it is `cur` itself,
/// the result is a `ChainedToSelf` failure. Otherwise `cur` waits: a CONTINUE
/// link on `inner` hands the result over at the end of its chain.
#[inline(never)]
fn chain_to(
    mut n: RefMut<'_, Node>,
    cur: &NodeRef,
    inner: NodeRef,
    at: &'static Location<'static>,
) -> Next {
    if Rc::ptr_eq(&inner, cur) {
        n.result = Some(Err(Failure::with_origin(ChainedToSelf, at)));
        return n.next();
    }
    let mut i = inner.borrow_mut();
    let next = if i.is_ready() {
        n.result = i.result.take();
        n.next()
    } else {
        n.waiting = true;
        n.chained_to = Some(Rc::downgrade(&inner));
        i.links.push_back(Link::Continue(cur.clone()));
        Next::Wait
    };
    drop(i);
    drop(n);
    // May drop an inner nobody can fire: then `cur` simply waits forever, as
    // it must.
    drop(inner);
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::node::{add_call, fire, pause, take_result, unpause, Value};
    use std::cell::Cell;

    fn here() -> &'static Location<'static> {
        Location::caller()
    }

    /// What `run_calls` reads between callbacks (the pause count, the next
    /// link) is changed by the callbacks themselves: the first appends to its
    /// own chain (moving the queue from the node's inline slots to a heap
    /// block), the second pauses it. The chain stops at the pause, then sees
    /// every appended link once, in order.
    #[test]
    fn callbacks_that_grow_and_pause_their_own_chain() {
        let node = Node::new_ref(here());
        let ran = Rc::new(Cell::new(0u64));
        let (n2, ran2) = (node.clone(), ran.clone());
        add_call(
            &node,
            move |r: Res| {
                for k in 0..12u64 {
                    let ran = ran2.clone();
                    let step = move |r: Res| {
                        ran.set(ran.get() + 1);
                        Outcome::Done(r.map(|v| Value::new(v.take::<u64>() * 2 + k)))
                    };
                    add_call(&n2, step, here());
                }
                Outcome::Done(r)
            },
            here(),
        );
        let n3 = node.clone();
        let pause_own = move |r: Res| {
            pause(&n3);
            Outcome::Done(r)
        };
        add_call(&node, pause_own, here());
        fire(&node, Ok(Value::new(1u64)), here()).ok().unwrap();
        assert_eq!(ran.get(), 0, "links behind a pause ran");
        assert!(node.borrow().is_paused() && !node.borrow().running);
        assert!(take_result(&node).is_none());
        assert!(unpause(&node));
        assert_eq!(ran.get(), 12);
        let want = (0..12u64).fold(1, |x, k| x * 2 + k);
        assert_eq!(
            take_result(&node).unwrap().ok().unwrap().take::<u64>(),
            want
        );
    }
}
