//! Deferred: results that aren't immediately available.
//!
//! A function that cannot answer at once returns a [`Deferred`] and keeps its
//! [`Resolver`]; the caller adds callbacks, which run when the Resolver fires.
//! What a callback may return is an [`IntoStep`]: a `Result`, or another
//! Deferred to wait for. Ready-made ones: [`succeed`], [`fail`],
//! [`maybe_deferred`]. Beside it: [`list`] (wait for several: `DeferredList`,
//! `gather_results`, `race`), [`timeout`] (give up after a while), [`task`]
//! (`defer_later`, `LoopingCall`), [`lock`] and [`queue`] (take turns), and
//! [`errors`] (what chains fail with). A failure nobody handled is reported
//! when its Deferred is dropped: to the hook set with
//! [`set_unhandled_failure_hook`] ([`UnhandledFailure`],
//! [`UnhandledFailureHook`]), else to the log.
//!
//! A `Deferred` is Twisted's Deferred with types: a chain of (callback, errback)
//! pairs fed by one result, with the same rules (chaining, pausing, cancelling,
//! unhandled-error reporting) — see [`Deferred`].
//! Loops, retries, bounded maps and scopes: [sequential logic with callbacks](crate::guide::sequential_logic).
//!
//! # Twisted spelling → deferloop spelling
//!
//! The most used names; [the guide for Twisted users](crate::guide::for_twisted_users)
//! has them all.
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

mod callback;
mod cancel;
pub mod errors;
pub mod failure;
pub mod flow;
mod links;
pub mod list;
pub mod lock;
pub mod map;
mod node;
pub mod queue;
pub(crate) mod registry;
mod repr;
mod resolver;
pub mod retry;
mod run;
pub mod scope;
mod spare;
mod steps;
pub mod task;
pub mod timeout;
mod unhandled;
mod value;

pub use errors::{
    Abandoned, AlreadyCalled, Cancelled, ChainedToSelf, FailureGroup, FirstError, LoopClosed,
    NotPaused, QueueOverflow, QueueUnderflow, TimedOut,
};
pub use flow::{loop_fn, race_either, Either};
pub use list::{gather_results, race, DeferredList, ListResult};
pub use lock::{DeferredLock, DeferredSemaphore, LockGuard};
pub use map::{for_each_limit, map_limit, map_limit_settled};
pub use queue::DeferredQueue;
pub use resolver::Resolver;
pub use retry::{retry, Backoff, GaveUp, GiveUpReason, Jitter, RetryPolicy};
pub use scope::{scope, scope_collect_all, Scope, ScopeEnded, ScopeFailed};
pub use steps::{maybe_deferred, IntoStep};
pub use task::{defer_later, LoopingCall};
pub use unhandled::{set_unhandled_failure_hook, UnhandledFailure, UnhandledFailureHook};

use crate::Failure;
pub(crate) use cancel::{cancel_weak, CancelHandle};
pub(crate) use node::CancelHook;
use node::{Node, NodeRef, Res, StepFn, Value, WeakNode};
use repr::Repr;
pub(crate) use spare::Spare;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::panic::Location;
use std::rc::Rc;
use steps::{Map, OnBoth, OnEither, OnFailure, OnValue};

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
/// returning it from a callback (a Twisted footgun,
/// <https://github.com/twisted/twisted/issues/6171>, is impossible by
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
/// # Examples
/// A chain: callbacks transform the value, a failure skips to the next
/// errback, an errback that returns `Ok` recovers.
/// ```
/// use deferloop::{Deferred, Failure};
///
/// let (d, r) = Deferred::<u32>::new();
/// let d = d
///     .add_callback(|n| Ok(n * 2))
///     .add_callback(|n| if n > 10 { Err(Failure::msg("too big")) } else { Ok(n) })
///     .add_callback(|_| -> Result<u32, Failure> { unreachable!("skipped") })
///     .add_errback(|f| {
///         assert_eq!(f.to_string(), "too big");
///         Ok(0)
///     })
///     .add_callback(|n| Ok(n + 1));
/// r.callback(20).unwrap(); // whoever holds the Resolver fires the chain
/// assert_eq!(d.result().unwrap().unwrap(), 1);
/// ```
///
/// A callback that returns a Deferred chains it: the outer chain waits for
/// it, then goes on with its result.
/// ```
/// use deferloop::{defer_later, succeed, EventLoop};
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// let lp = ev.to_loop();
/// let d = succeed("user-7")
///     .add_callback(move |name| {
///         // A lookup that answers later, on the loop.
///         defer_later(&lp, Duration::from_millis(1), move || Ok(name.len()))
///     })
///     .add_callback(|len| Ok(len * 10));
/// assert_eq!(ev.run_until(d).unwrap(), 60);
/// # Ok::<(), deferloop::Error>(())
/// ```
///
/// Cancelling a Deferred that has not fired runs its canceller, and fails it
/// with [`Cancelled`] if the canceller did not fire it; an errback can
/// [`trap`](Failure::trap) that.
/// ```
/// use deferloop::{Cancelled, Deferred};
///
/// let (d, _r) = Deferred::<u32>::with_canceller(|_r| println!("stop the operation"));
/// let d = d.add_errback(|f| {
///     f.trap::<Cancelled>()?; // any other failure passes on
///     Ok(0)
/// });
/// d.cancel();
/// assert_eq!(d.result().unwrap().unwrap(), 0);
/// ```
///
/// # Errors
/// Firing twice returns [`AlreadyCalled`] from the [`Resolver`];
/// [`unpause`](Self::unpause) without `pause` returns [`NotPaused`]. Errors of
/// the *operation* travel down the chain as [`Failure`]s.
#[must_use = "a Deferred does nothing unless callbacks are added or it is kept"]
pub struct Deferred<T> {
    /// The chain's node, or its bare result (see `repr.rs`); a `Cell` so that
    /// `&self` methods can make the node when they first need one.
    repr: Cell<Repr>,
    /// Invariant in `T` (the chain reads and writes `T`s), and `!Send`.
    _t: PhantomData<*mut T>,
}

