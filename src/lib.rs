//! deferloop: a single-threaded event loop with Twisted-style `Deferred`s, and no
//! async/await.
//!
//! The loop ([`EventLoop`], and the [`Loop`] handle every callback receives) is
//! asyncio's: a ready queue run as a snapshot each turn, a timer wheel on a
//! monotonic clock, and a `mio` selector that is the only place it sleeps. On
//! top, a [`Deferred`] is a result that arrives later, with Twisted's chain of
//! callbacks and errbacks — typed, and stack-safe at any depth. Networking is
//! Twisted's and asyncio's transports and protocols ([`net`]).
//!
//! What it is not: multi-threaded (only [`Remote`] and [`Monitor`] cross
//! threads; everything else is `!Send`), or a futures runtime. Coming from
//! another library: [For Twisted users](guide::for_twisted_users),
//! [For tokio users](guide::for_tokio_users).
//!
//! # Where things are
//! - **The loop**: [`EventLoop`] owns it, [`Loop`] is the handle —
//!   [`call_soon`](Loop::call_soon), [`call_later`](Loop::call_later) (a
//!   [`Handle`] to cancel), [`run`](Loop::run), [`run_until`](Loop::run_until),
//!   [`stop`](Loop::stop); [`ContextVar`] for per-task context; a panic in a
//!   callback goes to the exception handler ([`ExceptionContext`],
//!   [`default_exception_handler`]).
//! - **Results that come later**: [`Deferred`] and its firing side
//!   [`Resolver`]; errors travel as a [`Failure`] (matched with
//!   [`check`](Failure::check) and [`trap`](Failure::trap)); [`succeed`],
//!   [`fail`], [`maybe_deferred`]; several at once with [`DeferredList`],
//!   [`gather_results`], [`race`]; the conditions a chain fails with:
//!   [`TimedOut`], [`Cancelled`], [`Abandoned`], [`LoopClosed`],
//!   [`FailureGroup`]. The [`deferred`] module has the rest.
//! - **Time**: [`Deferred::add_timeout`], [`defer_later`], [`LoopingCall`]
//!   take an [`AsClock`]: the loop in programs, a [`ManualClock`] in tests.
//! - **Taking turns**: [`DeferredLock`], [`DeferredSemaphore`],
//!   [`DeferredQueue`].
//! - **Threads**: [`Loop::defer_to_thread`] for blocking work, [`Remote`] to
//!   reach the loop from another thread, [`Monitor`] to watch it.
//! - **Networking**: [`net`] — a [`Protocol`](net::Protocol) is called with a
//!   [`Transport`](net::Transport); [`Loop::listen_tcp`],
//!   [`Loop::connect_tcp`], UDP, Unix sockets, TLS (feature `tls`), framers.
//! - **Services**: [`signal`], [`shutdown`], [`process`] (child processes),
//!   [`cores`] (one loop per core).
//! - **Errors of the loop itself** (closed, already running, a selector
//!   error): [`Error`].
//!
//! The library reports through the [`log`](https://docs.rs/log) crate; install
//! a logger to see what it reports.
//!
//! # Examples
//! A Deferred fired by a timer, with a callback and a timeout:
//! ```
//! use deferloop::{Deferred, EventLoop};
//! use std::time::Duration;
//!
//! let ev = EventLoop::new()?;
//! let (d, r) = Deferred::<u32>::new();
//! ev.call_later(Duration::from_millis(5), move |_| {
//!     r.callback(41).unwrap();
//! })?;
//! let d = d
//!     .add_callback(|n| Ok(n + 1))
//!     .add_timeout(Duration::from_secs(1), &ev);
//! assert_eq!(ev.run_until(d).unwrap(), 42);
//! # Ok::<(), deferloop::Error>(())
//! ```
//!
//! An echo server and a client on one loop: the client's reply is a
//! Deferred, fired by its protocol.
//! ```
//! use deferloop::net::{Protocol, Transport};
//! use deferloop::{Deferred, EventLoop, Resolver};
//! use std::time::Duration;
//!
//! struct Echo;
//! impl Protocol for Echo {
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         t.write(data);
//!     }
//! }
//!
//! struct Client {
//!     got: Vec<u8>,
//!     reply: Resolver<Vec<u8>>,
//! }
//! impl Protocol for Client {
//!     fn connection_made(&mut self, t: &Transport) {
//!         t.write(b"hello");
//!     }
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         self.got.extend_from_slice(data);
//!         if self.got.len() == 5 {
//!             self.reply.callback_if_pending(std::mem::take(&mut self.got));
//!             t.close();
//!         }
//!     }
//! }
//!
//! let ev = EventLoop::new()?;
//! let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)?;
//! let addr = server.local_addr().as_inet().unwrap();
//! let (reply, r) = Deferred::new();
//! ev.connect_tcp(addr, Client { got: Vec::new(), reply: r }).connected().detach();
//! let reply = reply.add_timeout(Duration::from_secs(5), &ev);
//! assert_eq!(ev.run_until(reply).unwrap(), b"hello");
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
pub mod guide;
pub mod net;
pub mod process;
mod reactor;
pub mod shutdown;
pub mod signal;
pub mod source;
mod timers;

pub use clock::{AsClock, Clock, ManualClock, ManualTimer, Timer};
pub use context::ContextVar;
pub use deferred::failure::{Failure, LocalError, Message, Panicked};
// The conditions a chain fails with, where a user matches on them.
pub use deferred::{
    defer_later, fail, gather_results, maybe_deferred, race, succeed, Deferred, DeferredList,
    DeferredLock, DeferredQueue, DeferredSemaphore, IntoStep, ListResult, LoopingCall, Resolver,
};
pub use deferred::{Abandoned, Cancelled, FailureGroup, LoopClosed, TimedOut};
pub use error::{Error, Result};
pub use reactor::{
    default_exception_handler, CurrentCallback, EventLoop, ExceptionContext, Handle, HandleState,
    IoInfo, Loop, Monitor, Remote, Snapshot, TimerInfo, DEFAULT_POOL_CLOSE_TIMEOUT,
};
pub use signal::{Signal, SignalHandler};

/// README.md's Rust snippets, compiled and run as doctests so that they
/// stay pasteable.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
