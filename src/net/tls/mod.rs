//! TLS (feature `tls`): a layer between a connection's socket and its
//! protocol, so every [`Protocol`](super::Protocol), framer and building
//! block runs over TLS unchanged (Twisted's `TLSMemoryBIOProtocol`).
//!
//! - [`Loop::listen_tls`](crate::Loop::listen_tls): a server. Each accepted
//!   connection's protocol is built at accept, as asyncio and Twisted do,
//!   and hears `connection_made` once the handshake is done. A client that
//!   fails or does not finish its handshake in time is dropped, its
//!   protocol built but never called.
//! - [`Loop::connect_tls_to`](crate::Loop::connect_tls_to): a client by
//!   name (`"example.com:443"`): the name is looked up, its addresses raced
//!   (Happy Eyeballs), and the same name sent as SNI and verified;
//!   [`Stream::connect_tls`](crate::net::Stream::connect_tls) reads replies
//!   as Deferreds.
//! - [`Loop::connect_tls`](crate::Loop::connect_tls): a client. The
//!   certificate is verified and the host name checked (SNI sent); the
//!   connect's Deferred fires after the handshake, or fails with its error
//!   (bad certificate, wrong name, protocol error, deadline).
//! - [`Transport::start_tls`](super::Transport::start_tls): upgrade an open
//!   connection (STARTTLS). What was written before goes out in the clear
//!   first; what the peer sent after its "go ahead" can be handed back.
//!
//! A graceful [`close`](super::Transport::close) sends close_notify before
//! closing, within the linger time; [`write_eof`](super::Transport::write_eof)
//! sends close_notify and half-closes. A peer's close_notify is an
//! end-of-file (`eof_received`); a peer that closes without one fails the
//! connection with [`TlsError::Truncated`]. Flow control (`pause_writing`,
//! the high-water mark, `pause_reading`) works on plaintext as over TCP.
//!
//! Errors reach the Deferred or `connection_lost` as an `io::Error` (kind
//! `InvalidData` for TLS errors, `TimedOut` for the deadline,
//! `UnexpectedEof` for truncation) carrying a [`TlsError`]: see
//! [`TlsError::of`].
//!
//! Crypto is rustls's `ring` provider.
//!
//! # Examples
//! ```no_run
//! use deferloop::net::tls::ClientConfig;
//! use deferloop::net::{Protocol, Transport};
//! use deferloop::EventLoop;
//!
//! struct Get;
//! impl Protocol for Get {
//!     fn connection_made(&mut self, t: &Transport) {
//!         t.write(b"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n");
//!     }
//!     fn data_received(&mut self, _: &Transport, data: &[u8]) {
//!         print!("{}", String::from_utf8_lossy(data));
//!     }
//! }
//!
//! let ev = EventLoop::new()?;
//! let ca = std::fs::read("ca.pem")?;
//! let config = ClientConfig::new().add_root_pem(&ca)?;
//! let addr = "93.184.215.14:443".parse()?;
//! ev.run_until(ev.connect_tls(addr, "example.com", &config, Get).connected())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod by_name;
mod config;
mod io;
mod records;
mod start;

pub use config::{ClientConfig, ServerConfig, DEFAULT_HANDSHAKE_TIMEOUT, SYSTEM_ROOT_FILES};
/// The rustls crate, for [`ClientConfig::from_rustls`] and
/// [`ServerConfig::from_rustls`].
pub use rustls;
pub use start::StartTls;

use crate::Failure;
use std::fmt;
use std::time::Duration;

/// What went wrong with TLS. It travels inside an `io::Error` (see the
/// [module](self) documentation); [`TlsError::of`] finds it in a `Failure`.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// The peer closed the connection without a close_notify: what was
    /// received may have been cut short by an attacker (or a careless peer).
    Truncated,
    /// The handshake did not finish within its deadline.
    HandshakeTimeout(Duration),
    /// The peer closed the connection during the handshake.
    HandshakeEof,
    /// The TLS engine's error: a bad certificate, a wrong name, an alert
    /// from the peer, a protocol error.
    Rustls(rustls::Error),
    /// A configuration that cannot be used (bad PEM, no certificate).
    Config(String),
}

impl TlsError {
    /// The `TlsError` a failure carries, if any: itself, or anywhere in its
    /// source chain (inside an `io::Error`, or the
    /// [`ConnectFailed`](crate::net::ConnectFailed) of a failed connect).
    pub fn of(failure: &Failure) -> Option<&TlsError> {
        let mut at: Option<&(dyn std::error::Error + 'static)> = Some(failure.error());
        while let Some(e) = at {
            if let Some(t) = e.downcast_ref::<TlsError>() {
                return Some(t);
            }
            at = match e.downcast_ref::<std::io::Error>() {
                // `io::Error::source` skips its own payload.
                Some(io) => io.get_ref().map(|p| p as _),
                None => e.source(),
            };
        }
        None
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Truncated => {
                f.write_str("TLS: the peer closed the connection without close_notify (truncation)")
            }
            TlsError::HandshakeTimeout(d) => write!(f, "TLS handshake not done within {d:?}"),
            TlsError::HandshakeEof => {
                f.write_str("TLS: the peer closed the connection during the handshake")
            }
            TlsError::Rustls(e) => write!(f, "TLS: {e}"),
            TlsError::Config(e) => write!(f, "TLS configuration: {e}"),
        }
    }
}

/// No source: the engine's error is in the text already (a chain walk would
/// print it twice) and is reached by matching [`TlsError::Rustls`].
impl std::error::Error for TlsError {}
