//! Structured concurrency: a [`scope`] owns the Deferreds started in it.
//!
//! The body gets a [`Scope`] and returns the scope's value (or a Deferred of
//! it); anything it — or any callback holding a clone of the `Scope` —
//! [`spawn`](Scope::spawn)s is a child. The scope's Deferred fires once the
//! body's result is in *and* every child has ended, so nothing started in
//! it outlives it (a Deferred that must outlive it is simply not spawned:
//! [`detach`](Deferred::detach) it instead). When the body or (by default)
//! a child fails, or the scope is cancelled, every live child and the body
//! are cancelled; the scope then fails with one shape whatever the count, a
//! [`ScopeFailed`] listing the failures in the order they came — never
//! sometimes bare and sometimes grouped (Trio's old complaint). The
//! `Cancelled` failures the scope itself caused are not counted.
//!
//! Trio's nursery, asyncio's `TaskGroup` and tokio's `JoinSet`, without a
//! cancel counter to corrupt: a child's `Cancelled` is the scope's own when
//! the scope cancelled it, and a failure otherwise.
//!
//! # What cancelling a child releases
//!
//! Cancelling is synchronous: when [`Deferred::cancel`] returns, the child
//! has failed with [`Cancelled`] and released what it waited on.
//!
//! | the child waits on | cancelling it |
//! |---|---|
//! | a [`Stream`](crate::net::Stream) read | drops the read request; bytes already buffered stay for the next read |
//! | a connect (`connect_tcp`, `Stream::connect`, by name) | closes the socket, cancels the connect deadline and any name lookup |
//! | a timer ([`defer_later`](super::defer_later), `add_timeout`) | removes it from the timer wheel at once |
//! | a thread job ([`defer_to_thread`](crate::Loop::defer_to_thread)) | a queued job is removed and never runs; a running one cannot be stopped: it runs on and its result is dropped (Trio's `abandon_on_cancel=True`) |
//! | a [`DeferredLock`](super::DeferredLock) / [`DeferredSemaphore`](super::DeferredSemaphore) acquire | removes the waiter; a guard already given is released when dropped |
//! | a [`DeferredQueue`](super::DeferredQueue) get | removes the getter; a later `put` stays in the queue |
//! | a child process's [`wait`](crate::process::Process::wait) | stops waiting; the child runs on — kill it in an errback that sees `Cancelled` to tie it to the scope |
//! | another scope, a [`map_limit`](super::map_limit), a [`retry`](fn@super::retry), a [`loop_fn`](super::loop_fn) | cancels what that one owns, the same way |
//!
//! tokio's `JoinSet` aborts tasks but not `spawn_blocking` jobs, silently;
//! here the table says what happens to each. Checked by
//! tests/scope_cancel_releases.rs.

// Tests: tests/deferred_scope.rs.

use super::node::WeakNode;
use super::{cancel_weak, Cancelled, Deferred, IntoStep, Resolver};
use crate::Failure;
use slab::Slab;
use std::cell::RefCell;
use std::error::Error as StdError;
use std::fmt;
use std::panic::Location;
use std::rc::Rc;

/// The handle of a running [`scope`]: spawn children into it, cancel it.
/// Cheap to clone; a clone kept in a callback can spawn while the scope runs.
#[derive(Clone)]
pub struct Scope(Rc<RefCell<State>>);

/// Fires the scope's Deferred: the failures, and whether it was cancelled.
type Finish = Box<dyn FnOnce(Vec<Failure>, bool)>;

struct State {
    children: Slab<WeakNode>,
    failures: Vec<Failure>,
    fail_fast: bool,
    /// The scope cancels what it owns: a `Cancelled` from now on is its own.
    cancelling: bool,
    /// The body's Deferred while it is pending.
    body: Option<WeakNode>,
    body_done: bool,
    /// The scope's own Deferred was cancelled: it fails with `Cancelled`
    /// even if the body had finished.
    outer_cancelled: bool,
    ended: bool,
    /// The scope's own Deferred (for `ps`: it waits on the children).
    outer: WeakNode,
    /// Fires the scope's Deferred with the body's value or the failures.
    finish: Option<Finish>,
}

