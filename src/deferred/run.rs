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
