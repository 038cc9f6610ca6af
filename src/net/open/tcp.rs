//! TCP: the `Loop` methods that listen and connect. The connections themselves
//! are `net/core/conn.rs`, the accept loop `listener.rs`.
//! Tests: tests/net_tcp_*.rs.

use crate::net::core::conn::connect;
use crate::net::core::connection::{Connection, ProtocolFactory};
use crate::net::core::io::{Tcp, Wire};
use crate::net::open::listener::{self, AcceptHook, ListenSock, Listener};
use crate::net::{Protocol, SockAddr};
use crate::{Error, Loop};
use std::net::SocketAddr;
use std::panic::Location;

impl Loop {
    /// Listens on `addr` (IPv4 or IPv6; port 0 picks a free port, see
    /// [`Listener::local_addr`]); each accepted connection gets a protocol
    /// from `factory` and `TCP_NODELAY`. The factory is `|| P` or, to learn
    /// the peer's address, `|peer: &SockAddr| P` (see [`ProtocolFactory`]).
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] from `bind`/`listen` (for example
    /// `AddrInUse`), returned at once.
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::{Protocol, Transport};
    /// use deferloop::EventLoop;
    ///
    /// struct Echo;
    /// impl Protocol for Echo {
    ///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
    ///         t.write(data);
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let listener = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)?;
    /// assert_ne!(listener.local_addr().as_inet().unwrap().port(), 0);
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn listen_tcp<P: Protocol, A>(
        &self,
        addr: SocketAddr,
        factory: impl ProtocolFactory<P, A>,
    ) -> Result<Listener, Error> {
        self.listen_tcp_hooked(addr, factory, None)
    }

    /// `listen_tcp`, with `hook` run for each accepted connection instead
    /// of starting it (a layer's: TLS handshakes first).
    #[track_caller]
    pub(crate) fn listen_tcp_hooked<P: Protocol, A>(
        &self,
        addr: SocketAddr,
        mut factory: impl ProtocolFactory<P, A>,
        hook: Option<AcceptHook>,
    ) -> Result<Listener, Error> {
        let at = Location::caller();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let factory: listener::Factory = Box::new(move |peer| Box::new(factory.build(peer)));
        #[cfg(feature = "sim")]
        if let Some(r) = crate::sim::wire::listen(self, addr) {
            let (sock, local) = r?;
            return listener::listen(self, ListenSock::Sim(sock), factory, local, hook, at);
        }
        let sock = mio::net::TcpListener::bind(addr)?;
        let local = SockAddr::Inet(sock.local_addr()?);
        listener::listen(self, ListenSock::Tcp(sock), factory, local, hook, at)
    }

    /// Connects to `addr`. Returns at once a [`Connection`]: its transport
    /// can be written to now (the bytes are sent once the connection is up),
    /// its [`ProtocolRef`](crate::net::ProtocolRef) reaches `protocol`, and its
    /// [`connected`](Connection::connected) Deferred fires with the transport
    /// once the connection is up and `protocol.connection_made` has run, or
    /// fails with the `io::Error` (e.g. `ConnectionRefused`, its message
    /// naming `addr`) — then no protocol method is ever called. Cancelling
    /// that Deferred, or aborting the transport, abandons the attempt. For a
    /// time limit use [`add_timeout`](crate::Deferred::add_timeout), which
    /// cancels it:
    ///
    /// ```no_run
    /// # use deferloop::{EventLoop, net::{Protocol, Transport}};
    /// # use std::time::Duration;
    /// # struct P; impl Protocol for P { fn data_received(&mut self, _: &Transport, _: &[u8]) {} }
    /// # let ev = EventLoop::new()?;
    /// let d = ev
    ///     .connect_tcp("127.0.0.1:7".parse().unwrap(), P)
    ///     .connected()
    ///     .add_timeout(Duration::from_secs(5), &ev.to_loop());
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn connect_tcp<P: Protocol>(&self, addr: SocketAddr, protocol: P) -> Connection<P> {
        self.connect_tcp_at(addr, protocol, Location::caller())
    }

    /// [`connect_tcp`](Loop::connect_tcp), registered as made at `at`: the
    /// caller's line, through a closure (which cannot track its caller).
    pub(crate) fn connect_tcp_at<P: Protocol>(
        &self,
        addr: SocketAddr,
        protocol: P,
        at: &'static Location<'static>,
    ) -> Connection<P> {
        #[cfg(feature = "sim")]
        if let Some(io) = crate::sim::wire::connect(self, addr) {
            return connect(self, io, addr.into(), protocol, at);
        }
        let io = mio::net::TcpStream::connect(addr).map(|s| Box::new(Tcp(s)) as Box<dyn Wire>);
        connect(self, io, addr.into(), protocol, at)
    }
}
