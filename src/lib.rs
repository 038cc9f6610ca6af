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
//! a logger to see what it reports. Records about a connection, a Deferred or
//! a slow callback carry key-value fields (`peer`, `deferred_created_at`,
//! `scheduled_at`, ...) for a structured logger; [`Loop::stats`] is a cheap
//! snapshot of counters ([`Stats`]) for a metrics exporter to poll.
//!
//! # Errors: which call returns what, and why
//! One rule decides the shape: **a call that can fail only now returns a
//! `Result`; a call whose outcome comes later returns a [`Deferred`], and its
//! failure travels down the chain as a [`Failure`].**
//! - [`EventLoop::new`] returns `std::io::Result`: the only thing that can go
//!   wrong is the OS refusing a selector or a pipe, and `?` into any error
//!   type is what a `main` wants there.
//! - Calls on the loop itself — [`run`](Loop::run), `call_soon` and
//!   `call_later` on a closed loop, `listen_tcp` on a port in use,
//!   [`Remote::call_blocking`] — return [`Error`]: misuse of the loop
//!   ([`Error::Closed`], [`Error::Running`], [`Error::InvalidInput`]) and OS
//!   errors ([`Error::Io`]) in one enum, so a program matches once.
//! - Everything that waits — a connection, a read, a timer, a lookup, a
//!   child's exit — is a `Deferred<T>`. Its errors are values of any
//!   `std::error::Error` type inside a [`Failure`], which keeps the type
//!   ([`check`](Failure::check), [`downcast_ref`](Failure::downcast_ref)) and
//!   where it arose, because a chain's errbacks must be able to tell a
//!   [`TimedOut`] from an `io::Error` without a crate-wide enum that every
//!   user's error would have to join.
//! - [`run_until`](Loop::run_until) is where the two meet: it returns the
//!   Deferred's value, or `Error::Failed` holding the chain's `Failure`
//!   (a loop error such as `Error::Closed` otherwise), so `?` in a `main`
//!   returning `deferloop::Error`, `anyhow::Error` or `Box<dyn Error>` works.
//! - Bad input is an error, never a panic: a malformed `"host:port"` fails
//!   the connect's Deferred with `io::ErrorKind::InvalidInput`, a name that
//!   does not resolve fails it with an `io::Error` naming the host; a
//!   constructor that cannot take some value takes a type without it
//!   (`NonZeroUsize`). Panics are for bugs in the library.
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
#![deny(missing_debug_implementations)]

#[cfg(not(unix))]
compile_error!("deferloop runs on Unix-like systems only (Linux, the BSDs, macOS): it is built on readiness I/O and Unix sockets.");

mod clock;
mod context;
pub mod cores;
pub mod deferred;
mod env;
mod error;
pub mod guide;
pub mod net;
pub mod process;
pub mod ps;
mod reactor;
pub mod shutdown;
pub mod signal;
#[cfg(feature = "sim")]
pub mod sim;
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
    IoInfo, Loop, Monitor, Remote, Snapshot, Stats, TimerInfo, DEFAULT_POOL_CLOSE_TIMEOUT,
};
pub use signal::{Signal, SignalHandler};

/// README.md's Rust snippets, compiled and run as doctests so that they
/// stay pasteable.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
