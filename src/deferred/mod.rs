//! Deferred: results that aren't immediately available.
//!
//! Owns the typed chain handle [`Deferred`], its firing side [`Resolver`], what a
//! callback may return ([`IntoStep`]), and [`succeed`], [`fail`],
//! [`maybe_deferred`]. The helpers live beside it: [`list`] (DeferredList,
//! gather, race), [`timeout`], [`task`] (defer_later, LoopingCall), [`lock`],
//! [`queue`], and [`errors`]. The firing side is `resolver.rs`, what callbacks
//! return `steps.rs`; the untyped core is `node.rs` with `cancel.rs`,
//! `value.rs` and `run.rs`. Tests: unit tests beside the core; behaviour in
//! tests/deferred_*.rs.
//!
//! A `Deferred` is Twisted's Deferred with types: a chain of (callback, errback)
//! pairs fed by one result, with the same rules (chaining, pausing, cancelling,
//! unhandled-error reporting) — see [`Deferred`].
//!
//! # Twisted spelling → deferloop spelling
//!
//! | Twisted                                   | deferloop                                            |
//! |-------------------------------------------|------------------------------------------------------|
//! | `d = Deferred()`                          | `let (d, r) = Deferred::<T>::new();`                 |
//! | `d = Deferred(canceller)`                 | `let (d, r) = Deferred::with_canceller(\|r\| ..);`   |
//! | `d.addCallback(f)`                        | `let d = d.add_callback(f);` (`f` returns `Result` or `Deferred`) |
//! | `d.addErrback(f)`                         | `let d = d.add_errback(f);`                          |
//! | `d.addCallbacks(f, g)`                    | `let d = d.add_callbacks(f, g);`                     |
//! | `d.addBoth(f)`                            | `let d = d.add_both(\|r: Result<T, Failure>\| ..);`  |
//! | `d.callback(v)` / `d.errback(e)`          | `r.callback(v)?` / `r.errback(e)?`                   |
//! | `AlreadyCalledError` raised               | `Err(AlreadyCalled)` returned                        |
//! | `d.pause()` / `d.unpause()`               | `d.pause()` / `d.unpause()?`                         |
//! | `d.cancel()`                              | `d.cancel()`                                         |
//! | `d.chainDeferred(e)`                      | `d.chain_deferred(&e_resolver)`                      |
//! | `f.trap(E)` in an errback                 | `f.trap::<E>()?;`                                    |
//! | `succeed(v)` / `fail(e)` / `maybeDeferred(f)` | `succeed(v)` / `fail(e)` / `maybe_deferred(f)`  |
//! | `DeferredList(ds, fireOnOneErrback=True)` | `DeferredList::new(ds).fire_on_one_errback(true).build()` |
//! | `gatherResults(ds)` / `race(ds)`          | `gather_results(ds)` / `race(ds)`                    |
//! | `d.addTimeout(t, clock)`                  | `let d = d.add_timeout(t, &clock);`                  |
//! | `deferLater(clock, t, f)`                 | `defer_later(&clock, t, f)`                          |
//!
//! # Examples
//! ```
//! use deferloop::deferred::{Deferred, succeed};
//! use deferloop::Failure;
//!
//! let (d, r) = Deferred::<u32>::new();
//! let d = d
//!     .add_callback(|x| Ok(x * 2))
//!     .add_callback(|x| succeed(x + 1)) // returning a Deferred chains it
//!     .add_callback(|x| if x > 100 { Err(Failure::msg("too big")) } else { Ok(x) })
//!     .add_errback(|_f| Ok(0));
//! r.callback(20).unwrap();
//! assert_eq!(d.result().unwrap().unwrap(), 41);
//! ```

mod cancel;
pub mod errors;
pub mod failure;
mod links;
pub mod list;
pub mod lock;
mod node;
pub mod queue;
mod resolver;
mod run;
mod steps;
pub mod task;
pub mod timeout;
mod unhandled;
mod value;

