//! Putting the TLS layer on a connection: `Loop::listen_tls`,
//! `Loop::connect_tls`, `Transport::start_tls`; the handshake deadline; what
//! a transport tells about its session.

use super::config::{ClientConfig, ServerConfig};
use super::io::{session, DeadlineSlot, TlsIo};
use super::TlsError;
use crate::net::core::conn::{connect, Conn};
use crate::net::core::connection::{Connection, ProtocolFactory};
use crate::net::core::io::{Tcp, Wire};
use crate::net::{ConnectFailed, Listener, Protocol, SockAddr, Transport};
use crate::{Error, Failure, Handle, Loop};
use rustls::pki_types::ServerName;
use std::io;
use std::net::SocketAddr;
use std::panic::Location;
use std::rc::Rc;
use std::time::Duration;

/// Which side of TLS [`Transport::start_tls`] takes, with what.
#[derive(Debug, Clone)]
pub struct StartTls {
    side: Side,
    received: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Side {
    Client(ClientConfig, String),
    Server(ServerConfig),
}

impl StartTls {
    /// The client side: verifies the server's certificate for `server_name`
    /// (a host name, sent as SNI, or an IP address).
    pub fn client(config: &ClientConfig, server_name: &str) -> StartTls {
        StartTls {
            side: Side::Client(config.clone(), server_name.to_owned()),
            received: Vec::new(),
        }
    }

    /// The server side.
    pub fn server(config: &ServerConfig) -> StartTls {
        StartTls {
            side: Side::Server(config.clone()),
            received: Vec::new(),
        }
    }

    /// Bytes already received that belong to TLS: a peer that sent its
    /// handshake right behind its `STARTTLS` line, in the same read, and a
    /// framer that kept the rest of the buffer. They are read before the
    /// socket.
    pub fn with_received(mut self, data: &[u8]) -> StartTls {
        self.received.extend_from_slice(data);
        self
    }
}

pub(super) fn client_session(
    config: &ClientConfig,
    name: &str,
) -> Result<rustls::Connection, TlsError> {
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| TlsError::Config(format!("server name {name:?}: {e}")))?;
    let c = rustls::ClientConnection::new(config.rustls()?, name).map_err(TlsError::Rustls)?;
    Ok(rustls::Connection::Client(c))
}

fn server_session(config: &ServerConfig) -> Result<rustls::Connection, TlsError> {
    let c = rustls::ServerConnection::new(config.rustls()).map_err(TlsError::Rustls)?;
    Ok(rustls::Connection::Server(c))
}

