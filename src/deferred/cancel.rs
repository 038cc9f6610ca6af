//! How a chain ends without its producer's value: `cancel` (Twisted's rules,
//! and the allocation-free cancel hook)
//! and abandonment (the last `Resolver` dropped unfired fails the chain with
//! `Abandoned`); `CancelHandle` and `cancel_weak`, cancelling through a weak
//! reference. Tests: below (the Resolver count) and
//! tests/deferred_cancel.rs, tests/deferred_abandoned.rs.

use super::errors::{Abandoned, Cancelled};
use super::node::{NodeRef, OnCancel, WeakNode};
use super::run::fire;
use crate::Failure;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};

/// Cancels a Deferred through a weak reference (internal: timers, lists).
#[derive(Clone)]
pub(crate) struct CancelHandle(pub(super) WeakNode);

impl CancelHandle {
    #[track_caller]
    pub(crate) fn cancel(&self) {
        if let Some(n) = self.0.upgrade() {
            cancel(&n);
        }
    }
}

#[track_caller]
pub(crate) fn cancel_weak(w: &WeakNode) {
    if let Some(n) = w.upgrade() {
        cancel(&n);
    }
}

/// A `Resolver` of `node` was made (created or cloned).
pub(crate) fn add_resolver(node: &NodeRef) {
    let mut n = node.borrow_mut();
    n.resolvers = n.resolvers.checked_add(1).expect("2^32 Resolvers");
}

/// A `Resolver` of `node`, made at `made_at`, was dropped. If it was the last
/// one and the node has not fired, nobody can fire it any more: it fails with
/// [`Abandoned`] (as a dropped `oneshot::Sender` does), so that nothing waits
/// forever. Not when nobody listens (no handle but this one, nothing queued),
/// nor when a `chain_deferred` link can still fire it.
#[inline]
pub(crate) fn drop_resolver(node: &NodeRef, made_at: &'static Location<'static>) {
    // A node is never borrowed while code that could drop its own Resolver
    // runs; if it were, leaving the count high only forgoes the report.
    let Ok(mut n) = node.try_borrow_mut() else {
        return;
    };
    n.resolvers -= 1;
    if n.resolvers > 0 || n.called {
        return;
    }
    drop(n);
    last_resolver_dropped(node, made_at);
}

/// The last `Resolver` of the unfired `node` was dropped.
#[cold]
#[inline(never)]
fn last_resolver_dropped(node: &NodeRef, made_at: &'static Location<'static>) {
    let mut n = node.borrow_mut();
    // `chained_to` of an unfired node: the `chain_deferred` source feeding it.
    let fed = n.chained_to.as_ref().is_some_and(|w| w.strong_count() > 0);
    if fed || (Rc::strong_count(node) == 1 && n.links.is_empty()) {
        return;
    }
    let created_at = n.created_at;
    n.quiet = n.links.is_empty();
    drop(n);
    abandon(node, created_at, made_at);
}

#[cold]
#[inline(never)]
fn abandon(
    node: &NodeRef,
    created_at: &'static Location<'static>,
    made_at: &'static Location<'static>,
) {
    let e = Abandoned {
        created_at,
        resolver_made_at: made_at,
    };
    let f = Failure::with_origin_and_backtrace(e, made_at);
    let _ = fire(node, Err(f), made_at);
}

