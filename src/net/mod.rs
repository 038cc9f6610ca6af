//! Networking: transports and protocols over TCP, UDP and Unix sockets, on the
//! loop's readiness I/O. Owns nothing itself: re-exports, [`SockAddr`], and
//! closing what is open when the loop closes.
//!
//! The model is Twisted's and asyncio's: the user writes a [`Protocol`] (what
//! to do when bytes arrive); the loop owns it and hands it a [`Transport`]
//! (how to send, pause, close). Modules: `buffer` (write buffer and flow
//! control, pure), `stream` (TCP/Unix connections), `listener` (accept),
//! `tcp`/`unix`/`udp` (the `Loop` methods that open sockets), `framing`
//! (line and length-prefixed framers, pure, and protocol adapters).
//!
//! > **Important:** protocol methods run on the loop thread, one at a time,
//! > and never from inside a transport method (see [`Protocol`]).
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
//!             t.event_loop().stop();
//!         }
//!     }
//! }
//!
//! let ev = EventLoop::new()?;
//! let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)?;
//! let addr = server.local_addr().as_inet().unwrap();
//! let _connected = ev.connect_tcp(addr, Hello(Vec::new()));
//! ev.run()?;
//! # Ok::<(), deferloop::Error>(())
//! ```

mod buffer;
pub mod framing;
pub(crate) mod listener;
mod protocol;
pub(crate) mod stream;
mod tcp;
pub(crate) mod udp;
#[cfg(unix)]
mod unix;

pub use buffer::{DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER};
pub use listener::{Listener, ACCEPT_BATCH, ACCEPT_RETRY_DELAY};
pub use protocol::{DatagramProtocol, Protocol};
pub use stream::{Transport, READ_BUDGET};
pub use udp::{DatagramTransport, DATAGRAMS_PER_DISPATCH};

use crate::reactor::io::{IoKey, Kind, Source};
use crate::reactor::ExceptionContext;
use crate::{Error, Failure, Loop};
use std::fmt;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

/// The address of a stream socket: an IP address and port, or a Unix path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SockAddr {
    /// TCP over IPv4 or IPv6.
    Inet(SocketAddr),
    /// A Unix socket: its path, or `None` for an unnamed socket (the usual
    /// local end of a connecting client).
    #[cfg(unix)]
    Unix(Option<std::path::PathBuf>),
}

impl SockAddr {
    /// The IP address and port, for a TCP socket.
    pub fn as_inet(&self) -> Option<SocketAddr> {
        match self {
            SockAddr::Inet(a) => Some(*a),
            #[cfg(unix)]
            SockAddr::Unix(_) => None,
        }
    }

    #[cfg(unix)]
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
            #[cfg(unix)]
            SockAddr::Unix(Some(p)) => write!(f, "unix:{}", p.display()),
            #[cfg(unix)]
            SockAddr::Unix(None) => f.write_str("unix:(unnamed)"),
        }
    }
}

/// Where the source `key` was set up (its listener's or connect's call site):
/// the origin given to its protocol's panics.
pub(crate) fn registered_at(lp: &Loop, key: IoKey) -> &'static Location<'static> {
    lp.io_ctx()
        .io
        .get(key)
        .map_or(Location::caller(), |s| s.registered_at)
}

/// Runs one protocol method, containing a panic: the panic is reported to the
/// exception handler with `message` and comes back as a failure, for the
/// caller to close the connection with.
pub(crate) fn contain(lp: &Loop, key: IoKey, message: &str, f: impl FnOnce()) -> Option<Failure> {
    let payload = catch_unwind(AssertUnwindSafe(f)).err()?;
    let at = registered_at(lp, key);
    let failure = Failure::from_panic(payload, at);
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(&failure),
        location: Some(at),
    });
    Some(failure)
}

/// Equality and hashing of a transport handle: the same source of the same loop.
macro_rules! handle_identity {
    ($handle:ty) => {
        impl PartialEq for $handle {
            fn eq(&self, other: &Self) -> bool {
                self.key == other.key && self.lp.ptr_eq(&other.lp)
            }
        }

        impl Eq for $handle {}

        impl std::hash::Hash for $handle {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.key.hash(h);
            }
        }
    };
}
pub(crate) use handle_identity;

/// Called by `Loop::close` with every source it removed: each open connection
/// and socket gets its `connection_lost` (with an [`Error::Closed`] failure
/// unless it had already closed with a reason), and a connect still in
/// progress fails with `Error::Closed`. The loop is already closed, so what
/// these callbacks try to schedule is refused.
pub(crate) fn finish_on_close(lp: &Loop, sources: &mut [(IoKey, Source)]) {
    for (key, src) in sources.iter_mut() {
        let key = *key;
        match &mut src.kind {
            Kind::Stream(s) => match s.take_for_close() {
                stream::ClosingStream::Nothing => {}
                stream::ClosingStream::Connecting(r) => {
                    if let Some(r) = r {
                        let _ = r.errback(Failure::new(Error::Closed));
                    }
                }
                stream::ClosingStream::Lost(mut proto, reason) => {
                    let t = Transport {
                        lp: lp.clone(),
                        key,
                    };
                    stream::deliver_lost(&t, &mut proto, reason);
                }
            },
            Kind::Datagram(d) => {
                if let Some((mut proto, greet, reason)) = d.take_for_close() {
                    let t = DatagramTransport {
                        lp: lp.clone(),
                        key,
                    };
                    if greet {
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            proto.connection_made(&t)
                        }));
                    }
                    udp::deliver_lost(&t, &mut proto, reason);
                }
            }
            Kind::Raw(_) | Kind::Listen(_) => {}
        }
    }
}