/// Runs `body` in a new scope, fail-fast: the first failure (of the body or
/// of a child) cancels everything else. Fires with the body's value once the
/// body and every child have ended, or fails with [`ScopeFailed`].
///
/// Cancelling the returned Deferred cancels the body and every child first;
/// it then fails with [`Cancelled`]. A deadline for the whole scope is
/// [`add_timeout`](Deferred::add_timeout) on it.
///
/// # Examples
/// Two downloads and a progress ticker: the first failure stops them all.
/// ```
/// use deferloop::deferred::{defer_later, scope, ScopeFailed};
/// use deferloop::{Failure, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let c = clock.clone();
/// let d = scope(move |s| {
///     s.spawn(defer_later(&c, Duration::from_secs(5), || Ok("slow page")))?;
///     s.spawn(defer_later(&c, Duration::from_secs(1), || -> Result<(), Failure> {
///         Err(Failure::msg("refused"))
///     }))?;
///     Ok("done")
/// });
/// clock.advance(Duration::from_secs(1));
/// let f = d.result().unwrap().unwrap_err();
/// assert_eq!(f.downcast_ref::<ScopeFailed>().unwrap().failures.len(), 1);
/// assert_eq!(clock.pending(), 0); // the slow page's timer is gone
/// ```
#[track_caller]
pub fn scope<R: IntoStep>(body: impl FnOnce(&Scope) -> R) -> Deferred<R::Output> {
    run(body, true, Location::caller())
}

/// Like [`scope`], but a failing child cancels nothing: every child runs to
/// its end, and the scope fails with all the failures (or fires with the
/// body's value if there were none).
#[track_caller]
pub fn scope_collect_all<R: IntoStep>(body: impl FnOnce(&Scope) -> R) -> Deferred<R::Output> {
    run(body, false, Location::caller())
}

#[track_caller]
fn run<R: IntoStep>(
    body: impl FnOnce(&Scope) -> R,
    fail_fast: bool,
    at: &'static Location<'static>,
) -> Deferred<R::Output> {
    let scope = Scope(Rc::new(RefCell::new(State {
        children: Slab::new(),
        failures: Vec::new(),
        fail_fast,
        cancelling: false,
        body: None,
        body_done: false,
        outer_cancelled: false,
        ended: false,
        outer: WeakNode::new(),
        finish: None,
    })));
    let weak = Rc::downgrade(&scope.0);
    let (d, r): (Deferred<R::Output>, Resolver<R::Output>) = Deferred::with_canceller(move |_| {
        if let Some(s) = weak.upgrade() {
            s.borrow_mut().outer_cancelled = true;
            Scope(s).cancel();
        }
    });
    scope.0.borrow_mut().outer = d.weak_node();
    let value: Rc<RefCell<Option<R::Output>>> = Rc::new(RefCell::new(None));
    let v = value.clone();
    scope.0.borrow_mut().finish = Some(Box::new(move |failures: Vec<Failure>, cancelled| {
        let value = v.borrow_mut().take().filter(|_| !cancelled);
        match (failures.is_empty(), value) {
            (true, Some(value)) => r.callback_if_pending(value),
            (true, None) => r.errback_if_pending(Failure::with_origin(Cancelled, at)),
            (false, _) => r.errback_if_pending(Failure::with_origin(ScopeFailed { failures }, at)),
        };
    }));
    // Its outcome as a Deferred, a panic as a failure arising at the
    // caller of `scope` (the location is tracked through `run`).
    let body = super::maybe_deferred(|| body(&scope));
    scope.0.borrow_mut().body = Some(body.weak_node());
    d.tag_inputs([&body]);
    let s = scope.clone();
    body.add_both(move |r: Result<R::Output, Failure>| {
        {
            let mut st = s.0.borrow_mut();
            st.body = None;
            st.body_done = true;
        }
        match r {
            Ok(v) => *value.borrow_mut() = Some(v),
            Err(f) => s.child_failed(f),
        }
        s.end_if_done();
        Ok(())
    })
    .detach();
    d
}