pub use errors::{
    Abandoned, AlreadyCalled, Cancelled, ChainedToSelf, FailureGroup, FirstError, LoopClosed,
    NotPaused, QueueOverflow, QueueUnderflow, TimedOut,
};
pub use list::{gather_results, race, DeferredList, ListResult};
pub use lock::{DeferredLock, DeferredSemaphore, LockGuard};
pub use queue::DeferredQueue;
pub use resolver::Resolver;
pub use steps::IntoStep;
pub use task::{defer_later, LoopingCall};
pub use unhandled::{set_unhandled_failure_hook, UnhandledFailure, UnhandledFailureHook};

use crate::Failure;
pub(crate) use node::Spare;
use node::{Node, NodeRef, StepFn, Value, WeakNode};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;
use steps::{Map, OnBoth, OnEither, OnFailure, OnValue, Step};

/// A result that isn't available yet, and the chain of callbacks that will
/// process it.
///
/// *Why:* code that starts an operation wants to say what happens with its
/// result without blocking and without `async`: it adds callbacks to a
/// `Deferred`; whoever completes the operation fires the matching [`Resolver`].
///
/// # Chain rules
/// - The chain is a FIFO of (callback, errback) pairs. A value runs the callback
///   half, a [`Failure`] the errback half; each pair runs once.
/// - A callback's return value becomes the result: `Ok` stays on the success
///   path, `Err(Failure)` switches to errbacks, an errback returning `Ok`
///   recovers. A **panic** in a callback is caught and becomes a failure whose
///   origin is where that callback was added.
/// - A callback returning a `Deferred` chains it: if that Deferred is ready
///   (fired, not paused, not waiting) its result is taken over at once; else this
///   chain pauses until it has run its own callbacks and hands over its result.
///   Returning the Deferred the callback is attached to gives a
///   [`ChainedToSelf`] failure (Twisted hangs). Chaining is iterative: any depth
///   runs at constant native stack depth.
/// - Adding a pair to a fired, idle Deferred runs it before `add_*` returns;
///   adding from inside a running callback of the same chain only appends.
/// - While [paused](Self::pause), firing and adding only store.
/// - If every [`Resolver`] is dropped before firing, the chain fails with
///   [`Abandoned`] at that moment (as a dropped `oneshot::Sender` does): a
///   Deferred nobody can fire does not wait forever.
/// - A Deferred dropped (with its `Resolver`s) while its final result is a
///   failure reports it once: to the hook installed with
///   [`set_unhandled_failure_hook`], else with `log::error!` (`"Unhandled error
///   in Deferred"`, its creation site and the failure's origin). To let a
///   chain go on purpose, call [`detach`](Self::detach).
///
/// `Deferred<T>` is consumed by every `add_*` and is not `Clone`: exactly one
/// party extends a chain, and nobody can add callbacks to a Deferred after
/// returning it from a callback (Twisted's footgun
/// [#6171](https://github.com/twisted/twisted/issues/6171) is impossible by
/// construction). It is `!Send`: a chain belongs to one thread.
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// send(deferloop::deferred::succeed(1u8));
/// ```
///
/// Both handles are invariant in `T`, since both put a `T` in and take one
/// out: a handle for a more general type cannot pass for a more specific one.
///
/// ```compile_fail
/// use deferloop::{Deferred, Resolver};
/// fn narrow(r: Resolver<for<'a> fn(&'a str)>) -> Resolver<fn(&'static str)> {
///     r
/// }
/// ```
/// ```compile_fail
/// use deferloop::Deferred;
/// fn narrow<'x>(d: Deferred<&'static str>) -> Deferred<&'x str> {
///     d
/// }
/// ```
///
/// # Errors
/// Firing twice returns [`AlreadyCalled`] from the [`Resolver`];
/// [`unpause`](Self::unpause) without `pause` returns [`NotPaused`]. Errors of
/// the *operation* travel down the chain as [`Failure`]s.
#[must_use = "a Deferred does nothing unless callbacks are added or it is kept"]
pub struct Deferred<T> {
    node: NodeRef,
    /// Invariant in `T` (the chain reads and writes `T`s), and `!Send`.
    _t: PhantomData<*mut T>,
}