impl<T: 'static> Deferred<T> {
    fn from_repr(repr: Repr) -> Deferred<T> {
        Deferred {
            repr: Cell::new(repr),
            _t: PhantomData,
        }
    }

    fn from_node(node: NodeRef) -> Deferred<T> {
        Deferred::from_repr(Repr::Node(node))
    }

    /// A Deferred that has fired with `r`, created at `at`: no node yet.
    fn ready(r: Res, at: &'static Location<'static>) -> Deferred<T> {
        Deferred::from_repr(Repr::Ready(r, at))
    }

    /// Moves the state out; the handle is gone without a drop (the chain's
    /// hot path: `add_callback` and friends consume one handle per step).
    #[inline(always)]
    fn take_repr(self) -> Repr {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again (ManuallyDrop), so the
        // state is moved out exactly once; a `Deferred` owns nothing else.
        unsafe { std::ptr::read(&this.repr) }.into_inner()
    }

    /// The chain's node, made now if the Deferred was a bare result; the
    /// handle keeps it from then on.
    fn node(&self) -> NodeRef {
        let node = self.repr.take().into_node();
        self.repr.set(Repr::Node(node.clone()));
        node
    }

    /// A new unfired Deferred and its resolver; records the caller as the
    /// creation site (shown in [`AlreadyCalled`] and unhandled-error logs).
    #[track_caller]
    #[inline]
    pub fn new() -> (Deferred<T>, Resolver<T>) {
        Deferred::new_in(spare::pooled())
    }

    /// Like [`new`](Self::new), in `spare`'s storage if there is one (a
    /// node done with, see `Resolver::into_spare`): no allocation then.
    #[track_caller]
    #[inline]
    pub(crate) fn new_in(spare: Option<Spare>) -> (Deferred<T>, Resolver<T>) {
        let at = Location::caller();
        let node = match spare {
            Some(Spare(node)) => {
                let mut n = node.borrow_mut();
                n.created_at = at;
                n.resolvers = 1;
                drop(n);
                if registry::on() {
                    registry::register(&node);
                }
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
        d.node()
            .borrow_mut()
            .set_canceller(Box::new(move |node: &NodeRef| {
                f(&Resolver::from_node(node.clone(), at))
            }));
        (d, r)
    }

    /// Tells `hook` when this Deferred is cancelled unfired, after it has
    /// failed with [`Cancelled`] (its callbacks have run). Unlike a
    /// canceller, costs no allocation: `hook` is a weak reference to what
    /// the producer holds anyway.
    pub(crate) fn tell_on_cancel(&self, hook: std::rc::Weak<dyn CancelHook>) {
        self.node().borrow_mut().set_cancel_hook(hook);
    }

    /// Adds `step` to the chain (it runs at once if the Deferred has fired
    /// and is idle, as in Twisted).
    #[inline]
    fn push<U: 'static>(
        self,
        step: impl StepFn + 'static,
        at: &'static Location<'static>,
    ) -> Deferred<U> {
        Deferred::from_repr(self.take_repr().push(step, at))
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
        self.push(step, Location::caller())
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
        self.push(step, Location::caller())
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
        self.push(step, Location::caller())
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
        self.push(step, Location::caller())
    }

    /// Appends an infallible callback: shorthand for `add_callback(|v| Ok(f(v)))`.
    #[track_caller]
    #[inline]
    pub fn map<U: 'static>(self, f: impl FnOnce(T) -> U + 'static) -> Deferred<U> {
        let step = Map(f, PhantomData);
        self.push(step, Location::caller())
    }

    /// Stops the chain from running until a matching [`unpause`](Self::unpause);
    /// pauses nest (a counter).
    pub fn pause(&self) {
        run::pause(&self.node());
    }

    /// Undoes one [`pause`](Self::pause); at zero, a fired chain resumes now.
    ///
    /// # Errors
    /// [`NotPaused`] if the Deferred is not paused (the count stays at zero).
    pub fn unpause(&self) -> Result<(), NotPaused> {
        if run::unpause(&self.node()) {
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
        // A bare result has fired and waits on nothing: nothing to cancel.
        if self.peek(|r| matches!(r, Repr::Node(_))) {
            cancel::cancel(&self.node());
        }
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
        run::forward(
            &self.take_repr().into_node(),
            &target.node,
            Location::caller(),
        );
    }

    /// Whether the Deferred has fired (it may still be waiting on a chained one).
    pub fn is_called(&self) -> bool {
        self.peek(Repr::is_called)
    }

    /// Whether the Deferred is paused (by `pause`, or waiting on a chained one).
    pub fn is_paused(&self) -> bool {
        self.peek(Repr::is_paused)
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
        match self.take_repr() {
            Repr::Node(node) => match run::take_result(&node) {
                Some(r) => Ok(r.map(Value::take::<T>)),
                None => Err(Deferred::from_node(node)),
            },
            Repr::Ready(r, _) => Ok(r.map(Value::take::<T>)),
            Repr::Gone => repr::gone(),
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
        self.peek(Repr::created_at)
    }

    /// A handle that can cancel this Deferred without owning its chain, and
    /// without keeping it alive.
    pub(crate) fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(Rc::downgrade(&self.node()))
    }

    /// Whether the Deferred has fired and is idle with nothing queued: a
    /// callback added now runs at once.
    #[inline]
    pub(crate) fn is_ready(&self) -> bool {
        self.peek(Repr::is_ready)
    }

    /// The untyped node (for helpers in this module tree).
    pub(crate) fn weak_node(&self) -> WeakNode {
        Rc::downgrade(&self.node())
    }

    /// What a callback returning this Deferred leaves in its slot: the
    /// result itself if it is bare, else the node to take it from or wait on.
    fn into_outcome(self) -> node::Outcome {
        match self.take_repr() {
            Repr::Ready(r, _) => node::Outcome::Done(r),
            other => node::Outcome::Chain(other.into_node()),
        }
    }
}

