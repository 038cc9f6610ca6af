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
//! `Error::TimedOut`, `Stopped` and `Failed` are what
//! [`Remote::call_blocking`](crate::Remote::call_blocking) returns to the
//! waiting thread (not the chain's [`TimedOut`](crate::deferred::TimedOut)).

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
    /// The awaited Deferred failed; the failure, rendered (a `Failure` cannot
    /// cross threads): its messages as a `source()` chain, and where it arose.
    Failed(crate::FailureReport),
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
            Error::Failed(r) => write!(f, "the Deferred failed (raised at {})", r.origin()),
            Error::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Failed(r) => Some(r),
            _ => None,
        }
    }
}

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
