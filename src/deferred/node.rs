//! The untyped core of a Deferred: one `Node` per chain, shared by the typed
//! `Deferred<T>` and `Resolver<T>` handles.
//!
//! Owns `Node`, `Link`, `Outcome` and the functions that fire, add to, pause,
//! cancel and drop nodes. Beside it: the value a step carries (`value.rs`),
//! the link queue (`links.rs`) and the runner (`run.rs`). The typed layer
//! (`mod.rs`) guarantees that every `Value` is taken out as the type it was put
//! in. Tests: below (invariants) and tests/deferred_*.rs (behaviour).
//!
//! Rules kept here:
//! - the `RefCell` is never borrowed while user code runs: a link and the result
//!   are taken out, the borrow released, the callback called, the node re-borrowed;
//! - running is iterative (see [`run`]), so neither deep waiting chains, nor
//!   `chain_deferred` chains, nor their drops, grow the native stack.
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

pub(crate) use super::callback::Callback;
pub(crate) use super::cancel::{add_resolver, cancel, drop_resolver, CancelHook, OnCancel};
use super::errors::AlreadyCalled;
use super::links::{InlineLinks, Links};
use super::run::{call, run, run_calls, settle, Next};
pub(crate) use super::spare::{into_spare, pooled, recycle, release_resolver, Spare};
pub(crate) use super::value::Value;
use crate::Failure;
use std::cell::RefCell;
use std::panic::Location;
use std::rc::{Rc, Weak};

/// Shared handle to a node.
pub(crate) type NodeRef = Rc<NodeCell>;
/// Weak handle to a node (timers, cancel handles, waiting outers).
pub(crate) type WeakNode = Weak<NodeCell>;
/// A type-erased result.
pub(crate) type Res = Result<Value, Failure>;
/// A canceller, called with the node it cancels.
pub(crate) type Canceller = Box<dyn FnOnce(&NodeRef)>;

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

/// One entry of a chain.
pub(crate) enum Link {
    /// A user callback pair, with the place it was added (origin of its panics).
    Call(Callback, &'static Location<'static>),
    /// Twisted's CONTINUE marker: hand this node's result to the waiting outer.
    Continue(NodeRef),
    /// `chain_deferred`: fire the target with this node's result.
    Forward(NodeRef, &'static Location<'static>),
}

/// What a `NodeRef` points to: the node, and beside it (outside its
/// `RefCell`, see `links.rs`) the first slots of its link queue. Derefs to
/// the node's `RefCell`.
pub(crate) struct NodeCell {
    node: RefCell<Node>,
    inline: InlineLinks,
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
    pub(super) links: Links,
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
        if super::registry::on() {
            super::registry::register(&cell);
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

/// The queued links, if any of them points to another node.
fn take_links(links: &mut Links) -> Option<impl Iterator<Item = Link>> {
    links.has_node_links().then(|| links.take_all())
}

fn take_node_links(links: &mut Links, out: &mut Vec<NodeRef>) {
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

    fn here() -> &'static Location<'static> {
        Location::caller()
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