impl<T> Drop for Deferred<T> {
    fn drop(&mut self) {
        // A bare failure nobody took: reported as a node's would be.
        match self.repr.get_mut() {
            Repr::Ready(Err(f), at) => unhandled::report(f.clone(), at),
            Repr::Node(_) => {
                if let Repr::Node(node) = self.repr.take() {
                    spare::recycle(node);
                }
            }
            _ => {}
        }
    }
}

impl<T> Deferred<T> {
    /// Looks at the state without moving it (`f` must not run user code).
    #[inline]
    fn peek<R>(&self, f: impl FnOnce(&Repr) -> R) -> R {
        // SAFETY: a `Deferred` is `!Sync`, and its methods never keep a
        // reference into `repr` across a call that can reach this handle
        // again: `take`/`set` are the only writes, none runs while `f` reads,
        // and `f` runs no user code (it at most borrows the node).
        f(unsafe { &*self.repr.as_ptr() })
    }
}

impl<T> fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Read first, format after: the formatter may run user code.
        let (at, called, paused, waiting_on) =
            self.peek(|r| (r.created_at(), r.is_called(), r.is_paused(), r.waiting_on()));
        let mut s = f.debug_struct("Deferred");
        s.field("created_at", &format_args!("{at}"))
            .field("called", &called)
            .field("paused", &paused);
        // Twisted's repr: "waiting on Deferred at ...".
        if let Some(at) = waiting_on {
            s.field("waiting_on", &format_args!("Deferred created at {at}"));
        }
        // With the registry on (`ps`): its id, and what it waits on.
        if let Some((id, waits)) = self.registry_view() {
            s.field("id", &id);
            if let Some(w) = waits {
                s.field("waits_on", &format_args!("{w}"));
            }
        }
        s.finish()
    }
}

/// A Deferred that has already fired with `v` (Twisted's `succeed`).
#[track_caller]
pub fn succeed<T: 'static>(v: T) -> Deferred<T> {
    Deferred::ready(Ok(Value::new(v)), Location::caller())
}

/// A Deferred that has already failed with `f` (Twisted's `fail`); an existing
/// `Failure` is kept as is (the same failure).
#[track_caller]
pub fn fail<T: 'static>(f: impl Into<Failure>) -> Deferred<T> {
    Deferred::ready(Err(f.into()), Location::caller())
}
