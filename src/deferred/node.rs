//! The untyped core of a Deferred: one `Node` per chain, shared by the typed
//! `Deferred<T>` and `Resolver<T>` handles.
//!
//! Owns `Node`, `Link`, `Outcome`, `Next`, the link-aware operations on a
//! node's queue (the in-place push of a callback, the pop of one) and the
//! drop of nodes. Beside it: the value a step carries (`value.rs`), the link
//! queue (`links.rs`, which knows nothing of links); above it: what fires, adds
//! to, pauses and runs a node (`run.rs`), cancellation (`cancel.rs`) and the
//! registry (`registry.rs`, which hears of each new node through
//! [`set_on_new_node`]). The typed layer (`mod.rs`) guarantees that every
//! `Value` is taken out as the type it was put in. Tests: below (the queue of
//! links), in `run.rs` (invariants) and tests/deferred_*.rs (behaviour).
//!
//! Rules kept here and in `run.rs`:
//! - the `RefCell` is never borrowed while user code runs: a link and the result
//!   are taken out, the borrow released, the callback called, the node re-borrowed;
//! - running is iterative (see `run.rs`), so neither deep waiting chains, nor
//!   `chain_deferred` chains, nor their drops, grow the native stack.

use super::callback::RunIn;
use super::errors::AlreadyCalled;
use super::links::{InlineLinks, Links};
pub(crate) use super::value::Value;
use crate::Failure;
use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::ptr;
use std::rc::{Rc, Weak};

/// Shared handle to a node.
pub(crate) type NodeRef = Rc<NodeCell>;
/// Weak handle to a node (timers, cancel handles, waiting outers).
pub(crate) type WeakNode = Weak<NodeCell>;
/// A type-erased result.
pub(crate) type Res = Result<Value, Failure>;
/// A canceller, called with the node it cancels.
pub(crate) type Canceller = Box<dyn FnOnce(&NodeRef)>;

/// What `cancel` does besides failing an unfired node with `Cancelled`.
pub(crate) enum OnCancel {
    /// Runs first, and may fire the node itself (`Deferred::with_canceller`).
    Run(Canceller),
    /// Told once the node has failed with `Cancelled`, through a weak
    /// reference its producer holds anyway: a producer that makes many
    /// Deferreds (a stream's reads) hears of a cancel without an allocation
    /// per Deferred.
    Tell(Weak<dyn CancelHook>),
}

/// A producer told of a cancel (see [`OnCancel::Tell`]).
pub(crate) trait CancelHook {
    /// One of this producer's Deferreds was cancelled; it has failed with
    /// `Cancelled`, and its callbacks have run.
    fn cancelled(self: Rc<Self>);
}

/// What a link's callback produced; also the slot its input is passed in.
pub(crate) enum Outcome {
    /// A plain result: continue with it.
    Done(Res),
    /// A Deferred: take its result, or wait for it.
    Chain(NodeRef),
    /// Nothing: the input was taken and no outcome written (yet).
    Taken,
}

impl Outcome {
    /// The result a callback is called with.
    #[inline]
    pub(super) fn take_input(&mut self) -> Res {
        match std::mem::replace(self, Outcome::Taken) {
            Outcome::Done(r) => r,
            other => {
                // A bug; not dropping `other` keeps unwinding code (which
                // would hold the slot's contents in memory) off this path.
                std::mem::forget(other);
                unreachable!("a callback is called with a result")
            }
        }
    }
}

/// What a callback does with its input: maps a result to an outcome.
///
/// A step runs either boxed in a link or directly (see [`add_call`]), so its
/// body has two call sites; implementations mark `run` `#[inline(always)]` so
/// that both fold the user's function in (a closure there is not inlined).
pub(crate) trait StepFn: Sized {
    fn run(self, r: Res) -> Outcome;

    /// Runs on the result in `slot`, leaving the outcome there. Steps that
    /// take a value override it to work on an inline value in place.
    #[inline(always)]
    fn run_in(self, slot: &mut Outcome) {
        run_moved(self, slot);
    }
}

/// The general [`StepFn::run_in`]: the result is moved out of the slot and
/// the outcome written back.
#[inline(always)]
pub(super) fn run_moved(step: impl StepFn, slot: &mut Outcome) {
    let r = slot.take_input();
    let out = step.run(r);
    // The slot holds `Taken`, which owns nothing.
    overwrite(slot, out);
}

