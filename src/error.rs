//! The loop-level error type. Owns `Error` and the crate's `Result` alias.
//!
//! One story, three kinds of error:
//! - *misuse of the loop* (it is closed, it is already running, no loop is
//!   current, an argument out of range) and OS errors come back from the call
//!   as [`Error`];
//! - *conditions that travel in a chain* (cancelled, timed out, abandoned, the
//!   loop closed under an operation, a panicking callback) are small error
//!   types in [`deferred::errors`](crate::deferred::errors), inside a
//!   [`Failure`](crate::Failure) that `check`s and `trap`s them;
//! - constructors take types that make bad input unrepresentable
//!   (`NonZeroUsize`) or return their own error.
//!
//! What leaves the loop for `main` is an [`Error`] too:
//! [`run_until`](crate::Loop::run_until) and
//! [`Remote::call_blocking`](crate::Remote::call_blocking) return the
//! Deferred's failure as [`Error::Failed`], and their own refusals (closed,
//! running, stopped, timed out waiting) as the other variants. `Error` is a
//! `std::error::Error + Send + Sync + 'static`, so `?` takes it into
//! `anyhow::Result` or `Box<dyn Error>`; `Failed`'s `source()` is the
//! failure's own error, so a chain walk finds the `TimedOut`, `io::Error`, ...
//! inside, and [`Error::check`] / [`Error::downcast_ref`] look there directly.
//!
//! Where this does better than its models: anyhow's `Error` turned into a
//! `Box<dyn Error>` can no longer be downcast to what it wrapped; a bare
//! [`Failure`](crate::Failure) no other clone holds becomes a box that *is*
//! its error (`downcast_ref::<TimedOut>()` on the box works). Twisted turns a
//! failure into text when it leaves its thread; here it crosses whole, origin
//! and backtrace included. The one thing `?` cannot do is take a bare
//! `Result<_, Failure>` into `anyhow::Result` (a `Failure` that converted from
//! every error could not also be one): write `.map_err(Failure::into_error)?`.

use std::fmt;
use std::io;

/// Errors returned by the loop's own API.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The loop has been closed (or dropped): nothing can be scheduled on it.
    Closed,
    /// The call needs a loop that is not running, and this one is (for example
    /// `run()` from inside a callback, or `close()` while running).
    Running,
    /// No loop is running on this thread (from [`Loop::current`](crate::Loop::current)).
    NoRunningLoop,
    /// The loop is not running, so a call that waits for it would never return.
    NotRunning,
    /// The loop stopped before the awaited result arrived.
    Stopped,
    /// A blocking call gave up waiting (`call_blocking`'s own timeout; a
    /// chain's timeout is [`deferred::TimedOut`](crate::deferred::TimedOut)).
    TimedOut,
    /// The file descriptor or object is owned by a transport or listener and
    /// cannot be taken over by `add_reader`/`add_writer`.
    Owned,
    /// The object (transport, listener, source) no longer exists.
    Gone,
    /// The object is in use right now: a protocol reached through a
    /// [`ProtocolRef`](crate::net::ProtocolRef) while one of its own methods runs.
    InUse,
    /// An argument was out of its documented range; the message says which.
    InvalidInput(&'static str),
    /// The awaited Deferred failed with this failure. Displays as "Deferred
    /// failed (raised at FILE:LINE:COL)", and with `{:#}` followed by the
    /// failure's message and causes; its `source()` is the failure's own
    /// error, so `{:#}` in anyhow prints the whole chain; its `Debug` shows
    /// the failure's (message, causes, origin, backtrace).
    Failed(crate::Failure),
    /// An operating-system error.
    Io(io::Error),
}

/// `Result<T, deferloop::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed => f.write_str("event loop is closed"),
            Error::Running => f.write_str("event loop is running"),
            Error::NoRunningLoop => f.write_str("no event loop is running on this thread"),
            Error::NotRunning => f.write_str("event loop is not running"),
            Error::Stopped => f.write_str("event loop stopped before the result arrived"),
            Error::TimedOut => f.write_str("timed out waiting for the event loop"),
            Error::Owned => f.write_str("the file descriptor is owned by a transport"),
            Error::Gone => f.write_str("the object no longer exists"),
            Error::InUse => f.write_str("the object is in use (one of its own methods is running)"),
            Error::InvalidInput(what) => write!(f, "invalid input: {what}"),
            Error::Failed(r) if f.alternate() => {
                write!(f, "Deferred failed (raised at {}): {r}", r.origin())
            }
            Error::Failed(r) => write!(f, "Deferred failed (raised at {})", r.origin()),
            Error::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Failed(r) => Some(r.error()),
            _ => None,
        }
    }
}

impl Error {
    /// The failure, for [`Error::Failed`].
    pub fn failure(&self) -> Option<&crate::Failure> {
        match self {
            Error::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// The failure, for [`Error::Failed`]; else `Err` with this same error.
    ///
    /// # Errors
    /// `self`, when it is not `Failed`.
    pub fn into_failure(self) -> Result<crate::Failure, Error> {
        match self {
            Error::Failed(f) => Ok(f),
            e => Err(e),
        }
    }

    /// The error inside as an `E`: the failure's own error for
    /// [`Error::Failed`] (as [`Failure::downcast_ref`](crate::Failure::downcast_ref)),
    /// the `io::Error` for [`Error::Io`]; `None` for the loop's own refusals.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Failed(f) => f.downcast_ref::<E>(),
            Error::Io(e) => (e as &(dyn std::error::Error + 'static)).downcast_ref::<E>(),
            _ => None,
        }
    }

    /// Whether the error inside is an `E` (see [`downcast_ref`](Self::downcast_ref)):
    /// `run_until(d).unwrap_err().check::<TimedOut>()`.
    pub fn check<E: std::error::Error + 'static>(&self) -> bool {
        self.downcast_ref::<E>().is_some()
    }
}

/// What leaves the loop crosses threads and reaches `main`.
const _: fn() = || {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<Error>();
};

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Io(e) => e,
            Error::TimedOut => io::Error::new(io::ErrorKind::TimedOut, e),
            Error::InvalidInput(_) => io::Error::new(io::ErrorKind::InvalidInput, e),
            other => io::Error::other(other),
        }
    }
}