/// Twisted's `cancel()`.
///
/// - Not fired, with a canceller: the canceller runs once; if it did not fire the
///   node, a `Cancelled` failure follows (nothing is suppressed later). A panicking
///   canceller leaves the node unfired and is logged.
/// - Not fired, no canceller: errback with `Cancelled` and absorb one later fire.
///   A cancel hook is told after that errback (its callbacks have run).
/// - Fired and waiting on an inner Deferred: cancel the inner one instead.
/// - Otherwise nothing.
#[track_caller]
pub(crate) fn cancel(node: &NodeRef) {
    let at = Location::caller();
    let mut n = node.borrow_mut();
    if !n.called {
        match n.canceller.take() {
            Some(OnCancel::Run(c)) => {
                // Counted as a Resolver while the canceller runs: one that
                // drops the producer's Resolvers (a lock forgetting a
                // waiter) must not abandon the Deferred before `Cancelled`.
                n.resolvers += 1;
                drop(n);
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| c(node))) {
                    let created = node.borrow().created_at;
                    log::error!(
                        deferred_created_at:% = created;
                        "canceller of Deferred created at {created} panicked: {}; the Deferred stays unfired",
                        super::failure::panic_message(&*p)
                    );
                } else if !node.borrow().called {
                    let _ = fire(node, Err(Failure::with_origin(Cancelled, at)), at);
                }
                drop_resolver(node, at);
            }
            hook => {
                n.suppress_already_called = true;
                drop(n);
                let _ = fire(node, Err(Failure::with_origin(Cancelled, at)), at);
                if let Some(OnCancel::Tell(hook)) = hook {
                    if let Some(hook) = hook.upgrade() {
                        hook.cancelled();
                    }
                }
            }
        }
    } else if n.waiting {
        let inner = n.chained_to.as_ref().and_then(Weak::upgrade);
        drop(n);
        if let Some(inner) = inner {
            cancel(&inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::node::{Node, Outcome, Res};
    use crate::deferred::run::{add_call, forward, take_result};

    fn here() -> &'static Location<'static> {
        Location::caller()
    }

    fn listen(node: &NodeRef) {
        add_call(node, |r: Res| Outcome::Done(r), here());
    }

    fn is_abandoned(node: &NodeRef) -> bool {
        let r = take_result(node).expect("fired and idle");
        r.err().is_some_and(|f| f.check::<Abandoned>())
    }

    #[test]
    fn only_the_last_resolver_abandons() {
        let node = Node::new_ref(here());
        listen(&node);
        add_resolver(&node);
        add_resolver(&node);
        drop_resolver(&node, here());
        assert!(!node.borrow().called);
        assert_eq!(node.borrow().resolvers, 1);
        drop_resolver(&node, here());
        assert_eq!(node.borrow().resolvers, 0);
        assert!(is_abandoned(&node));
    }

    #[test]
    fn a_fired_node_is_never_abandoned() {
        let node = Node::new_ref(here());
        add_resolver(&node);
        let _ = fire(&node, Ok(crate::deferred::node::Value::new(1u8)), here());
        drop_resolver(&node, here());
        assert!(take_result(&node).unwrap().is_ok());
    }

    #[test]
    fn a_node_fed_by_a_live_forward_link_is_not_abandoned() {
        let source = Node::new_ref(here());
        let target = Node::new_ref(here());
        listen(&target);
        add_resolver(&target);
        forward(&source, &target, here());
        drop_resolver(&target, here());
        assert!(!target.borrow().called);
        drop(source); // the link that fed it is gone
        add_resolver(&target);
        drop_resolver(&target, here());
        assert!(is_abandoned(&target));
    }

    #[test]
    fn a_cancel_counts_as_a_resolver_while_the_canceller_runs() {
        let node = Node::new_ref(here());
        add_resolver(&node);
        node.borrow_mut().set_canceller(Box::new(|n: &NodeRef| {
            // The producer forgets its Resolver: not an abandonment.
            drop_resolver(n, Location::caller());
        }));
        listen(&node);
        cancel(&node);
        assert_eq!(node.borrow().resolvers, 0);
        let f = take_result(&node).unwrap().err().unwrap();
        assert!(f.check::<Cancelled>(), "{f:?}");
    }

    #[test]
    fn a_cancel_hook_is_told_after_the_cancelled_failure_has_run() {
        use crate::deferred::node::CancelHook;
        use std::cell::{Cell, RefCell};
        struct Hook(Cell<usize>, RefCell<Option<NodeRef>>);
        impl CancelHook for Hook {
            fn cancelled(self: Rc<Self>) {
                // The node has failed, and its callbacks have run.
                let node = self.1.borrow().clone().unwrap();
                assert!(node.borrow().called);
                assert!(node.borrow().links.is_empty());
                self.0.set(self.0.get() + 1);
            }
        }
        let node = Node::new_ref(here());
        let hook = Rc::new(Hook(Cell::new(0), RefCell::new(Some(node.clone()))));
        let weak: Weak<Hook> = Rc::downgrade(&hook);
        node.borrow_mut().set_cancel_hook(weak);
        listen(&node);
        cancel(&node);
        assert_eq!(hook.0.get(), 1);
        cancel(&node);
        assert_eq!(hook.0.get(), 1, "told once");
        let f = take_result(&node).unwrap().err().unwrap();
        assert!(f.check::<Cancelled>(), "{f:?}");
        // A hook gone is not told; a fire drops the hook.
        let node = Node::new_ref(here());
        let gone: Weak<Hook> = Rc::downgrade(&Rc::new(Hook(Cell::new(0), RefCell::new(None))));
        node.borrow_mut().set_cancel_hook(gone);
        cancel(&node);
        assert!(node.borrow().called);
        let node = Node::new_ref(here());
        node.borrow_mut()
            .set_cancel_hook(Rc::downgrade(&hook) as Weak<dyn CancelHook>);
        let _ = fire(&node, Ok(crate::deferred::node::Value::new(1u8)), here());
        assert!(node.borrow().canceller.is_none());
        assert_eq!(Rc::weak_count(&hook), 0);
        hook.1.borrow_mut().take();
    }

    #[test]
    fn an_unobserved_abandonment_is_quiet() {
        let node = Node::new_ref(here());
        let extra = node.clone(); // a handle, but nothing queued
        add_resolver(&node);
        drop_resolver(&node, here());
        assert!(node.borrow().quiet, "nobody saw it: no report on drop");
        listen(&extra);
        assert!(!node.borrow().quiet, "a listener sees it");
        assert!(is_abandoned(&node));
    }
}