/// Writes `out` over a slot that owns nothing (its input was taken, or its
/// value taken in place), without the drop call an assignment compiles to.
#[inline(always)]
pub(super) fn overwrite(slot: &mut Outcome, out: Outcome) {
    std::mem::forget(std::mem::replace(slot, out));
}

impl<F: FnOnce(Res) -> Outcome> StepFn for F {
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        self(r)
    }
}

/// A queued step on a node's slot (see `callback.rs`).
pub(crate) type Callback = super::callback::Callback<Outcome>;

/// Every step runs on the node's slot.
impl<S: StepFn> RunIn<Outcome> for S {
    #[inline(always)]
    fn run_in(self, slot: &mut Outcome) {
        StepFn::run_in(self, slot);
    }
}

/// One entry of a chain.
pub(crate) enum Link {
    /// A user callback pair, with the place it was added (origin of its panics).
    Call(Callback, &'static Location<'static>),
    /// Twisted's CONTINUE marker: hand this node's result to the waiting outer.
    Continue(NodeRef),
    /// `chain_deferred`: fire the target with this node's result.
    Forward(NodeRef, &'static Location<'static>),
}

thread_local! {
    /// Told of every node made on this thread while set: the registry's
    /// hook (`registry::set_on`), unset while the registry is off.
    static ON_NEW_NODE: Cell<Option<fn(&NodeRef)>> = const { Cell::new(None) };
}

/// Sets (or clears) the function told of every node made on this thread.
pub(crate) fn set_on_new_node(f: Option<fn(&NodeRef)>) {
    ON_NEW_NODE.with(|c| c.set(f));
}

