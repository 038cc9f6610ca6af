//! What fires, adds to, pauses and runs a node: how a result flows through
//! callbacks and from one Deferred into the next without growing the native
//! stack.
//!
//! Owns `fire`, `add_link`, `add_call`, `pause`/`unpause`, `forward`,
//! `take_result`, `run` (the general runner, for CONTINUE and FORWARD links),
//! `run_calls` (the hot loop over consecutive callbacks) and what a callback's
//! outcome does to its node (`settle`, `chain_to`). Tests: below (the node's
//! invariants) and tests/deferred_stack_safety.rs.
//!
//! The hot path, and why it looks the way it does (each measured with
//! callgrind): `fire` runs the callbacks at the head of a chain itself
//! ([`run_calls`]), and [`run`] only takes over for CONTINUE/FORWARD links; a
//! callback added to a fired, idle node runs at once without a link
//! ([`add_call`]). Between consecutive callbacks the result stays in one local
//! slot (`Outcome`) that each callback reads its input from and writes its
//! outcome to; the node holds no result meanwhile and is marked running, so
//! nobody can tell. Code on that path has no panicking branch while it owns a
//! value: a cleanup pad would pin the value to the stack (see `Value::take`).

use super::errors::{AlreadyCalled, ChainedToSelf};
use super::node::{Callback, Link, Next, Node, NodeRef, Outcome, Res, StepFn};
use crate::Failure;
use smallvec::SmallVec;
use std::cell::RefMut;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;

/// Appends a link; runs the chain at once if the node has fired and is idle.
#[inline]
pub(crate) fn add_link(node: &NodeRef, link: Link) {
    let mut n = node.borrow_mut();
    n.quiet = false;
    n.links.push_back(link);
    let go = n.called && n.runnable();
    drop(n);
    if go {
        run(node.clone());
    }
}

/// Adds a user callback to the chain. If the node has fired and is idle (not
/// paused, waiting or running, nothing queued), `step` runs at once, unboxed
/// and without a link: what `add_link` followed by [`run`] would do, minus the
/// link. Callbacks the step adds to this chain meanwhile run after it.
#[inline]
pub(crate) fn add_call(
    node: &NodeRef,
    step: impl StepFn + 'static,
    at: &'static Location<'static>,
) {
    let mut n = node.borrow_mut();
    if !n.called {
        // A chain being built: queue only. (`quiet` is set only on a node
        // fired at once, see `cancel::last_resolver_dropped`.)
        n.links.push_call(step, at);
        return;
    }
    n.quiet = false;
    let go = n.runnable();
    if !(go && n.links.is_empty()) {
        n.links.push_call(step, at);
        drop(n);
        if go {
            run(node.clone());
        }
        return;
    }
    let r = n.result.take().expect("runnable node has a result");
    n.running = true;
    drop(n);
    let mut slot = Outcome::Done(r);
    call(|slot: &mut Outcome| step.run_in(slot), &mut slot, at);
    let mut n = node.borrow_mut();
    n.running = false;
    if settle(n, node, slot, at) == Next::More {
        run(node.clone());
    }
}

/// Fires `node` with `r`. A refused fire hands `r` back with the error (the
/// caller decides whether to drop it or to give it to someone else).
pub(crate) fn fire(
    node: &NodeRef,
    r: Res,
    at: &'static Location<'static>,
) -> Result<(), (AlreadyCalled, Res)> {
    let mut n = node.borrow_mut();
    if n.called {
        if n.suppress_already_called {
            n.suppress_already_called = false;
            drop(n);
            drop(r);
            return Ok(());
        }
        let e = n.already_called(at);
        return Err((e, r));
    }
    n.called = true;
    n.fired_at = Some(at);
    // The canceller is dropped on firing: it often holds what holds this node.
    let canceller = n.canceller.take();
    if n.paused == 0 {
        if let Some((f, f_at)) = n.links.pop_call() {
            // The usual case: callbacks at the head of the chain. Run them
            // now, the result going straight in; the general runner only if
            // other links follow.
            n.running = true;
            drop(n);
            drop(canceller);
            if run_calls(node, f, f_at, r) == Next::More {
                run(node.clone());
            }
            return Ok(());
        }
    }
    n.result = Some(r);
    let go = n.runnable() && !n.links.is_empty();
    drop(n);
    drop(canceller);
    if go {
        run(node.clone());
    }
    Ok(())
}

/// `pause()`: while paused, firing and adding only store.
pub(crate) fn pause(node: &NodeRef) {
    let mut n = node.borrow_mut();
    n.paused = n.paused.checked_add(1).expect("Deferred paused 2^32 times");
}

/// `unpause()`: `false` if the node was not paused (count unchanged).
pub(crate) fn unpause(node: &NodeRef) -> bool {
    let mut n = node.borrow_mut();
    if n.paused == 0 {
        return false;
    }
    n.paused -= 1;
    let go = n.called && n.runnable();
    drop(n);
    if go {
        run(node.clone());
    }
    true
}

/// Takes the final result of a fired, idle node with nothing left to run.
#[inline]
pub(crate) fn take_result(node: &NodeRef) -> Option<Res> {
    let mut n = node.borrow_mut();
    if n.is_ready() {
        n.result.take()
    } else {
        None
    }
}

