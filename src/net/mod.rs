//! Networking: transports and protocols over TCP, UDP and Unix sockets, on the
//! loop's readiness I/O.
//!
//! The model is Twisted's and asyncio's: the user writes a [`Protocol`] (what
//! to do when bytes arrive); the loop owns it and hands it a [`Transport`]
//! (how to send, pause, close). [`Loop::connect_tcp`](crate::Loop::connect_tcp)
//! returns a [`Connection`] at once: its transport can be written to before
//! the connection is up, and its [`ProtocolRef`] reaches the protocol.
//! [`memory`] runs a protocol over an in-memory connection, for tests.
//!
//! > **Important:** protocol methods run on the loop thread, one at a time,
//! > and never from inside a transport method (see [`Protocol`]).
//!
//! # What bounds a peer by default
//! Each limit is a field of [`Limits`], set per connection on its
//! [`Transport`] ([`set_limits`](Transport::set_limits) or one setter each),
//! or on a [`Listener`] for the connections it accepts:
//! - above 64 KiB buffered the protocol hears `pause_writing`, and the
//!   connection is not read until it drains
//!   ([`set_write_buffer_limits`](Transport::set_write_buffer_limits),
//!   [`set_read_while_write_paused`](Transport::set_read_while_write_paused));
//! - past [`Limits::write_buffer_cap`] buffered it aborts with [`WriteBufferFull`];
//! - output the peer takes none of for [`Limits::write_timeout`] aborts it with
//!   a `TimedOut` error ([`set_write_timeout`](Transport::set_write_timeout));
//! - a `close` flushes for at most [`Limits::linger`], a connect waits at most
//!   [`Limits::connect_timeout`];
//! - an idle timeout only when asked for
//!   ([`set_idle_timeout`](Transport::set_idle_timeout), also on a [`Listener`]).
//!
//! # Examples
//! An echo server and a client, on one loop:
//! ```
//! use deferloop::net::{Protocol, Transport};
//! use deferloop::{EventLoop, Failure};
//!
//! struct Echo;
//! impl Protocol for Echo {
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         t.write(data);
//!     }
//! }
//!
//! struct Hello(Vec<u8>);
//! impl Protocol for Hello {
//!     fn connection_made(&mut self, t: &Transport) {
//!         t.write(b"hello");
//!     }
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         self.0.extend_from_slice(data);
//!         if self.0 == b"hello" {
//!             if let Some(lp) = t.event_loop() {
//!                 lp.stop();
//!             }
//!         }
//!     }
//! }
//!
//! let ev = EventLoop::new()?;
//! let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)?;
//! let addr = server.local_addr().as_inet().unwrap();
//! let _connected = ev.connect_tcp(addr, Hello(Vec::new())).connected();
//! ev.run()?;
//! # Ok::<(), deferloop::Error>(())
//! ```

mod blocks;
mod connect_failed;
pub(crate) mod core;
pub mod framing;
mod limits;
mod open;
mod protocol;
#[cfg(feature = "tls")]
pub mod tls;
mod udp;

pub use self::core::connection::{Connection, ProtocolFactory, ProtocolRef};
/// What the simulation's sockets implement (`crate::sim`).
#[cfg(feature = "sim")]
pub(crate) use self::core::io::Wire;
pub(crate) use self::core::transport::gone_write;
pub use self::core::transport::Transport;
pub use blocks::relay::{copy, relay};
pub use blocks::stream::{Stream, StreamProtocol};
pub use blocks::stream_state::{IncompleteRead, LineTooLong, DEFAULT_READ_LIMIT};
pub use connect_failed::ConnectFailed;
pub use limits::Limits;
pub use open::adopt::bind_reuseport;
pub use open::listener::Listener;
pub use open::memory;
pub use open::options::{AddressPreference, ConnectOptions, HAPPY_EYEBALLS_DELAY};
pub(crate) use open::pipe;
pub use open::resolve::{HostResolver, Target, DEFAULT_LOOKUP_TIMEOUT, DEFAULT_RESOLVER_THREADS};
pub use protocol::{DatagramProtocol, Producer, Protocol};
pub use udp::transport::DatagramTransport;

use std::fmt;
use std::net::SocketAddr;

/// The address of a stream socket: an IP address and port, or a Unix path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SockAddr {
    /// TCP over IPv4 or IPv6.
    Inet(SocketAddr),
    /// A Unix socket: its path, or `None` for an unnamed socket (the usual
    /// local end of a connecting client).
    Unix(Option<std::path::PathBuf>),
}

impl SockAddr {
    /// The IP address and port, for a TCP socket.
    pub fn as_inet(&self) -> Option<SocketAddr> {
        match self {
            SockAddr::Inet(a) => Some(*a),
            SockAddr::Unix(_) => None,
        }
    }

    pub(crate) fn from_unix(a: std::os::unix::net::SocketAddr) -> SockAddr {
        SockAddr::Unix(a.as_pathname().map(std::path::Path::to_path_buf))
    }
}

impl From<SocketAddr> for SockAddr {
    fn from(a: SocketAddr) -> Self {
        SockAddr::Inet(a)
    }
}

impl fmt::Display for SockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SockAddr::Inet(a) => a.fmt(f),
            SockAddr::Unix(Some(p)) => write!(f, "unix:{}", p.display()),
            SockAddr::Unix(None) => f.write_str("unix:(unnamed)"),
        }
    }
}

/// A connection was aborted because its write buffer passed its hard cap
/// ([`Transport::set_write_buffer_cap`]): the peer does not read what is
/// written to it, and the protocol did not stop writing on `pause_writing`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteBufferFull {
    /// The cap that was passed, in bytes.
    pub cap: usize,
}

impl fmt::Display for WriteBufferFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write buffer passed its cap of {} bytes", self.cap)
    }
}

impl std::error::Error for WriteBufferFull {}