impl Scope {
    /// Makes `d` a child of this scope: the scope waits for it, cancels it
    /// with the others, and counts its failure (its value is dropped — chain
    /// what you need from it before spawning).
    ///
    /// A child spawned while the scope is cancelling is cancelled at once.
    ///
    /// # Errors
    /// [`ScopeEnded`] if the scope has already ended; `d` is then cancelled
    /// (and its failure consumed), so nothing outlives the scope by mistake.
    #[track_caller]
    pub fn spawn<T: 'static>(&self, d: Deferred<T>) -> Result<(), ScopeEnded> {
        let (key, cancel_now) = {
            let mut st = self.0.borrow_mut();
            if st.ended {
                drop(st);
                d.cancel();
                d.add_both(|_| Ok(())).detach();
                return Err(ScopeEnded);
            }
            super::registry::tag_child(&st.outer, &d);
            (st.children.insert(d.weak_node()), st.cancelling)
        };
        let weak = d.weak_node();
        let s = self.clone();
        d.add_both(move |r: Result<T, Failure>| {
            s.0.borrow_mut().children.try_remove(key);
            if let Err(f) = r {
                s.child_failed(f);
            }
            s.end_if_done();
            Ok(())
        })
        .detach();
        if cancel_now {
            cancel_weak(&weak);
        }
        Ok(())
    }

    /// Cancels the body and every live child. The scope's Deferred then
    /// fires with the body's value if the body had already finished (a way
    /// to stop background children), else fails with [`Cancelled`].
    pub fn cancel(&self) {
        let (children, body) = {
            let mut st = self.0.borrow_mut();
            st.cancelling = true;
            let children: Vec<WeakNode> = st.children.iter().map(|(_, w)| w.clone()).collect();
            (children, st.body.clone())
        };
        if let Some(b) = body {
            cancel_weak(&b);
        }
        for w in &children {
            cancel_weak(w);
        }
    }

    /// How many children are still running.
    pub fn len(&self) -> usize {
        self.0.borrow().children.len()
    }

    /// Whether no child is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the scope has ended (its Deferred has fired or is firing).
    pub fn is_ended(&self) -> bool {
        self.0.borrow().ended
    }

    fn child_failed(&self, f: Failure) {
        let cancel = {
            let mut st = self.0.borrow_mut();
            if st.cancelling && f.check::<Cancelled>() {
                return; // the scope's own doing
            }
            st.failures.push(f);
            st.fail_fast && !st.cancelling
        };
        if cancel {
            self.cancel();
        }
    }

    fn end_if_done(&self) {
        let (finish, failures, outer_cancelled) = {
            let mut st = self.0.borrow_mut();
            if st.ended || !st.body_done || !st.children.is_empty() {
                return;
            }
            st.ended = true;
            let failures = std::mem::take(&mut st.failures);
            (st.finish.take(), failures, st.outer_cancelled)
        };
        if let Some(finish) = finish {
            finish(failures, outer_cancelled);
        }
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.0.borrow();
        f.debug_struct("Scope")
            .field("children", &st.children.len())
            .field("failures", &st.failures.len())
            .field("fail_fast", &st.fail_fast)
            .field("cancelling", &st.cancelling)
            .field("ended", &st.ended)
            .finish()
    }
}

/// A [`scope`] failed: the failures of its body and children, in the order
/// they came (never empty). Its `source()` is the first one's error.
#[derive(Debug, Clone)]
pub struct ScopeFailed {
    /// The failures, first first.
    pub failures: Vec<Failure>,
}

impl ScopeFailed {
    /// The failure that came first (in a fail-fast scope, the one that
    /// cancelled the rest).
    pub fn first(&self) -> &Failure {
        &self.failures[0]
    }
}

impl fmt::Display for ScopeFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The first failure follows as the `source()`.
        match self.failures.len() {
            1 => f.write_str("scope failed"),
            n => write!(f, "scope failed ({n} failures, the first follows)"),
        }
    }
}

impl StdError for ScopeFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.first().error())
    }
}

/// [`Scope::spawn`] on a scope that has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeEnded;

impl fmt::Display for ScopeEnded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("spawn into a scope that has ended")
    }
}

impl StdError for ScopeEnded {}
