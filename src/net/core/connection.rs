//! Connections you can hold: [`Connection`] (what `connect_tcp` returns at
//! once), [`ProtocolRef`] (a typed way to reach the protocol the loop owns),
//! and [`ProtocolFactory`] (what a listener builds protocols with).

use crate::net::core::conn::Conn;
use crate::net::core::WeakConn;
use crate::net::{Protocol, SockAddr, Transport};
use crate::{Deferred, Error};
use std::any::Any;
use std::fmt;
use std::marker::PhantomData;

/// A connection being made: returned at once by
/// [`Loop::connect_tcp`](crate::Loop::connect_tcp) and
/// [`Loop::connect_unix`](crate::Loop::connect_unix), before it is up.
///
/// It holds the [`Transport`] (usable now: writes are buffered and sent once
/// the connection is up), a [`ProtocolRef`] to the protocol the loop now owns
/// (asyncio's `create_connection` returns `(transport, protocol)`), and the
/// Deferred that fires with the transport once `connection_made` has run, or
/// fails with the connect's error — in which case the protocol is never
/// called. Cancelling that Deferred abandons the attempt.
///
/// # Examples
/// ```no_run
/// use deferloop::net::{Protocol, Transport};
/// use deferloop::EventLoop;
///
/// struct Client;
/// impl Protocol for Client {
///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
///         println!("{}", String::from_utf8_lossy(data));
///         t.close();
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let conn = ev.connect_tcp("127.0.0.1:7000".parse()?, Client);
/// conn.transport().write(b"hello\n"); // sent once connected
/// ev.run_until(conn.connected())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a Connection's Deferred reports whether the connect failed"]
pub struct Connection<P> {
    transport: Transport,
    protocol: ProtocolRef<P>,
    connected: Deferred<Transport>,
}

impl<P: Protocol> Connection<P> {
    pub(crate) fn new(transport: Transport, connected: Deferred<Transport>) -> Connection<P> {
        let protocol = ProtocolRef {
            conn: transport.conn.clone(),
            _p: PhantomData,
        };
        Connection {
            transport,
            protocol,
            connected,
        }
    }

    /// Sets how long the connect may take from now on (default
    /// [`Limits::connect_timeout`](crate::net::Limits::connect_timeout), 30 s);
    /// `None` for no limit but the system's. Past it the attempt is
    /// abandoned, the protocol is never called, and [`connected`](Self::connected)
    /// fails with a `TimedOut` error naming the address.
    pub fn connect_timeout(self, timeout: Option<std::time::Duration>) -> Self {
        // Nothing to do once up or gone: set_connect_timeout checks the phase.
        if let Some(conn) = self.transport.conn.upgrade() {
            if let Some(lp) = conn.lp.upgrade() {
                conn.set_connect_timeout(&lp, timeout);
            }
        }
        self
    }

    /// The connection's transport, usable before it is up.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The protocol the loop owns, typed.
    pub fn protocol(&self) -> &ProtocolRef<P> {
        &self.protocol
    }

    /// The Deferred that fires with the transport once the connection is up
    /// (after `connection_made`), or fails with the connect's error.
    pub fn connected(self) -> Deferred<Transport> {
        self.connected
    }

    /// All three parts.
    pub fn into_parts(self) -> (Transport, ProtocolRef<P>, Deferred<Transport>) {
        (self.transport, self.protocol, self.connected)
    }
}

impl<P: Protocol> From<Connection<P>> for Deferred<Transport> {
    fn from(c: Connection<P>) -> Deferred<Transport> {
        c.connected
    }
}

impl<P> fmt::Debug for Connection<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// A typed handle to the protocol of one connection, which the loop owns
/// (Twisted's `connectProtocol` hands back the protocol; here the loop keeps
/// it, so it can be called without a shared cell). Cheap to clone; it keeps
/// neither the connection nor the protocol alive.
pub struct ProtocolRef<P> {
    conn: WeakConn<Conn>,
    _p: PhantomData<fn() -> P>,
}

impl<P> Clone for ProtocolRef<P> {
    fn clone(&self) -> Self {
        ProtocolRef {
            conn: self.conn.clone(),
            _p: PhantomData,
        }
    }
}

impl<P: Protocol> ProtocolRef<P> {
    pub(crate) fn of(t: &Transport) -> ProtocolRef<P> {
        ProtocolRef {
            conn: t.conn.clone(),
            _p: PhantomData,
        }
    }

    /// Runs `f` with the protocol.
    ///
    /// # Errors
    /// [`Error::Gone`] once the connection is gone (the protocol is dropped
    /// right after `connection_lost`); [`Error::InUse`] while one of the
    /// protocol's own methods runs (reach it from there, through `self`);
    /// [`Error::InvalidInput`] if the connection's protocol is not a `P`
    /// (a ref made with [`Transport::protocol`] for another type).
    pub fn with<R>(&self, f: impl FnOnce(&mut P) -> R) -> Result<R, Error> {
        let conn = self.conn.upgrade().ok_or(Error::Gone)?;
        let mut slot = conn.proto.try_borrow_mut().map_err(|_| Error::InUse)?;
        let proto = slot.as_mut().ok_or(Error::InUse)?;
        let any: &mut dyn Any = &mut **proto;
        let p = any.downcast_mut::<P>().ok_or(Error::InvalidInput(
            "the connection's protocol is of another type",
        ))?;
        Ok(f(p))
    }

    /// The connection's transport.
    pub fn transport(&self) -> Transport {
        Transport {
            conn: self.conn.clone(),
        }
    }
}

impl<P> fmt::Debug for ProtocolRef<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtocolRef")
            .field("live", &(self.conn.strong_count() > 0))
            .finish()
    }
}

/// What a listener builds a protocol with for each accepted connection: a
/// closure that takes nothing, `|| Echo`, or the peer's address,
/// `|peer: &SockAddr| Greeter::new(peer)` (Twisted's `buildProtocol(addr)`).
///
/// The second parameter only tells the two forms apart; it is inferred.
pub trait ProtocolFactory<P, Args>: 'static {
    /// Builds the protocol of a connection from `peer`.
    fn build(&mut self, peer: &SockAddr) -> P;
}

impl<P, F: FnMut() -> P + 'static> ProtocolFactory<P, ()> for F {
    fn build(&mut self, _: &SockAddr) -> P {
        self()
    }
}

impl<P, F: FnMut(&SockAddr) -> P + 'static> ProtocolFactory<P, (SockAddr,)> for F {
    fn build(&mut self, peer: &SockAddr) -> P {
        self(peer)
    }
}
