//! Reusing nodes: a node whose chain is over and that nothing refers to any
//! more is reset in place and kept, so that the next Deferred is made in it
//! without an allocation (the Stream's reads keep one per stream, and every
//! thread keeps a few for `Deferred::new`).

use super::cancel::drop_resolver;
use super::node::{report_unseen, Node, NodeRef, Res};
use std::cell::{Cell, RefMut};
use std::panic::Location;
use std::rc::Rc;

/// The storage of a node that is done with, reset: a new Deferred can be
/// made in it without an allocation (see `Deferred::new_in`).
pub(crate) struct Spare(pub(super) NodeRef);

/// `node`, reset to a new node's state, if this is the only reference to it
/// (no handle, clone, timer or other node) and its chain has run to the end
/// (see [`reset`]).
pub(crate) fn into_spare(node: NodeRef) -> Option<Spare> {
    if !sole(&node) {
        return None;
    }
    let n = node.try_borrow_mut().ok()?;
    reset(n).then_some(Spare(node))
}

/// Whether `node` is the only reference to its node, strong or weak.
#[inline(always)]
fn sole(node: &NodeRef) -> bool {
    Rc::strong_count(node) == 1 && Rc::weak_count(node) == 0
}

/// Resets the node `n`, to which nothing else refers, to a new node's state
/// if its chain has run to the end (fired; not running, waiting or paused;
/// nothing queued); `false` if it has not. Its old state is dropped here as
/// dropping the node would drop it (an unhandled failure is reported).
#[inline(always)]
fn reset(mut n: RefMut<'_, Node>) -> bool {
    if !n.called || n.running || n.waiting || n.paused > 0 || !n.links.is_empty() {
        return false;
    }
    // Field by field, what `Node::blank` holds (the links are empty and
    // rewound, and keep their block).
    n.called = false;
    n.suppress_already_called = false;
    n.resolvers = 0;
    n.fired_at = None;
    let quiet = std::mem::take(&mut n.quiet);
    if n.result.is_some() || n.chained_to.is_some() || n.canceller.is_some() {
        let old = (n.result.take(), (n.chained_to.take(), n.canceller.take()));
        let created_at = n.created_at;
        drop(n);
        drop_old_state(old, quiet, created_at);
    }
    true
}

/// What dropping the node would have reported and dropped (its result was
/// not taken, or it still held a link to another node or a canceller).
#[cold]
#[inline(never)]
fn drop_old_state(
    (result, leftovers): (Option<Res>, impl Sized),
    quiet: bool,
    created_at: &'static std::panic::Location<'static>,
) {
    report_unseen(&result, quiet, created_at);
    drop((result, leftovers));
}

/// Nodes kept per thread for the next [`Deferred::new`](super::Deferred::new)
/// (each with its links' first spill buffer): a Deferred made, fired and
/// done with in a loop allocates nothing after the first.
const POOL: usize = 16;

/// The kept nodes: slots `0..len` hold one each, the others none. Cells,
/// not a `RefCell<Vec>`: putting a node in and taking one out run no other
/// code, so there is nothing to borrow, and no capacity to check.
struct Pool {
    len: Cell<usize>,
    slots: [Cell<Option<NodeRef>>; POOL],
}

thread_local! {
    static SPARES: Pool = const {
        Pool {
            len: Cell::new(0),
            slots: [const { Cell::new(None) }; POOL],
        }
    };
}

/// Called where a handle lets go of `node`: if it was the last reference,
/// the node is reset and kept (see [`POOL`]); else, or if the pool is full,
/// it is simply dropped.
#[inline]
pub(crate) fn recycle(node: NodeRef) {
    if sole(&node) {
        keep(node);
    }
}

/// A `Resolver` of `node`, made at `made_at`, lets go of it: what
/// `drop_resolver` then `recycle` do, under one borrow when the node has
/// fired and this was the last reference (a chain's usual end).
#[inline]
pub(crate) fn release_resolver(node: NodeRef, made_at: &'static Location<'static>) {
    if sole(&node) {
        let kept = match node.try_borrow_mut() {
            Ok(mut n) if n.called => {
                n.resolvers -= 1;
                Some(reset(n))
            }
            _ => None,
        };
        if let Some(kept) = kept {
            if kept {
                put(node);
            }
            return;
        }
    }
    drop_resolver(&node, made_at);
    recycle(node);
}

fn keep(node: NodeRef) {
    if let Some(Spare(node)) = into_spare(node) {
        put(node);
    }
}

/// Keeps the reset `node`, if the pool has room.
fn put(node: NodeRef) {
    // A node the pool has no room for is dropped after this returns
    // (dropping a node can reach the pool again).
    let _rejected = SPARES.try_with(|pool| {
        let i = pool.len.get();
        if i >= POOL {
            return Some(node);
        }
        pool.len.set(i + 1);
        // Slots from `len` on hold `None`: nothing to drop.
        std::mem::forget(pool.slots[i].replace(Some(node)));
        None
    });
}

/// A node from the pool, if there is one.
#[inline]
pub(crate) fn pooled() -> Option<Spare> {
    SPARES
        .try_with(|pool| {
            let i = pool.len.get().checked_sub(1)?;
            pool.len.set(i);
            pool.slots[i].take().map(Spare)
        })
        .ok()
        .flatten()
}