/// `chain_deferred`: when `node`'s chain reaches this point, fire `target`.
pub(crate) fn forward(node: &NodeRef, target: &NodeRef, at: &'static Location<'static>) {
    target.borrow_mut().chained_to = Some(Rc::downgrade(node));
    add_link(node, Link::Forward(target.clone(), at));
}

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
    use crate::deferred::node::Value;
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

    fn push_add(node: &NodeRef, k: u64) {
        add_link(
            node,
            Link::Call(
                Callback::new(move |r: Res| {
                    Outcome::Done(r.map(|v| Value::new(v.take::<u64>() + k)))
                }),
                here(),
            ),
        );
    }

    fn call_add(node: &NodeRef, k: u64) {
        add_call(
            node,
            move |r: Res| Outcome::Done(r.map(|v| Value::new(v.take::<u64>() + k))),
            here(),
        );
    }

    #[test]
    fn node_is_not_borrowed_while_a_callback_runs() {
        let node = Node::new_ref(here());
        let n2 = node.clone();
        // Recorded, not asserted, in the callback: the runner would turn a
        // failed assertion there into the chain's failure.
        let seen = Rc::new(std::cell::Cell::new(None));
        let s = seen.clone();
        add_link(
            &node,
            Link::Call(
                Callback::new(move |r| {
                    let free = n2.try_borrow_mut().is_ok();
                    s.set(Some((free, n2.borrow().running)));
                    Outcome::Done(r)
                }),
                here(),
            ),
        );
        fire(&node, Ok(Value::new(1u64)), here()).ok().unwrap();
        assert_eq!(seen.get(), Some((true, true)));
        assert!(!node.borrow().running);
        assert_eq!(take_result(&node).unwrap().ok().unwrap().take::<u64>(), 1);
    }

    #[test]
    fn a_callback_added_to_a_fired_idle_node_runs_unqueued_and_unborrowed() {
        let node = Node::fired(Ok(Value::new(1u64)), here());
        let n2 = node.clone();
        add_call(
            &node,
            move |r: Res| {
                let n = n2.try_borrow_mut().expect("not borrowed while it runs");
                assert!(n.running);
                assert!(n.links.is_empty());
                assert!(n.result.is_none());
                drop(n);
                Outcome::Done(r.map(|v| Value::new(v.take::<u64>() + 1)))
            },
            here(),
        );
        assert!(!node.borrow().running);
        call_add(&node, 10);
        assert_eq!(take_result(&node).unwrap().ok().unwrap().take::<u64>(), 12);
    }

    #[test]
    fn a_callback_added_to_an_unfired_or_paused_node_is_queued() {
        let node = Node::new_ref(here());
        call_add(&node, 1);
        assert_eq!(node.borrow().links.len(), 1);
        let fired = Node::fired(Ok(Value::new(0u64)), here());
        pause(&fired);
        call_add(&fired, 1);
        assert_eq!(fired.borrow().links.len(), 1);
        assert!(unpause(&fired));
        assert!(fired.borrow().links.is_empty());
        assert_eq!(take_result(&fired).unwrap().ok().unwrap().take::<u64>(), 1);
    }

    #[test]
    fn result_is_absent_while_waiting_and_pause_count_returns_to_zero() {
        let inner = Node::new_ref(here());
        let outer = Node::fired(Ok(Value::new(0u64)), here());
        let i2 = inner.clone();
        add_link(
            &outer,
            Link::Call(Callback::new(move |_| Outcome::Chain(i2)), here()),
        );
        {
            let o = outer.borrow();
            assert!(o.waiting);
            assert!(o.result.is_none());
            assert!(o.chained_to.is_some());
        }
        assert_eq!(inner.borrow().links.len(), 1);
        fire(&inner, Ok(Value::new(5u64)), here()).ok().unwrap();
        let o = outer.borrow();
        assert!(!o.waiting);
        assert!(o.chained_to.is_none());
        assert!(inner.borrow().result.is_none());
        drop(o);
        push_add(&outer, 1);
        assert_eq!(take_result(&outer).unwrap().ok().unwrap().take::<u64>(), 6);
    }

    #[test]
    fn unpause_at_zero_reports_and_leaves_count() {
        let node = Node::new_ref(here());
        assert!(!unpause(&node));
        assert_eq!(node.borrow().paused, 0);
        pause(&node);
        assert!(unpause(&node));
        assert_eq!(node.borrow().paused, 0);
    }

    #[test]
    fn refused_fire_hands_the_result_back() {
        let node = Node::fired(Ok(Value::new(1u64)), here());
        let (e, r) = fire(&node, Ok(Value::new(2u64)), here()).err().unwrap();
        assert_eq!(r.ok().unwrap().take::<u64>(), 2);
        assert_eq!(e.created_at, node.borrow().created_at);
    }

    #[test]
    fn dropping_a_long_forward_chain_is_iterative() {
        let first = Node::new_ref(here());
        let mut prev = first.clone();
        for _ in 0..10_000 {
            let next = Node::new_ref(here());
            forward(&prev, &next, here());
            prev = next;
        }
        drop(prev);
        drop(first); // must not recurse 10,000 frames deep
    }
}
