//! [`DatagramTransport`], the handle to a UDP socket, and the `Loop` methods
//! that open one. The socket itself, as a source, is `socket.rs`.
//! Tests: tests/net_udp.rs.

use crate::net::core::{Phase, Reachable, WeakConn};
use crate::net::udp::socket::{open, send_one, Admit, Dgram, DgramState, UdpSock};
use crate::net::{DatagramProtocol, Limits};
use crate::reactor::WeakLoop;
use crate::{Error, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::net::SocketAddr;
use std::panic::Location;
use std::rc::Rc;

/// A UDP socket, as its protocol and the user see it: a cheap handle
/// (`Clone`; equal handles name the same socket). It keeps neither the socket
/// nor the loop alive.
///
/// As with [`Transport`](crate::net::Transport), methods change state at once and
/// the protocol hears the consequences from the loop; on a closed socket every
/// method does nothing.
#[derive(Clone)]
pub struct DatagramTransport {
    pub(crate) conn: WeakConn<Dgram>,
    /// The socket's count of datagrams ignored, kept here too so that it
    /// still reads right once the socket is gone.
    dropped: Rc<Cell<u64>>,
}

impl PartialEq for DatagramTransport {
    fn eq(&self, other: &Self) -> bool {
        self.conn == other.conn
    }
}

impl Eq for DatagramTransport {}

impl Hash for DatagramTransport {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.conn.hash(state);
    }
}

impl DatagramTransport {
    /// A handle to `d`.
    pub(crate) fn new(d: &Rc<Dgram>) -> DatagramTransport {
        let dropped = d.st.borrow().dropped.clone();
        DatagramTransport {
            conn: WeakConn::new(d),
            dropped,
        }
    }

    /// The loop this socket belongs to; `None` once the socket is gone.
    pub fn event_loop(&self) -> Option<Loop> {
        self.conn.event_loop()
    }

    /// Sends one datagram to `addr`: at once if nothing is queued, else queued
    /// (flow control as for a stream's write buffer). An error (for example
    /// a datagram too large, or `addr` on a connected socket) is delivered to
    /// `error_received`. Ignored, and counted ([`dropped_datagrams`](Self::dropped_datagrams)),
    /// after `close`/`abort`, or while the queue is over its 64 MiB cap (a
    /// protocol that ignores `pause_writing`): the first such drop of a burst
    /// is also told to `error_received`.
    pub fn send_to(&self, data: &[u8], addr: SocketAddr) {
        self.send_inner(data, Some(addr));
    }

    /// Datagrams ignored so far: sent after a close (also once the socket is
    /// gone), or over the queue's cap.
    pub fn dropped_datagrams(&self) -> u64 {
        self.dropped.get()
    }

    /// Sends one datagram to the connected peer (see [`Loop::connect_udp`]);
    /// on an unconnected socket `error_received` gets the OS's error.
    pub fn send(&self, data: &[u8]) {
        self.send_inner(data, None);
    }

    fn send_inner(&self, data: &[u8], to: Option<SocketAddr>) {
        let Some((d, lp)) = self.conn.live() else {
            self.dropped.set(self.dropped.get() + 1);
            return crate::net::gone_write("a UDP socket", data.len());
        };
        let mut st = d.st.borrow_mut();
        let st = &mut *st;
        if !matches!(st.phase, Phase::Open) {
            self.dropped.set(self.dropped.get() + 1);
            if self.dropped.get() == 1 {
                log::warn!("deferloop: send on a closing or closed UDP socket ignored");
            }
            return;
        }
        if st.queue.is_empty() {
            match send_one(&d.sock, data, to) {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => st.write_ready = false,
                Err(e) => {
                    st.errors.push_back(e);
                    d.wake(&lp);
                    return;
                }
            }
        }
        let cap = st.cap;
        match st.admit(data.len(), cap) {
            Admit::Queue => {}
            Admit::Drop => return,
            Admit::DropAndTell => return d.wake(&lp),
        }
        st.queue.push_back((data.into(), to));
        st.flow.recheck(st.queued_bytes);
        if st.flow.has_note() {
            d.wake(&lp);
        }
    }

    /// Closes the socket once the queue is flushed; `connection_lost(None)`
    /// follows (its descriptor is released when that has been delivered).
    /// Idempotent.
    pub fn close(&self) {
        let Some((d, lp)) = self.conn.live() else {
            return;
        };
        let mut st = d.st.borrow_mut();
        if !matches!(st.phase, Phase::Open) {
            return;
        }
        if st.queue.is_empty() {
            d.close_now(&lp, &mut st, None);
        } else {
            st.phase = Phase::Closing(None);
        }
    }

    /// Closes the socket now, dropping the queue; `connection_lost(None)` follows.
    pub fn abort(&self) {
        self.abort_inner(None);
    }

    /// Like [`abort`](Self::abort), with `reason` given to `connection_lost`.
    #[track_caller]
    pub fn abort_with(&self, reason: impl Into<Failure>) {
        self.abort_inner(Some(reason.into()));
    }

    fn abort_inner(&self, reason: Option<Failure>) {
        if let Some((d, lp)) = self.conn.live() {
            d.close_now(&lp, &mut d.st.borrow_mut(), reason);
        }
    }

    /// Whether the socket is closing or closed.
    pub fn is_closing(&self) -> bool {
        self.conn
            .with(|d| !matches!(d.phase, Phase::Open))
            .unwrap_or(true)
    }

    /// Bytes queued, not yet taken by the socket, with 64 counted per
    /// datagram besides its own (so empty ones count too).
    pub fn write_buffer_size(&self) -> usize {
        self.conn.with(|d| d.queued_bytes).unwrap_or(0)
    }

