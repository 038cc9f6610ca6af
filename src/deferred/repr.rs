//! What a `Deferred` handle holds: the node of its chain, or — for a Deferred
//! that has fired and that nothing else can reach — just its result.
//!
//! Owns `Repr`. `succeed`, `fail` and `maybe_deferred` make a bare result, and
//! a callback added to one runs at once and leaves a bare result again: no
//! node, no allocation, as long as the chain stays synchronous. A node is made
//! the first time one is needed (to pause, to hand out a cancel handle, to
//! wait on a Deferred a callback returned, to chain to a `Resolver`); from
//! then on the handle holds it. Nobody can tell the two apart: a bare result
//! is exactly a fired, idle node with nothing queued whose only owner is the
//! handle (a `Resolver` or a cancel handle would need a node).

use super::node::{Node, NodeRef, Outcome, Res, StepFn};
use super::run::{add_call, call, settle};
use std::panic::Location;

#[derive(Default)]
pub(super) enum Repr {
    /// The chain's node.
    Node(NodeRef),
    /// A fired, idle chain with nothing queued: its result, and where the
    /// Deferred was created.
    Ready(Res, &'static Location<'static>),
    /// Moved out (only seen inside a `Deferred` method, or by its drop).
    #[default]
    Gone,
}

impl Repr {
    /// The node of the chain, made now from a bare result.
    pub(super) fn into_node(self) -> NodeRef {
        match self {
            Repr::Node(n) => n,
            Repr::Ready(r, at) => Node::fired(r, at),
            Repr::Gone => gone(),
        }
    }

    /// Adds `step` to the chain: on a bare result it runs now, as it would on
    /// a fired, idle node (`add_call`), and its outcome is the new result.
    #[inline]
    pub(super) fn push(self, step: impl StepFn + 'static, at: &'static Location<'static>) -> Repr {
        match self {
            Repr::Node(n) => {
                add_call(&n, step, at);
                Repr::Node(n)
            }
            Repr::Ready(r, created) => {
                let mut slot = Outcome::Done(r);
                call(|slot: &mut Outcome| step.run_in(slot), &mut slot, at);
                match slot {
                    Outcome::Done(r) => Repr::Ready(r, created),
                    other => Repr::Node(wait_on(other, created, at)),
                }
            }
            Repr::Gone => gone(),
        }
    }

    /// Whether a callback added now would run at once.
    #[inline]
    pub(super) fn is_ready(&self) -> bool {
        match self {
            Repr::Node(n) => n.borrow().is_ready(),
            Repr::Ready(..) => true,
            Repr::Gone => gone(),
        }
    }

    /// Whether the Deferred has fired.
    pub(super) fn is_called(&self) -> bool {
        match self {
            Repr::Node(n) => n.borrow().is_called(),
            Repr::Ready(..) => true,
            Repr::Gone => gone(),
        }
    }

    /// Whether the Deferred is paused (or waiting on a chained one).
    pub(super) fn is_paused(&self) -> bool {
        match self {
            Repr::Node(n) => n.borrow().is_paused(),
            Repr::Ready(..) => false,
            Repr::Gone => gone(),
        }
    }

    /// Where the Deferred this one waits on was created, if it waits.
    pub(super) fn waiting_on(&self) -> Option<&'static Location<'static>> {
        match self {
            Repr::Node(n) => n.borrow().waiting_on(),
            _ => None,
        }
    }

    /// Where the Deferred was created.
    pub(super) fn created_at(&self) -> &'static Location<'static> {
        match self {
            Repr::Node(n) => n.borrow().created_at(),
            Repr::Ready(_, at) => at,
            Repr::Gone => gone(),
        }
    }
}

/// A callback on a bare result returned a Deferred that is not ready (`out`
/// is `Outcome::Chain`): the chain needs a node now, fired, which waits.
#[cold]
fn wait_on(
    out: Outcome,
    created: &'static Location<'static>,
    at: &'static Location<'static>,
) -> NodeRef {
    let node = Node::new_ref(created);
    let mut n = node.borrow_mut();
    n.called = true;
    n.fired_at = Some(created);
    // No links are queued, so this never asks the runner to go on.
    settle(n, &node, out, at);
    node
}

#[cold]
#[inline(never)]
pub(super) fn gone() -> ! {
    unreachable!("deferloop bug: a Deferred used after its state was moved out")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::Deferred;
    use std::mem::size_of;

    #[test]
    fn a_handle_is_a_result_and_a_location() {
        eprintln!(
            "Res {} Repr {} Deferred {}",
            size_of::<Res>(),
            size_of::<Repr>(),
            size_of::<Deferred<u64>>()
        );
        assert!(size_of::<Deferred<u64>>() <= size_of::<Res>() + size_of::<usize>());
    }

    /// The read-only looks (`Deferred::peek`) on both forms, and after the
    /// bare form became a node.
    #[test]
    fn looks_at_a_bare_result_and_a_node_agree() {
        let bare = crate::deferred::succeed(1u8);
        let (node, r) = Deferred::<u8>::new();
        r.callback(1).unwrap();
        for d in [&bare, &node] {
            assert!(d.is_called() && !d.is_paused() && d.is_ready());
            assert!(format!("{d:?}").contains("called: true"));
        }
        bare.pause();
        assert!(bare.is_paused() && !bare.is_ready());
        assert_eq!(bare.created_at().line(), node.created_at().line() - 1);
    }
}