impl<T: 'static> Deferred<T> {
    fn from_node(node: NodeRef) -> Deferred<T> {
        Deferred {
            node,
            _t: PhantomData,
        }
    }

    /// A new unfired Deferred and its resolver; records the caller as the
    /// creation site (shown in [`AlreadyCalled`] and unhandled-error logs).
    #[track_caller]
    pub fn new() -> (Deferred<T>, Resolver<T>) {
        let at = Location::caller();
        let node = Node::with_resolvers(at, 1);
        let r = Resolver::counted(node.clone(), at);
        (Deferred::from_node(node), r)
    }

    /// Like [`new`](Self::new), in `spare`'s storage if there is one (a
    /// node done with, see `Resolver::into_spare`): no allocation then.
    #[track_caller]
    pub(crate) fn new_in(spare: Option<node::Spare>) -> (Deferred<T>, Resolver<T>) {
        let at = Location::caller();
        let node = match spare {
            Some(node::Spare(node)) => {
                let mut n = node.borrow_mut();
                n.created_at = at;
                n.resolvers = 1;
                drop(n);
                node
            }
            None => Node::with_resolvers(at, 1),
        };
        let r = Resolver::counted(node.clone(), at);
        (Deferred::from_node(node), r)
    }

    /// Like [`new`](Self::new), with a canceller that [`cancel`](Self::cancel)
    /// runs (once) while the Deferred is unfired. If the canceller does not fire
    /// the Deferred itself, a [`Cancelled`] failure follows. The canceller is
    /// dropped when the Deferred fires.
    #[track_caller]
    pub fn with_canceller(f: impl FnOnce(&Resolver<T>) + 'static) -> (Deferred<T>, Resolver<T>) {
        let at = Location::caller();
        let (d, r) = Deferred::new();
        d.node
            .borrow_mut()
            .set_canceller(Box::new(move |node: &NodeRef| {
                f(&Resolver::from_node(node.clone(), at))
            }));
        (d, r)
    }

    /// Adds `step` to the chain (it runs at once if the Deferred has fired
    /// and is idle, as in Twisted).
    #[inline]
    fn push(self, step: impl StepFn + 'static, at: &'static Location<'static>) -> NodeRef {
        node::add_call(&self.node, step, at);
        self.node
    }

    /// Appends a callback (failures pass through). `f` returns
    /// `Result<U, Failure>` or `Deferred<U>`; the error type is inferred, so
    /// `|x| Ok(x + 1)` needs no annotation, and `?` works on any error.
    #[doc(alias = "and_then")]
    #[track_caller]
    #[inline]
    pub fn add_callback<R: IntoStep>(
        self,
        f: impl FnOnce(T) -> R + 'static,
    ) -> Deferred<R::Output> {
        let step = OnValue(f, PhantomData);
        Deferred::from_node(self.push(step, Location::caller()))
    }

    /// Appends an errback (values pass through); it may recover with `Ok`.
    #[doc(alias = "or_else")]
    #[track_caller]
    #[inline]
    pub fn add_errback<R: IntoStep<Output = T>>(
        self,
        f: impl FnOnce(Failure) -> R + 'static,
    ) -> Deferred<T> {
        let step = OnFailure(f);
        Deferred::from_node(self.push(step, Location::caller()))
    }

    /// Appends one (callback, errback) pair: exactly one of them runs.
    #[track_caller]
    #[inline]
    pub fn add_callbacks<R: IntoStep, E: IntoStep<Output = R::Output>>(
        self,
        cb: impl FnOnce(T) -> R + 'static,
        eb: impl FnOnce(Failure) -> E + 'static,
    ) -> Deferred<R::Output> {
        let step = OnEither(cb, eb, PhantomData);
        Deferred::from_node(self.push(step, Location::caller()))
    }

    /// Appends `f` as both callback and errback (Twisted's `addBoth`).
    #[doc(alias = "then")]
    #[track_caller]
    #[inline]
    pub fn add_both<R: IntoStep>(
        self,
        f: impl FnOnce(Result<T, Failure>) -> R + 'static,
    ) -> Deferred<R::Output> {
        let step = OnBoth(f, PhantomData);
        Deferred::from_node(self.push(step, Location::caller()))
    }

    /// Appends an infallible callback: shorthand for `add_callback(|v| Ok(f(v)))`.
    #[track_caller]
    #[inline]
    pub fn map<U: 'static>(self, f: impl FnOnce(T) -> U + 'static) -> Deferred<U> {
        let step = Map(f, PhantomData);
        Deferred::from_node(self.push(step, Location::caller()))
    }

    /// Stops the chain from running until a matching [`unpause`](Self::unpause);
    /// pauses nest (a counter).
    pub fn pause(&self) {
        node::pause(&self.node);
    }

    /// Undoes one [`pause`](Self::pause); at zero, a fired chain resumes now.
    ///
    /// # Errors
    /// [`NotPaused`] if the Deferred is not paused (the count stays at zero).
    pub fn unpause(&self) -> Result<(), NotPaused> {
        if node::unpause(&self.node) {
            Ok(())
        } else {
            Err(NotPaused)
        }
    }

    /// Cancels the Deferred (Twisted's rules):
    /// - unfired with a canceller: the canceller runs once with the Resolver;
    ///   unless it fired the Deferred, a [`Cancelled`] failure follows (a later fire
    ///   is then `AlreadyCalled`). A panicking canceller is logged with
    ///   `log::error!` and leaves the Deferred unfired (a second `cancel` then
    ///   behaves as if there were no canceller);
    /// - unfired without a canceller: errbacks with [`Cancelled`] and silently
    ///   absorbs exactly one later fire;
    /// - fired and waiting on a Deferred returned by a callback: cancels that one;
    /// - otherwise: nothing.
    #[track_caller]
    pub fn cancel(&self) {
        node::cancel(&self.node);
    }

    /// Twisted's `chainDeferred`: when this chain reaches this point, `target` is
    /// fired with its result, and this chain keeps nothing (so its failure is not
    /// reported here). If `target` has already fired, this chain is left holding an
    /// [`AlreadyCalled`] failure, which is reported as unhandled.
    ///
    /// Unlike Twisted's, this does not recurse: a chain of 100,000
    /// `chain_deferred` links runs at constant stack depth.
    #[track_caller]
    pub fn chain_deferred(self, target: &Resolver<T>) {
        node::forward(&self.node, &target.node, Location::caller());
    }

    /// Whether the Deferred has fired (it may still be waiting on a chained one).
    pub fn is_called(&self) -> bool {
        self.node.borrow().is_called()
    }

    /// Whether the Deferred is paused (by `pause`, or waiting on a chained one).
    pub fn is_paused(&self) -> bool {
        self.node.borrow().is_paused()
    }

    /// Takes the result if the Deferred has fired and has nothing left to run
    /// (not paused, not waiting, not running); otherwise hands the Deferred
    /// back unchanged, as `Err`, so a pending chain is not lost. Taking a
    /// failure counts as handling it (it is not reported).
    ///
    /// ```
    /// use deferloop::Deferred;
    ///
    /// let (d, r) = Deferred::<u8>::new();
    /// let d = d.result().unwrap_err(); // not fired yet: the handle comes back
    /// r.callback(7).unwrap();
    /// assert_eq!(d.result().unwrap().unwrap(), 7);
    /// ```
    ///
    /// # Errors
    /// The Deferred itself, when it has no result to give yet.
    pub fn result(self) -> Result<Result<T, Failure>, Deferred<T>> {
        match node::take_result(&self.node) {
            Some(r) => Ok(r.map(Value::take::<T>)),
            None => Err(self),
        }
    }

    /// Lets the chain go: nobody will add to it or take its result. It still
    /// runs when fired, and a failure at its end is still reported as
    /// unhandled (see [`set_unhandled_failure_hook`]). The named way to do what
    /// `let _ = d.add_errback(..)` did.
    ///
    /// ```
    /// use deferloop::Deferred;
    ///
    /// let (d, r) = Deferred::<u8>::new();
    /// d.map(|n| println!("got {n}")).detach();
    /// r.callback(1).unwrap();
    /// ```
    pub fn detach(self) {}

    /// Where the Deferred was created.
    pub fn created_at(&self) -> &'static Location<'static> {
        self.node.borrow().created_at()
    }

    /// A handle that can cancel this Deferred without owning its chain, and
    /// without keeping it alive.
    pub(crate) fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(Rc::downgrade(&self.node))
    }

    /// Whether the Deferred has fired and is idle with nothing queued: a
    /// callback added now runs at once.
    pub(crate) fn is_ready(&self) -> bool {
        self.node.borrow().is_ready()
    }

    /// The untyped node (for helpers in this module tree).
    pub(crate) fn weak_node(&self) -> WeakNode {
        Rc::downgrade(&self.node)
    }
}

