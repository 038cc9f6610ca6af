//! How a stream connection comes to be, and what ends a listener: listening
//! and accepting (`listener.rs`, `drain.rs`), connecting over TCP and Unix
//! sockets (`tcp.rs`, `unix.rs`), host names and Happy Eyeballs
//! (`resolve.rs`, `options.rs`, `eyeballs.rs`), sockets made elsewhere (`adopt.rs`), and the
//! other kinds of byte stream: a child's pipes (`pipe.rs`) and the in-memory
//! transport ([`memory`]).
//!
//! Each hands a ready [`Wire`](crate::net::core::io::Wire) to the
//! connection core (`net/core`) and keeps nothing of the connection itself.
//! Exposes `Listener`, `ConnectOptions`, `HostResolver`, `Target`,
//! `bind_reuseport`, `memory` and the `Loop` methods that listen and connect.

pub(super) mod adopt;
pub(super) mod drain;
pub(super) mod eyeballs;
pub(super) mod listener;
pub mod memory;
pub(super) mod options;
pub(crate) mod pipe;
pub(super) mod resolve;
mod tcp;
mod unix;