    /// Whether the queue is above its high-water mark.
    pub fn is_writing_paused(&self) -> bool {
        self.conn.with(|d| d.flow.is_paused()).unwrap_or(false)
    }

    /// Sets the send queue's water marks; see
    /// [`Transport::set_write_buffer_limits`](crate::net::Transport::set_write_buffer_limits).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high >= low`; [`Error::Gone`] once closed.
    pub fn set_write_buffer_limits(
        &self,
        high: Option<usize>,
        low: Option<usize>,
    ) -> Result<(), Error> {
        let (d, lp) = self.conn.live().ok_or(Error::Gone)?;
        let mut st = d.st.borrow_mut();
        let size = st.queued_bytes;
        st.flow.set_limits(high, low, size)?;
        if st.flow.has_note() {
            d.wake(&lp);
        }
        Ok(())
    }

    /// Applies `limits` to this socket: its read budget and datagrams per
    /// dispatch, and its send queue's water marks and cap (past the cap a
    /// datagram is dropped and reported to `error_received`). What only
    /// connections or listeners use is ignored.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high_water >= low_water` (then
    /// nothing changes); [`Error::Gone`] once closed.
    pub fn set_limits(&self, limits: &Limits) -> Result<(), Error> {
        let (d, lp) = self.conn.live().ok_or(Error::Gone)?;
        let mut st = d.st.borrow_mut();
        let size = st.queued_bytes;
        st.flow
            .set_limits(Some(limits.high_water), Some(limits.low_water), size)?;
        st.cap = limits.write_buffer_cap;
        st.read_budget = limits.read_budget.max(1);
        st.per_dispatch = limits.datagrams_per_dispatch.max(1);
        if st.flow.has_note() {
            d.wake(&lp);
        }
        Ok(())
    }

    /// The local address.
    ///
    /// # Errors
    /// `ErrorKind::NotConnected` once closed; else the OS error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.open_sock(UdpSock::local_addr)
    }

    /// The connected peer's address.
    ///
    /// # Errors
    /// `ErrorKind::NotConnected` if the socket is not connected or closed.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.open_sock(UdpSock::peer_addr)
    }

    /// `f` of the socket while it is open (or closing), else `NotConnected`.
    fn open_sock<R>(&self, f: impl FnOnce(&UdpSock) -> io::Result<R>) -> io::Result<R> {
        match self.conn.upgrade() {
            Some(d) if d.st.borrow().phase.is_open() => f(&d.sock),
            _ => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl fmt::Debug for DatagramTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatagramTransport")
            .field("local", &self.local_addr().ok())
            .field("closing", &self.is_closing())
            .finish()
    }
}

impl Loop {
    /// Opens a UDP socket bound to `addr` (port 0 picks a free port, see
    /// [`DatagramTransport::local_addr`]); `protocol.connection_made` follows
    /// in the loop's next turn.
    ///
    /// # Examples
    /// A UDP echo server and a client that stops the loop at the reply:
    /// ```
    /// use deferloop::net::{DatagramProtocol, DatagramTransport};
    /// use deferloop::EventLoop;
    /// use std::net::SocketAddr;
    ///
    /// struct Echo;
    /// impl DatagramProtocol for Echo {
    ///     fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], from: SocketAddr) {
    ///         t.send_to(data, from);
    ///     }
    /// }
    /// struct Ping;
    /// impl DatagramProtocol for Ping {
    ///     fn connection_made(&mut self, t: &DatagramTransport) {
    ///         t.send(b"ping");
    ///     }
    ///     fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], _: SocketAddr) {
    ///         assert_eq!(data, b"ping");
    ///         if let Some(lp) = t.event_loop() {
    ///             lp.stop();
    ///         }
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let server = ev.listen_udp("127.0.0.1:0".parse().unwrap(), Echo)?;
    /// let addr = server.local_addr()?;
    /// let _client = ev.connect_udp(addr, Ping)?;
    /// ev.run()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] from `bind`.
    #[track_caller]
    pub fn listen_udp<P: DatagramProtocol>(
        &self,
        addr: SocketAddr,
        protocol: P,
    ) -> Result<DatagramTransport, Error> {
        let at = Location::caller();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        #[cfg(feature = "sim")]
        let sock = UdpSock::bind_in(self, addr)?;
        #[cfg(not(feature = "sim"))]
        let sock = UdpSock::bind(addr)?;
        open(self, sock, Box::new(protocol), at)
    }

    /// Opens a UDP socket connected to `remote` (bound to port 0 on the
    /// loopback address if `remote` is a loopback address, else on the
    /// unspecified address of its family): [`DatagramTransport::send`] goes
    /// there, and only datagrams from there are received.
    ///
    /// # Errors
    /// As for [`listen_udp`](Self::listen_udp), and `connect`'s errors.
    #[track_caller]
    pub fn connect_udp<P: DatagramProtocol>(
        &self,
        remote: SocketAddr,
        protocol: P,
    ) -> Result<DatagramTransport, Error> {
        let at = Location::caller();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let loopback = remote.ip().is_loopback();
        let local: SocketAddr = match (remote.is_ipv4(), loopback) {
            (true, true) => (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            (true, false) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            (false, true) => (std::net::Ipv6Addr::LOCALHOST, 0).into(),
            (false, false) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        #[cfg(feature = "sim")]
        let sock = UdpSock::bind_in(self, local)?;
        #[cfg(not(feature = "sim"))]
        let sock = UdpSock::bind(local)?;
        sock.connect(remote)?;
        open(self, sock, Box::new(protocol), at)
    }
}

impl Reachable for Dgram {
    type State = DgramState;
    fn state(&self) -> &RefCell<DgramState> {
        &self.st
    }
    fn weak_loop(&self) -> &WeakLoop {
        &self.lp
    }
}
