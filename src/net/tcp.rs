//! TCP: the `Loop` methods that listen and connect. The connections themselves
//! are `stream.rs`, the accept loop `listener.rs`.
//! Tests: tests/net_tcp_*.rs.

use super::listener::{self, ListenSock, Listener};
use super::stream::{self, Sock};
use super::{Protocol, SockAddr, Transport};
use crate::{fail, Deferred, Error, Loop};
use std::io;
use std::net::SocketAddr;
use std::panic::Location;

impl Loop {
    /// Listens on `addr` (IPv4 or IPv6; port 0 picks a free port, see
    /// [`Listener::local_addr`]); each accepted connection gets a protocol
    /// from `factory` and `TCP_NODELAY`.
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
    pub fn listen_tcp<P: Protocol>(
        &self,
        addr: SocketAddr,
        mut factory: impl FnMut() -> P + 'static,
    ) -> Result<Listener, Error> {
        let at = Location::caller();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let sock = mio::net::TcpListener::bind(addr)?;
        let local = SockAddr::Inet(sock.local_addr()?);
        let factory: listener::Factory = Box::new(move || Box::new(factory()));
        Ok(listener::listen(
            self,
            ListenSock::Tcp(sock),
            factory,
            local,
            at,
        )?)
    }

    /// Connects to `addr`; the Deferred fires with the transport once the
    /// connection is up and `protocol.connection_made` has run, or fails with
    /// the `io::Error` (e.g. `ConnectionRefused`, its message naming `addr`).
    /// Cancelling the Deferred abandons the attempt (the protocol is dropped
    /// without being called). For a time limit use
    /// [`add_timeout`](Deferred::add_timeout), which fails it with
    /// [`TimedOut`](crate::deferred::TimedOut):
    ///
    /// ```no_run
    /// # use deferloop::{EventLoop, net::{Protocol, Transport}};
    /// # use std::time::Duration;
    /// # struct P; impl Protocol for P { fn data_received(&mut self, _: &Transport, _: &[u8]) {} }
    /// # let ev = EventLoop::new()?;
    /// let d = ev
    ///     .connect_tcp("127.0.0.1:7".parse().unwrap(), P)
    ///     .add_timeout(Duration::from_secs(5), &ev.handle());
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn connect_tcp<P: Protocol>(&self, addr: SocketAddr, protocol: P) -> Deferred<Transport> {
        if self.is_closed() {
            return fail(Error::Closed);
        }
        match mio::net::TcpStream::connect(addr) {
            Ok(sock) => stream::connect(self, Sock::Tcp(sock), addr.into(), Box::new(protocol)),
            Err(e) => fail(io::Error::new(e.kind(), format!("connect to {addr}: {e}"))),
        }
    }
}
