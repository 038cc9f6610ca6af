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
//! Each limit is per connection, set on its [`Transport`]:
//! - above 64 KiB buffered the protocol hears `pause_writing`, and the
//!   connection is not read until it drains
//!   ([`set_write_buffer_limits`](Transport::set_write_buffer_limits),
//!   [`set_read_while_write_paused`](Transport::set_read_while_write_paused));
//! - past [`DEFAULT_WRITE_BUFFER_CAP`] buffered it aborts with [`WriteBufferFull`];
//! - output the peer takes none of for [`DEFAULT_WRITE_TIMEOUT`] aborts it with
//!   a `TimedOut` error ([`set_write_timeout`](Transport::set_write_timeout));
//! - a `close` flushes for at most [`DEFAULT_LINGER`], a connect waits at most
//!   [`DEFAULT_CONNECT_TIMEOUT`];
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

mod adopt;
mod buffer;
mod conn;
mod connection;
mod core;
mod deadlines;
mod dispatch;
mod drain;
mod eyeballs;
pub mod framing;
mod io;
mod listener;
pub mod memory;
pub(crate) mod pipe;
mod producer;
mod protocol;
mod relay;
mod resolve;
pub(crate) mod ss;
mod stream;
mod stream_state;
mod tcp;
#[cfg(feature = "tls")]
pub mod tls;
mod transport;
mod udp;
mod udp_transport;
mod unix;

pub use adopt::bind_reuseport;
pub use buffer::{DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER};
pub use conn::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_LINGER, DEFAULT_WRITE_BUFFER_CAP, DEFAULT_WRITE_TIMEOUT,
    READ_BUDGET,
};
pub use connection::{Connection, ProtocolFactory, ProtocolRef};
pub use eyeballs::{ConnectOptions, HAPPY_EYEBALLS_DELAY};
pub use listener::{Listener, ACCEPT_BATCH, ACCEPT_RETRY_DELAY, DEFAULT_BACKLOG};
pub use producer::Producer;
pub use protocol::{DatagramProtocol, Protocol};
pub use relay::{pipe, relay};
pub use resolve::{HostResolver, Target, DEFAULT_LOOKUP_TIMEOUT, DEFAULT_RESOLVER_THREADS};
pub use stream::{IncompleteRead, LineTooLong, Stream, StreamProtocol, DEFAULT_READ_LIMIT};
pub(crate) use transport::gone_write;
pub use transport::Transport;
pub use udp::DATAGRAMS_PER_DISPATCH;
pub use udp_transport::DatagramTransport;

use std::fmt;
use std::net::SocketAddr;

/// The address of a stream socket: an IP address and port, or a Unix path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