pub(super) fn invalid(e: TlsError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl Loop {
    /// Listens on `addr` for TLS clients, as [`listen_tcp`](Loop::listen_tcp)
    /// does for plain ones. The factory runs when a connection is accepted,
    /// before its handshake (asyncio's and Twisted's order); the protocol
    /// hears `connection_made` once the handshake is done (so it can ask
    /// [`Transport::tls_alpn_protocol`]). A client whose handshake fails, or
    /// is not done within the config's deadline
    /// ([`DEFAULT_HANDSHAKE_TIMEOUT`](super::DEFAULT_HANDSHAKE_TIMEOUT)), is
    /// disconnected and its protocol, built, is dropped without a call
    /// (logged at `debug`).
    ///
    /// # Errors
    /// As for [`listen_tcp`](Loop::listen_tcp).
    #[track_caller]
    pub fn listen_tls<P: Protocol, A>(
        &self,
        addr: SocketAddr,
        config: &ServerConfig,
        factory: impl ProtocolFactory<P, A>,
    ) -> Result<Listener, Error> {
        let config = config.clone();
        let hook = Box::new(move |lp: &Loop, conn: &Rc<Conn>, peer: &SockAddr| {
            accept(lp, conn, peer, &config);
        });
        self.listen_tcp_hooked(addr, factory, Some(hook))
    }

    /// Connects to `addr` over TLS, as [`connect_tcp`](Loop::connect_tcp)
    /// does in the clear, verifying that the server's certificate is valid
    /// for `server_name` (a host name, also sent as SNI, or an IP address)
    /// and chains to a root of `config`. The Deferred fires once the
    /// handshake is done and `connection_made` has run; it fails with the
    /// connect's or the handshake's error (a bad certificate, a wrong name,
    /// a protocol error), or a `TimedOut` error if both are not done within
    /// the config's deadline. Writes made before that are sent encrypted
    /// once it is done.
    #[track_caller]
    pub fn connect_tls<P: Protocol>(
        &self,
        addr: SocketAddr,
        server_name: &str,
        config: &ClientConfig,
        protocol: P,
    ) -> Connection<P> {
        self.connect_tls_at(addr, server_name, config, protocol, Location::caller())
    }

    /// [`connect_tls`](Loop::connect_tls), registered as made at `at` (see
    /// `connect_tcp_at`).
    pub(crate) fn connect_tls_at<P: Protocol>(
        &self,
        addr: SocketAddr,
        server_name: &str,
        config: &ClientConfig,
        protocol: P,
        at: &'static Location<'static>,
    ) -> Connection<P> {
        let slot = DeadlineSlot::default();
        let io = client_session(config, server_name)
            .map_err(invalid)
            .and_then(|tls| {
                let sock = mio::net::TcpStream::connect(addr)?;
                let inner = Box::new(Tcp(sock));
                let tls = TlsIo::new(inner, tls, false, Vec::new(), Vec::new(), slot.clone());
                Ok(Box::new(tls) as Box<dyn Wire>)
            });
        let c = connect(self, io, addr.into(), protocol, at);
        if let Some(conn) = c.transport().conn.upgrade() {
            slot.set(arm_deadline(&conn, self, config.handshake_timeout()));
        }
        c
    }
}

/// An accepted connection of a TLS listener: layered, then "connecting"
/// until its handshake is done (the core's connect completion calls
/// `connection_made`).
fn accept(lp: &Loop, conn: &Rc<Conn>, peer: &SockAddr, config: &ServerConfig) {
    let tls = match server_session(config) {
        Ok(tls) => tls,
        Err(e) => {
            log::warn!(peer:% = peer; "deferloop: TLS session for {peer}: {e}");
            let garbage = conn.discard(lp);
            drop(garbage);
            return;
        }
    };
    let timeout = config.handshake_timeout();
    conn.connect_through_layer(lp, peer.to_string(), |inner| {
        layer(conn, lp, inner, tls, Vec::new(), Vec::new(), timeout)
    });
}

/// Puts a TLS layer over the connection's stream `inner` and arms the
/// handshake deadline.
fn layer(
    conn: &Rc<Conn>,
    lp: &Loop,
    inner: Box<dyn Wire>,
    tls: rustls::Connection,
    plain_out: Vec<u8>,
    early: Vec<u8>,
    timeout: Duration,
) -> Box<dyn Wire> {
    let slot = DeadlineSlot::default();
    // The inner stream is up: accepted, or open.
    let io = TlsIo::new(inner, tls, true, plain_out, early, slot.clone());
    slot.set(arm_deadline(conn, lp, timeout));
    Box::new(io)
}

pub(super) fn arm_deadline(conn: &Rc<Conn>, lp: &Loop, timeout: Duration) -> Option<Handle> {
    let weak = Rc::downgrade(conn);
    lp.call_later(timeout, move |lp| {
        if let Some(conn) = weak.upgrade() {
            handshake_timed_out(&conn, lp, timeout);
        }
    })
    .ok()
}

/// The deadline passed: a connection still handshaking is dropped — a
/// connect fails, an accepted stream is discarded, an open connection
/// (`start_tls`) is aborted with the error.
fn handshake_timed_out(conn: &Rc<Conn>, lp: &Loop, timeout: Duration) {
    let handshaking = conn
        .with_wire(|io| session(io).is_some_and(|s| s.is_handshaking()))
        .unwrap_or(false);
    if !handshaking {
        return;
    }
    let e = io::Error::new(io::ErrorKind::TimedOut, TlsError::HandshakeTimeout(timeout));
    if !conn.is_connecting() {
        return conn.abort(lp, Some(Failure::new(e)));
    }
    match conn.give_up(lp) {
        Some((Some(r), to)) => {
            r.errback_if_pending(ConnectFailed::wrap(&to, e));
        }
        Some((None, peer)) => {
            log::debug!(peer = peer.as_str(); "deferloop: TLS client {peer}: {e}")
        }
        None => {}
    }
}

impl Transport {
    /// Starts TLS on this open connection (STARTTLS), as `side` says.
    ///
    /// What the protocol wrote before the call and is still buffered goes
    /// out first, in the clear (the "go ahead" reply, say); what it writes
    /// after is encrypted, held until the handshake is done. Bytes of the
    /// handshake that were already received (read together with the last
    /// plaintext) are handed back with [`StartTls::with_received`]. A
    /// handshake that fails, or is not done within the config's deadline,
    /// aborts the connection with that error.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the connection is not open (connecting,
    /// closing, half-closed) or already uses TLS; [`Error::Gone`] if it no
    /// longer exists; [`Error::Io`] (`InvalidInput`) for a bad server name.
    pub fn start_tls(&self, side: StartTls) -> Result<(), Error> {
        let conn = self.conn.upgrade().ok_or(Error::Gone)?;
        let lp = conn.event_loop().ok_or(Error::Gone)?;
        let (tls, timeout) = match &side.side {
            Side::Client(config, name) => {
                (client_session(config, name), config.handshake_timeout())
            }
            Side::Server(config) => (server_session(config), config.handshake_timeout()),
        };
        let tls = tls.map_err(|e| Error::Io(invalid(e)))?;
        let refuse = |io: &dyn Wire| {
            session(io).map(|_| Error::InvalidInput("TLS is already started on this connection"))
        };
        // Written before the upgrade: sent before the handshake, in clear.
        conn.put_layer(&lp, refuse, |inner, plain| {
            layer(&conn, &lp, inner, tls, plain, side.received, timeout)
        })
    }

    fn tls_query<R>(&self, f: impl FnOnce(&rustls::CommonState) -> R) -> Option<R> {
        let conn = self.conn.upgrade()?;
        conn.with_wire(|io| session(io).map(f)).flatten()
    }

    /// Whether this connection uses TLS (it may still be handshaking).
    pub fn is_tls(&self) -> bool {
        self.tls_query(|_| ()).is_some()
    }

    /// Whether the TLS handshake is done (`false` without TLS).
    pub fn is_tls_handshake_done(&self) -> bool {
        self.tls_query(|s| !s.is_handshaking()).unwrap_or(false)
    }

    /// The application protocol agreed by ALPN, if any.
    pub fn tls_alpn_protocol(&self) -> Option<Vec<u8>> {
        self.tls_query(|s| s.alpn_protocol().map(<[u8]>::to_vec))
            .flatten()
    }

    /// The TLS version agreed (`TLSv1_3`, `TLSv1_2`), once the handshake is done.
    pub fn tls_protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.tls_query(|s| s.protocol_version()).flatten()
    }

    /// The peer's certificate chain (DER, its own first), if it sent one.
    pub fn tls_peer_certificates(&self) -> Option<Vec<Vec<u8>>> {
        self.tls_query(|s| {
            s.peer_certificates()
                .map(|c| c.iter().map(|c| c.to_vec()).collect())
        })
        .flatten()
    }
}