/// The function told of every node made on this thread, if one is set.
#[inline(always)]
pub(crate) fn on_new_node() -> Option<fn(&NodeRef)> {
    ON_NEW_NODE.with(Cell::get)
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

/// What a `NodeRef` points to: the node, and beside it (outside its
/// `RefCell`, see `links.rs`) the first slots of its link queue. Derefs to
/// the node's `RefCell`.
pub(crate) struct NodeCell {
    node: RefCell<Node>,
    inline: InlineLinks<Link>,
}

impl Drop for NodeCell {
    fn drop(&mut self) {
        // Dropping holds a `&mut` to the whole cell, inline slots included:
        // from now on the links reach them through it, not through the
        // pointer made when the node was made.
        self.node.get_mut().links.rebase(&mut self.inline);
    }
}

impl std::ops::Deref for NodeCell {
    type Target = RefCell<Node>;

    #[inline(always)]
    fn deref(&self) -> &RefCell<Node> {
        &self.node
    }
}

/// The state of one chain (Twisted's Deferred instance).
pub(crate) struct Node {
    pub(super) links: Links<Link>,
    /// The current result; `None` before firing, while a callback runs, while
    /// waiting on an inner Deferred, or after the result was moved away.
    pub(super) result: Option<Res>,
    pub(super) called: bool,
    pub(super) running: bool,
    pub(super) suppress_already_called: bool,
    pub(super) paused: u32,
    /// Live `Resolver`s: when the last one goes while the node is unfired,
    /// nobody can fire it any more (see [`drop_resolver`]).
    pub(super) resolvers: u32,
    /// The result is an [`Abandoned`] failure that no callback was there to
    /// see: dropping it unseen is not worth a report (nobody was waiting).
    pub(super) quiet: bool,
    /// Waiting for a Deferred returned by a callback (Twisted counts this in
    /// `paused`; kept apart here so an unmatched `unpause` cannot end the wait).
    pub(super) waiting: bool,
    /// The Deferred this one waits on (implicit chaining) or is fed by
    /// (`chain_deferred`).
    pub(super) chained_to: Option<WeakNode>,
    pub(super) canceller: Option<OnCancel>,
    pub(super) created_at: &'static Location<'static>,
    pub(super) fired_at: Option<&'static Location<'static>>,
}

impl Node {
    pub(crate) fn new_ref(created_at: &'static Location<'static>) -> NodeRef {
        Node::with_resolvers(created_at, 0)
    }

    /// A node whose first `resolvers` Resolvers are being made with it.
    #[inline]
    pub(crate) fn with_resolvers(
        created_at: &'static Location<'static>,
        resolvers: u32,
    ) -> NodeRef {
        let cell = Rc::new(NodeCell {
            node: RefCell::new(Node::blank(created_at, resolvers)),
            inline: InlineLinks::new(),
        });
        let mut n = cell.node.borrow_mut();
        // SAFETY: the links are new, and `inline` sits beside them in the
        // same `Rc` allocation, used by nothing else; it is dropped after the
        // node (field order), and holds nothing that needs a drop.
        unsafe { n.links.use_inline(&cell.inline) };
        drop(n);
        if let Some(f) = on_new_node() {
            f(&cell);
        }
        cell
    }

    #[inline]
    fn blank(created_at: &'static Location<'static>, resolvers: u32) -> Node {
        Node {
            links: Links::new(),
            result: None,
            called: false,
            running: false,
            suppress_already_called: false,
            paused: 0,
            resolvers,
            quiet: false,
            waiting: false,
            chained_to: None,
            canceller: None,
            created_at,
            fired_at: None,
        }
    }

    /// A node that has already fired with `r` (no chain to run yet).
    pub(crate) fn fired(r: Res, at: &'static Location<'static>) -> NodeRef {
        let node = Node::new_ref(at);
        {
            let mut n = node.borrow_mut();
            n.called = true;
            n.fired_at = Some(at);
            n.result = Some(r);
        }
        node
    }

    pub(crate) fn created_at(&self) -> &'static Location<'static> {
        self.created_at
    }

    pub(crate) fn is_called(&self) -> bool {
        self.called
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused > 0 || self.waiting
    }

    /// Where the Deferred this one waits on was created, if it waits on one.
    pub(crate) fn waiting_on(&self) -> Option<&'static Location<'static>> {
        if !self.waiting {
            return None;
        }
        let inner = self.chained_to.as_ref()?.upgrade()?;
        let at = inner.try_borrow().ok()?.created_at;
        Some(at)
    }

    pub(crate) fn set_canceller(&mut self, c: Canceller) {
        self.canceller = Some(OnCancel::Run(c));
    }

    /// Tells `hook` when this node is cancelled (see [`OnCancel::Tell`]).
    pub(crate) fn set_cancel_hook(&mut self, hook: Weak<dyn CancelHook>) {
        self.canceller = Some(OnCancel::Tell(hook));
    }

    /// After a result was stored: whether links are queued behind it.
    pub(super) fn next(&self) -> Next {
        if self.links.is_empty() {
            Next::Idle
        } else {
            Next::More
        }
    }

    /// Fired and idle with nothing queued: a callback added now runs at once.
    pub(crate) fn is_ready(&self) -> bool {
        self.called && self.runnable() && self.links.is_empty()
    }

    /// Whether `run` would make progress on this node right now.
    pub(super) fn runnable(&self) -> bool {
        self.paused == 0 && !self.waiting && !self.running && self.result.is_some()
    }

    pub(super) fn already_called(&self, again: &'static Location<'static>) -> AlreadyCalled {
        AlreadyCalled {
            created_at: self.created_at,
            first_fired_at: self.fired_at.unwrap_or(self.created_at),
            fired_again_at: again,
        }
    }
}

/// Reports a final failure that no callback saw (unless `quiet`).
pub(super) fn report_unseen(
    result: &Option<Res>,
    quiet: bool,
    created_at: &'static Location<'static>,
) {
    if let Some(Err(f)) = result {
        if !quiet {
            super::unhandled::report(f.clone(), created_at);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        report_unseen(&self.result, self.quiet, self.created_at);
        // Unlink node-to-node links in a loop, so that dropping a 100,000-deep
        // waiting or forwarding chain does not recurse once per node.
        let mut pending: Vec<NodeRef> = Vec::new();
        take_node_links(&mut self.links, &mut pending);
        while let Some(next) = pending.pop() {
            if Rc::strong_count(&next) == 1 {
                // The borrow ends before the links (and the callbacks they
                // hold) are dropped.
                let links = next.try_borrow_mut().map(|mut n| take_links(&mut n.links));
                if let Ok(Some(links)) = links {
                    collect_nodes(links, &mut pending);
                }
            }
            // `next` now holds no node links: its own drop does not recurse.
            drop(next);
        }
    }
}

/// The reads and writes of a node's queue that know what a link is.
impl Links<Link> {
    /// Appends a callback link: `add_callback`'s path. The link is built
    /// after its slot is found, so it is written there from its parts: built
    /// on the stack first and copied, its 16-byte halves were read back
    /// before the 8-byte stores that wrote them had landed (a failed
    /// store-to-load forwarding, half the time of a chain's `add_callback`).
    /// The callback is made after the slot is found, too: made before, it
    /// was saved to the stack around the (rare) call that makes room.
    #[inline(always)]
    pub(crate) fn push_call(
        &mut self,
        step: impl StepFn + 'static,
        at: &'static Location<'static>,
    ) {
        // SAFETY: the slot is written at once.
        let slot = unsafe { self.vacant() };
        let f = Callback::new(step);
        // SAFETY: a vacant slot, written once.
        unsafe { slot.write(Link::Call(f, at)) };
    }

    /// Pops the next link if it is a user callback. Always inlined: it is
    /// the per-step read of the runner.
    #[inline(always)]
    pub(crate) fn pop_call(&mut self) -> Option<(Callback, &'static Location<'static>)> {
        let slot = self.front()?;
        // SAFETY: the front slot is initialised. Its callback is moved out
        // once and the slot counted as read at once, so the link is neither
        // dropped twice nor leaked (a `Call` owns nothing else).
        unsafe {
            let Link::Call(f, at) = &*slot else {
                return None;
            };
            let out = (ptr::read(f), *at);
            self.forget_front();
            Some(out)
        }
    }

    /// Whether any queued link points to another node.
    pub(crate) fn has_node_links(&self) -> bool {
        self.any(|link| matches!(link, Link::Continue(_) | Link::Forward(..)))
    }
}

/// The queued links, if any of them points to another node.
fn take_links(links: &mut Links<Link>) -> Option<impl Iterator<Item = Link>> {
    links.has_node_links().then(|| links.take_all())
}

fn take_node_links(links: &mut Links<Link>, out: &mut Vec<NodeRef>) {
    if let Some(links) = take_links(links) {
        collect_nodes(links, out);
    }
}

fn collect_nodes(links: impl Iterator<Item = Link>, out: &mut Vec<NodeRef>) {
    for link in links {
        match link {
            Link::Continue(n) | Link::Forward(n, _) => out.push(n),
            Link::Call(..) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(k: u64) -> Link {
        Link::Call(
            Callback::new(move |_| Outcome::Done(Ok(Value::new(k)))),
            Location::caller(),
        )
    }

    fn tag(l: Link) -> u64 {
        let Link::Call(f, _) = l else { unreachable!() };
        let mut slot = Outcome::Done(Ok(Value::new(())));
        f.run(&mut slot);
        match slot {
            Outcome::Done(Ok(v)) => v.take::<u64>(),
            _ => unreachable!(),
        }
    }

    /// The rewind forgets the read slots without visiting
    /// them: every link is still dropped exactly once, whether it was read,
    /// refilled after the rewind, or left queued when the queue is dropped.
    #[test]
    fn links_drop_once_across_rewinds() {
        use std::cell::Cell;
        use std::rc::Rc;
        struct Counted(Rc<Cell<u32>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let drops = Rc::new(Cell::new(0));
        let counted = |d: &Rc<Cell<u32>>| {
            let c = Counted(d.clone());
            Link::Call(
                Callback::new(move |r| {
                    let _keep = &c;
                    Outcome::Done(r)
                }),
                Location::caller(),
            )
        };
        let mut q = Links::new();
        for _ in 0..10 {
            q.push_back(counted(&drops));
        }
        for k in 0..10 {
            let (f, _) = q.pop_call().expect("a callback");
            drop(f);
            assert_eq!(drops.get(), k + 1);
        }
        assert!(q.is_rewound());
        for _ in 0..7 {
            q.push_back(counted(&drops));
        }
        q.pop_front();
        assert_eq!(drops.get(), 11);
        drop(q);
        assert_eq!(drops.get(), 17);
    }

    #[test]
    fn node_links_are_found_and_taken_in_order() {
        let mut q = Links::new();
        q.push_back(call(1));
        assert!(!q.has_node_links());
        let n = Node::new_ref(Location::caller());
        q.push_back(Link::Continue(n.clone()));
        q.push_back(call(2));
        assert!(q.has_node_links());
        assert_eq!(tag(q.pop_front().unwrap()), 1);
        let all: Vec<Link> = q.take_all().collect();
        assert_eq!(all.len(), 2);
        assert!(matches!(&all[0], Link::Continue(x) if std::rc::Rc::ptr_eq(x, &n)));
        assert!(q.is_empty());
    }
}