impl<T> fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.node.borrow();
        let mut s = f.debug_struct("Deferred");
        s.field("created_at", &format_args!("{}", n.created_at()))
            .field("called", &n.is_called())
            .field("paused", &n.is_paused());
        // Twisted's repr: "waiting on Deferred at ...".
        if let Some(at) = n.waiting_on() {
            s.field("waiting_on", &format_args!("Deferred created at {at}"));
        }
        s.finish()
    }
}

/// Cancels a Deferred through a weak reference (internal: timers, lists).
#[derive(Clone)]
pub(crate) struct CancelHandle(WeakNode);

impl CancelHandle {
    #[track_caller]
    pub(crate) fn cancel(&self) {
        if let Some(n) = self.0.upgrade() {
            node::cancel(&n);
        }
    }
}

#[track_caller]
pub(crate) fn cancel_weak(w: &WeakNode) {
    if let Some(n) = w.upgrade() {
        node::cancel(&n);
    }
}

/// A Deferred that has already fired with `v` (Twisted's `succeed`).
#[track_caller]
pub fn succeed<T: 'static>(v: T) -> Deferred<T> {
    Deferred::from_node(Node::fired(Ok(Value::new(v)), Location::caller()))
}

/// A Deferred that has already failed with `f` (Twisted's `fail`); an existing
/// `Failure` is kept as is (the same failure).
#[track_caller]
pub fn fail<T: 'static>(f: impl Into<Failure>) -> Deferred<T> {
    Deferred::from_node(Node::fired(Err(f.into()), Location::caller()))
}

/// Calls `f` now and makes its outcome a Deferred (Twisted's `maybeDeferred`):
/// `Ok(v)` → `succeed(v)`, `Err(f)` → `fail(f)` (the same failure), a returned
/// `Deferred` → that same Deferred, a panic → a failed Deferred whose failure
/// origin is the caller.
#[track_caller]
pub fn maybe_deferred<R: IntoStep>(f: impl FnOnce() -> R) -> Deferred<R::Output> {
    let at = Location::caller();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => match r.into_step() {
            Step::Ready(r) => Deferred::from_node(Node::fired(r.map(Value::new), at)),
            Step::Chain(d) => d,
        },
        Err(p) => Deferred::from_node(Node::fired(Err(Failure::from_panic(p, at)), at)),
    }
}
