//! The errors of the Deferred layer: what firing, pausing, cancelling, timing out,
//! the list helpers and the lock/queue helpers report.
//!
//! Errors that are *events* ([`Cancelled`], [`TimedOut`], [`FirstError`],
//! [`Abandoned`], ...) travel inside a [`Failure`]: match them with
//! [`Failure::check`] or [`Failure::trap`]. Misuse errors ([`AlreadyCalled`],
//! [`NotPaused`], ...) are returned by the call.
//!
//! Every one is `Send + Sync + 'static` and `Clone` (checked below), so it
//! stays downcastable on its way to another thread or to `main`.

use crate::Failure;
use std::error::Error as StdError;
use std::fmt;
use std::panic::Location;
use std::time::Duration;

/// A Deferred was fired a second time (Twisted's `AlreadyCalledError`).
///
/// Returned by [`Resolver::callback`](super::Resolver::callback) and friends, and
/// put into a chain as a failure when [`chain_deferred`](super::Deferred::chain_deferred)
/// forwards into a Deferred that had already fired.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlreadyCalled {
    /// Where the Deferred was created.
    pub created_at: &'static Location<'static>,
    /// Where it was fired first (or cancelled, which fires it).
    pub first_fired_at: &'static Location<'static>,
    /// Where the refused second fire came from.
    pub fired_again_at: &'static Location<'static>,
}

impl fmt::Display for AlreadyCalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Deferred created at {} was already fired (first at {}; again at {})",
            self.created_at, self.first_fired_at, self.fired_again_at
        )
    }
}

impl StdError for AlreadyCalled {}

/// [`unpause`](super::Deferred::unpause) without a matching `pause`; the pause
/// count is left at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotPaused;

impl fmt::Display for NotPaused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unpause() of a Deferred that is not paused")
    }
}

impl StdError for NotPaused {}

/// A callback returned the Deferred it was attached to. Twisted leaves such a
/// chain stuck forever; here the chain continues with this failure instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedToSelf;

impl fmt::Display for ChainedToSelf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a callback returned the Deferred it was attached to")
    }
}

impl StdError for ChainedToSelf {}

/// Every [`Resolver`](super::Resolver) of the Deferred was dropped before it
/// fired: nobody can fire it any more, so its chain fails with this instead
/// of waiting forever (what a dropped `oneshot::Sender` does to its receiver).
///
/// The failure's origin is where the last `Resolver` was made (created or
/// cloned); Rust does not tell a `drop` where it happens, so with
/// `RUST_BACKTRACE=1` the failure also carries a backtrace of the drop.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abandoned {
    /// Where the Deferred was created.
    pub created_at: &'static Location<'static>,
    /// Where the last `Resolver` to be dropped was created or cloned.
    pub resolver_made_at: &'static Location<'static>,
}

impl fmt::Display for Abandoned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Deferred created at {} was abandoned: its last Resolver (made at {}) was dropped before firing it",
            self.created_at, self.resolver_made_at
        )
    }
}

impl StdError for Abandoned {}

/// The event loop was closed before the operation could finish: what the
/// Deferred of a loop operation (a timer, a call on a thread, ...) fails
/// with when its loop is or becomes closed. A condition in the chain, to
/// `check`/`trap`; calling the loop itself when closed returns
/// [`Error::Closed`](crate::Error::Closed) instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopClosed;

impl fmt::Display for LoopClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the event loop was closed")
    }
}

impl StdError for LoopClosed {}

/// The failure a Deferred gets when the loop refused the operation behind it:
/// `Closed` becomes [`LoopClosed`], an OS error stays an `io::Error`, the rest
/// keep their [`Error`](crate::Error).
pub(crate) fn loop_failure(e: crate::Error, at: &'static Location<'static>) -> Failure {
    match e {
        crate::Error::Closed => Failure::with_origin(LoopClosed, at),
        crate::Error::Io(e) => Failure::with_origin(e, at),
        crate::Error::Failed(f) => f,
        e => Failure::with_origin(e, at),
    }
}

/// The Deferred was cancelled (Twisted's `CancelledError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Deferred was cancelled")
    }
}

impl StdError for Cancelled {}

/// [`add_timeout`](super::Deferred::add_timeout) gave up (Twisted's `TimeoutError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut {
    /// The timeout that expired.
    pub after: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Deferred timed out after {:?}", self.after)
    }
}

impl StdError for TimedOut {}

/// The first failure among the inputs of a [`DeferredList`](super::DeferredList)
/// built with `fire_on_one_errback(true)`, or of [`gather_results`](super::gather_results).
///
/// Equality compares `index` and whether the failures are the same failure
/// ([`Failure::ptr_eq`]), as Twisted compares `(index, subFailure)`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FirstError {
    /// Position of the failed input.
    pub index: usize,
    /// Its failure.
    pub failure: Failure,
}

impl PartialEq for FirstError {
    fn eq(&self, other: &FirstError) -> bool {
        self.index == other.index && Failure::ptr_eq(&self.failure, &other.failure)
    }
}

impl fmt::Display for FirstError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FirstError[#{}, {}]", self.index, self.failure)
    }
}

impl StdError for FirstError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.failure.error())
    }
}

/// Every input of [`race`](super::race) failed; the failures in input order.
#[derive(Debug, Clone)]
pub struct FailureGroup(pub Vec<Failure>);

impl fmt::Display for FailureGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "all {} Deferreds failed", self.0.len())?;
        for (i, failure) in self.0.iter().enumerate() {
            write!(f, "; #{i}: {failure}")?;
        }
        Ok(())
    }
}

impl StdError for FailureGroup {}

/// [`DeferredQueue::put`](super::DeferredQueue::put) on a full queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOverflow;

impl fmt::Display for QueueOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeferredQueue is full")
    }
}

impl StdError for QueueOverflow {}

/// [`DeferredQueue::get`](super::DeferredQueue::get) with the backlog of waiting
/// getters full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueUnderflow;

impl fmt::Display for QueueUnderflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeferredQueue backlog of waiting getters is full")
    }
}

impl StdError for QueueUnderflow {}

/// The library's error types reach other threads and `main` as themselves.
const _: fn() = || {
    fn whole<T: StdError + Send + Sync + Clone + 'static>() {}
    whole::<AlreadyCalled>();
    whole::<NotPaused>();
    whole::<ChainedToSelf>();
    whole::<Abandoned>();
    whole::<LoopClosed>();
    whole::<Cancelled>();
    whole::<TimedOut>();
    whole::<FirstError>();
    whole::<FailureGroup>();
    whole::<QueueOverflow>();
    whole::<QueueUnderflow>();
    whole::<crate::Panicked>();
    whole::<crate::Message>();
    whole::<crate::LocalError>();
    whole::<super::GaveUp>();
    whole::<super::ScopeFailed>();
    whole::<super::ScopeEnded>();
    fn failure<T: Send + Sync + Clone + 'static>() {}
    failure::<Failure>();
};
