//! UDP: the datagram socket as a source, its dispatch, and the
//! [`DatagramTransport`] handle. Owns `Dgram`, `DatagramTransport`.
//!
//! Like streams, a socket is registered once (read + write, edge-triggered).
//! A send is tried at once when nothing is queued; a datagram the socket
//! refuses with `WouldBlock` is queued whole (one allocation) and the queue's
//! byte count drives the same flow control as a stream's write buffer. Send and
//! receive errors go to `error_received` (delivered by the loop, never from
//! inside `send_to`); they do not close the socket. The phases, the contained
//! protocol calls and `connection_lost` follow the same rules as streams
//! (`core.rs`). Tests: tests/net_udp.rs.

use super::buffer::Flow;
use super::core::{self, handle_identity, Phase};
use super::{DatagramProtocol, READ_BUDGET};
use crate::reactor::{PostAction, Ready, Source, SourceKey, WeakLoop};
use crate::{Error, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::panic::Location;
use std::rc::{Rc, Weak};

/// Datagrams received from one socket in one dispatch, at most.
pub const DATAGRAMS_PER_DISPATCH: usize = 64;

struct State {
    sock: Option<mio::net::UdpSocket>,
    phase: Phase,
    /// Datagrams the socket refused for now, with their destination
    /// (`None`: the connected peer).
    queue: VecDeque<(Box<[u8]>, Option<SocketAddr>)>,
    queued_bytes: usize,
    flow: Flow,
    read_ready: bool,
    write_ready: bool,
    /// Errors from sends made outside the loop's dispatch, for `error_received`.
    errors: VecDeque<io::Error>,
    /// `connection_made` still to be delivered (the first dispatch does it).
    greet: bool,
    dropped: u64,
}

impl State {
    fn wants_dispatch(&self) -> bool {
        self.greet
            || matches!(self.phase, Phase::Closed(_))
            || !self.errors.is_empty()
            || (self.phase.is_open() && self.flow.has_note())
            || (matches!(self.phase, Phase::Open) && self.read_ready)
            || (self.write_ready && !self.queue.is_empty())
    }
}

/// A UDP socket, as a source.
pub(crate) struct Dgram {
    lp: WeakLoop,
    key: SourceKey,
    at: &'static Location<'static>,
    st: RefCell<State>,
    proto: RefCell<Option<Box<dyn DatagramProtocol>>>,
    dispatching: Cell<bool>,
}

/// Registers a bound (and maybe connected) UDP socket; `connection_made`
/// follows in the next step 6.
fn open(
    lp: &Loop,
    mut sock: mio::net::UdpSocket,
    proto: Box<dyn DatagramProtocol>,
    at: &'static Location<'static>,
) -> Result<DatagramTransport, Error> {
    let fd = sock.as_raw_fd();
    let mut made = None;
    let key = lp.insert_source(at, |key, r| {
        r.register(
            &mut sock,
            key.token(),
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        )?;
        let d = Rc::new(Dgram {
            lp: lp.downgrade(),
            key,
            at,
            st: RefCell::new(State {
                sock: Some(sock),
                phase: Phase::Open,
                queue: VecDeque::new(),
                queued_bytes: 0,
                flow: Flow::default(),
                read_ready: false,
                write_ready: false,
                errors: VecDeque::new(),
                greet: true,
                dropped: 0,
            }),
            proto: RefCell::new(Some(proto)),
            dispatching: Cell::new(false),
        });
        made = Some(d.clone());
        Ok(d as Rc<dyn Source>)
    })?;
    lp.claim_fd(fd, key);
    lp.wake_source(key, Ready::EMPTY);
    Ok(DatagramTransport {
        conn: Rc::downgrade(&made.expect("built")),
    })
}

fn send_one(sock: &mio::net::UdpSocket, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
    loop {
        let r = match to {
            Some(addr) => sock.send_to(data, addr),
            None => sock.send(data),
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

impl Dgram {
    fn wake(&self, lp: &Loop) {
        if !self.dispatching.get() {
            lp.wake_source(self.key, Ready::EMPTY);
        }
    }

    fn close_now(&self, lp: &Loop, st: &mut State, reason: Option<Failure>) {
        if matches!(st.phase, Phase::Closed(_) | Phase::Lost) {
            return;
        }
        st.phase = Phase::Closed(reason);
        st.queue = VecDeque::new();
        st.queued_bytes = 0;
        st.flow.recheck(0);
        if let Some(mut sock) = st.sock.take() {
            lp.with_selector(|r| {
                let _ = r.deregister(&mut sock);
            });
            lp.release_fd(sock.as_raw_fd(), self.key);
        }
        self.wake(lp);
    }

    /// Calls one protocol method, containing a panic (reported; the socket is
    /// then closed with it). Returns whether the call returned.
    fn call(
        &self,
        lp: &Loop,
        proto: &mut Box<dyn DatagramProtocol>,
        f: impl FnOnce(&mut dyn DatagramProtocol),
    ) -> bool {
        let message = "Exception in datagram protocol callback";
        match core::contain(lp, self.at, message, || f(&mut **proto)) {
            None => true,
            Some(failure) => {
                self.close_now(lp, &mut self.st.borrow_mut(), Some(failure));
                false
            }
        }
    }

    fn flush(&self, lp: &Loop) {
        let mut st = self.st.borrow_mut();
        let st = &mut *st;
        if !st.write_ready {
            return;
        }
        let Some(sock) = st.sock.as_ref() else { return };
        while let Some((data, to)) = st.queue.front() {
            match send_one(sock, data, *to) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.write_ready = false;
                    break;
                }
                Err(e) => st.errors.push_back(e),
                Ok(_) => {}
            }
            let (data, _) = st.queue.pop_front().expect("front exists");
            st.queued_bytes -= data.len();
            st.flow.recheck(st.queued_bytes);
        }
        if st.queue.is_empty() && matches!(st.phase, Phase::Closing(_)) {
            self.close_now(lp, st, None);
        }
    }

    /// Delivers queued errors and flow-control notes; false if a call panicked.
    fn tell(
        &self,
        lp: &Loop,
        t: &DatagramTransport,
        proto: &mut Box<dyn DatagramProtocol>,
    ) -> bool {
        loop {
            let (error, note) = {
                let mut st = self.st.borrow_mut();
                if !st.phase.is_open() {
                    return true;
                }
                match st.errors.pop_front() {
                    Some(e) => (Some(e), None),
                    None => (None, st.flow.take_note()),
                }
            };
            let ok = match (error, note) {
                (Some(e), _) => self.call(lp, proto, |p| p.error_received(t, e)),
                (None, Some(true)) => self.call(lp, proto, |p| p.pause_writing(t)),
                (None, Some(false)) => self.call(lp, proto, |p| p.resume_writing(t)),
                (None, None) => return true,
            };
            if !ok {
                return false;
            }
        }
    }

    /// Receives up to [`DATAGRAMS_PER_DISPATCH`] datagrams or [`READ_BUDGET`]
    /// bytes; returns whether the budget ran out with the socket still readable.
    fn read(
        &self,
        lp: &Loop,
        t: &DatagramTransport,
        proto: &mut Box<dyn DatagramProtocol>,
    ) -> bool {
        let mut buf = core::take_read_buf();
        let mut budget = READ_BUDGET;
        let mut spent = true;
        for _ in 0..DATAGRAMS_PER_DISPATCH {
            let r = {
                let mut st = self.st.borrow_mut();
                if !matches!(st.phase, Phase::Open) || !st.read_ready {
                    spent = false;
                    break;
                }
                let sock = st.sock.as_ref().expect("an open socket");
                match sock.recv_from(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        st.read_ready = false;
                        spent = false;
                        break;
                    }
                    r => r,
                }
            };
            let ok = match r {
                Ok((n, from)) => {
                    budget = budget.saturating_sub(n.max(1));
                    self.call(lp, proto, |p| p.datagram_received(t, &buf[..n], from))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
                Err(e) => self.call(lp, proto, |p| p.error_received(t, e)),
            };
            if !ok {
                spent = false;
                break;
            }
            if budget == 0 {
                break;
            }
        }
        core::put_read_buf(buf);
        spent
    }

    fn lost(
        &self,
        lp: &Loop,
        t: &DatagramTransport,
        proto: &mut Box<dyn DatagramProtocol>,
        reason: Option<Failure>,
    ) {
        let message = "Exception in datagram protocol callback (connection_lost)";
        let _ = core::contain(lp, self.at, message, || proto.connection_lost(t, reason));
    }
}

impl Source for Dgram {
    fn dispatch(self: Rc<Self>, lp: &Loop, _: SourceKey, ready: Ready) -> PostAction {
        let greet = {
            let mut st = self.st.borrow_mut();
            st.read_ready |= ready.contains(Ready::READABLE);
            st.write_ready |= ready.contains(Ready::WRITABLE);
            std::mem::take(&mut st.greet)
        };
        let Some(mut proto) = self.proto.borrow_mut().take() else {
            return PostAction::Continue;
        };
        self.dispatching.set(true);
        let t = DatagramTransport {
            conn: Rc::downgrade(&self),
        };
        let mut again = false;
        if !greet || self.call(lp, &mut proto, |p| p.connection_made(&t)) {
            self.flush(lp);
            if self.tell(lp, &t, &mut proto) {
                again = self.read(lp, &t, &mut proto);
                self.tell(lp, &t, &mut proto);
            }
        }
        self.dispatching.set(false);
        let reason = {
            let mut st = self.st.borrow_mut();
            match std::mem::replace(&mut st.phase, Phase::Lost) {
                Phase::Closed(reason) => reason,
                phase => {
                    st.phase = phase;
                    let wants = st.wants_dispatch();
                    drop(st);
                    *self.proto.borrow_mut() = Some(proto);
                    return if again || wants {
                        PostAction::Again
                    } else {
                        PostAction::Continue
                    };
                }
            }
        };
        self.lost(lp, &t, &mut proto, reason);
        let garbage = lp.remove_source(self.key);
        drop((garbage, proto));
        PostAction::Continue
    }

    fn close(self: Rc<Self>, lp: &Loop) {
        let (reason, greet) = {
            let mut st = self.st.borrow_mut();
            st.sock = None;
            let reason = match std::mem::replace(&mut st.phase, Phase::Lost) {
                Phase::Lost => return,
                Phase::Closed(reason) => reason,
                _ => Some(Failure::new(crate::deferred::LoopClosed)),
            };
            (reason, std::mem::take(&mut st.greet))
        };
        let Some(mut proto) = self.proto.borrow_mut().take() else {
            return;
        };
        let t = DatagramTransport {
            conn: Rc::downgrade(&self),
        };
        if greet {
            let message = "Exception in datagram protocol callback";
            let _ = core::contain(lp, self.at, message, || proto.connection_made(&t));
        }
        self.lost(lp, &t, &mut proto, reason);
    }

    fn name(&self) -> &'static str {
        "udp"
    }
}

/// A UDP socket, as its protocol and the user see it: a cheap handle
/// (`Clone`; equal handles name the same socket). It keeps neither the socket
/// nor the loop alive.
///
/// As with [`Transport`](super::Transport), methods change state at once and
/// the protocol hears the consequences from the loop; on a closed socket every
/// method does nothing.
#[derive(Clone)]
pub struct DatagramTransport {
    conn: Weak<Dgram>,
}

impl DatagramTransport {
    fn live(&self) -> Option<(Rc<Dgram>, Loop)> {
        let d = self.conn.upgrade()?;
        let lp = d.lp.upgrade()?;
        Some((d, lp))
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        let d = self.conn.upgrade()?;
        let mut st = d.st.borrow_mut();
        Some(f(&mut st))
    }

    /// The loop this socket belongs to; `None` once the socket is gone.
    pub fn event_loop(&self) -> Option<Loop> {
        self.live().map(|(_, lp)| lp)
    }

    /// Sends one datagram to `addr`: at once if nothing is queued, else queued
    /// (flow control as for a stream's write buffer). An error (for example
    /// a datagram too large, or `addr` on a connected socket) is delivered to
    /// `error_received`. Ignored, and counted, after `close`/`abort`.
    pub fn send_to(&self, data: &[u8], addr: SocketAddr) {
        self.send_inner(data, Some(addr));
    }

    /// Sends one datagram to the connected peer (see [`Loop::connect_udp`]);
    /// on an unconnected socket `error_received` gets the OS's error.
    pub fn send(&self, data: &[u8]) {
        self.send_inner(data, None);
    }

    fn send_inner(&self, data: &[u8], to: Option<SocketAddr>) {
        let Some((d, lp)) = self.live() else { return };
        let mut st = d.st.borrow_mut();
        let st = &mut *st;
        if !matches!(st.phase, Phase::Open) {
            st.dropped += 1;
            if st.dropped == 1 {
                log::warn!("deferloop: send on a closing or closed UDP socket ignored");
            }
            return;
        }
        let sock = st.sock.as_ref().expect("an open socket");
        if st.queue.is_empty() {
            match send_one(sock, data, to) {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => st.write_ready = false,
                Err(e) => {
                    st.errors.push_back(e);
                    d.wake(&lp);
                    return;
                }
            }
        }
        st.queue.push_back((data.into(), to));
        st.queued_bytes += data.len();
        st.flow.recheck(st.queued_bytes);
        if st.flow.has_note() {
            d.wake(&lp);
        }
    }

    /// Closes the socket once the queue is flushed; `connection_lost(None)`
    /// follows. Idempotent.
    pub fn close(&self) {
        let Some((d, lp)) = self.live() else { return };
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
        if let Some((d, lp)) = self.live() {
            d.close_now(&lp, &mut d.st.borrow_mut(), reason);
        }
    }

    /// Whether the socket is closing or closed.
    pub fn is_closing(&self) -> bool {
        self.with(|d| !matches!(d.phase, Phase::Open))
            .unwrap_or(true)
    }

    /// Bytes queued, not yet taken by the socket.
    pub fn write_buffer_size(&self) -> usize {
        self.with(|d| d.queued_bytes).unwrap_or(0)
    }

    /// Whether the queue is above its high-water mark.
    pub fn is_writing_paused(&self) -> bool {
        self.with(|d| d.flow.is_paused()).unwrap_or(false)
    }

    /// Sets the send queue's water marks; see
    /// [`Transport::set_write_buffer_limits`](super::Transport::set_write_buffer_limits).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high >= low`; [`Error::Gone`] once closed.
    pub fn set_write_buffer_limits(
        &self,
        high: Option<usize>,
        low: Option<usize>,
    ) -> Result<(), Error> {
        let (d, lp) = self.live().ok_or(Error::Gone)?;
        let mut st = d.st.borrow_mut();
        let size = st.queued_bytes;
        st.flow.set_limits(high, low, size)?;
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
        self.with(|d| d.sock.as_ref().map(mio::net::UdpSocket::local_addr))
            .flatten()
            .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }

    /// The connected peer's address.
    ///
    /// # Errors
    /// `ErrorKind::NotConnected` if the socket is not connected or closed.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.with(|d| d.sock.as_ref().map(mio::net::UdpSocket::peer_addr))
            .flatten()
            .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }
}

handle_identity!(DatagramTransport);

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
    /// in the next step 6.
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
        let sock = mio::net::UdpSocket::bind(addr)?;
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
        let sock = mio::net::UdpSocket::bind(local)?;
        sock.connect(remote)?;
        open(self, sock, Box::new(protocol), at)
    }
}
