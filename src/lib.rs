//! deferloop: a single-threaded event loop with Twisted-style `Deferred`s, and no
//! async/await.
//!
//! The loop ([`EventLoop`], and the [`Loop`] handle every callback receives) is
//! asyncio's: a ready queue run as a snapshot each turn, a timer wheel on a
//! monotonic clock, and a `mio` selector that is the only place it sleeps. On
//! top, a [`Deferred`] is a result that arrives later, with Twisted's chain of
//! callbacks and errbacks — typed, and stack-safe at any depth. Helpers that need
//! time take a [`Clock`]: the loop in programs, a [`ManualClock`] in tests.
//!
//! What it is not: multi-threaded (only [`Remote`] and [`Monitor`] cross
//! threads; everything else is `!Send`), or a futures runtime.
//!
//! # Examples
//! ```
//! use deferloop::{Deferred, EventLoop, Failure};
//! use std::time::Duration;
//!
//! let ev = EventLoop::new()?;
//! let (d, r) = Deferred::<u32>::new();
//! ev.call_later(Duration::from_millis(5), move |_| {
//!     r.callback(41).unwrap();
//! })?;
//! let d = d
//!     .add_callback(|n| Ok(n + 1))
//!     .add_timeout(Duration::from_secs(1), &ev.handle());
//! assert_eq!(ev.run_until(d).unwrap(), 42);
//! # Ok::<(), deferloop::Error>(())
//! ```
//!
//! DESIGN.md in the repository maps the code: the turn, the data structures,
//! and why.

#![deny(missing_docs)]

#[cfg(not(unix))]
compile_error!("deferloop runs on Unix-like systems only (Linux, the BSDs, macOS): it is built on readiness I/O and Unix sockets.");

mod clock;
mod context;
pub mod cores;
pub mod deferred;
mod error;
pub mod net;
pub mod process;
mod reactor;
pub mod shutdown;
pub mod signal;

pub use clock::{Clock, ManualClock, ManualTimer, Timer};
pub use context::ContextVar;
pub use deferred::failure::{Failure, FailureReport, Message, Panicked};
// The conditions a chain fails with, where a user matches on them.
pub use deferred::{
    defer_later, fail, gather_results, maybe_deferred, race, succeed, Deferred, DeferredList,
    DeferredLock, DeferredQueue, DeferredSemaphore, IntoStep, ListResult, LoopingCall, Resolver,
};
pub use deferred::{Abandoned, Cancelled, FailureGroup, LoopClosed, TimedOut};
pub use error::{Error, Result};
pub use reactor::{
    default_exception_handler, CurrentCallback, EventLoop, ExceptionContext, Handle, HandleState,
    IoInfo, Loop, Monitor, Remote, Snapshot, TimerInfo,
};
pub use signal::{Signal, SignalHandler};

/// README.md's Rust snippets, compiled and run as doctests so that they
/// stay pasteable.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
