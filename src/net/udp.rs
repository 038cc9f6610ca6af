//! UDP: the state the registry keeps for a datagram socket, its dispatch, and
//! the [`DatagramTransport`] handle. Owns `DgramState`, `DatagramTransport`.
//!
//! Like streams, a socket is registered once (read + write, edge-triggered).
//! A send is tried at once when nothing is queued; a datagram the socket
//! refuses with `WouldBlock` is queued whole (one allocation) and the queue's
//! byte count drives the same flow control as a stream's write buffer. Send and
//! receive errors go to `error_received` (delivered by the loop, never from
//! inside `send_to`); they do not close the socket.
//! Tests: tests/net_udp.rs.

use super::buffer::Flow;
use super::stream::READ_BUDGET;
use super::DatagramProtocol;
use crate::reactor::io::{IoCtx, IoKey, Kind, Owner, Registry};
use crate::{Error, Failure, Loop};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::panic::Location;

#[cfg(unix)]
use std::os::unix::io::AsRawFd;

/// Datagrams received from one socket in one dispatch, at most.
pub const DATAGRAMS_PER_DISPATCH: usize = 64;

enum Phase {
    Open,
    /// `close()`: flush the queue, then close.
    Closing,
    /// Closed; `connection_lost(reason)` owed.
    Closed(Option<Failure>),
    Lost,
}

/// What the registry keeps for a UDP socket.
pub(crate) struct DgramState {
    sock: Option<mio::net::UdpSocket>,
    proto: Option<Box<dyn DatagramProtocol>>,
    phase: Phase,
    /// Datagrams the socket refused for now, with their destination
    /// (`None`: the connected peer).
    queue: VecDeque<(Box<[u8]>, Option<SocketAddr>)>,
    queued_bytes: usize,
    flow: Flow,
    read_ready: bool,
    write_ready: bool,
    /// Errors from sends made outside the loop's dispatch, for `error_received`.
    errors: Vec<io::Error>,
    /// `connection_made` still to be delivered (the first dispatch does it).
    greet: bool,
    dropped: u64,
}

impl DgramState {
    fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Closing)
    }

    fn wants_dispatch(&self) -> bool {
        self.greet
            || matches!(self.phase, Phase::Closed(_))
            || !self.errors.is_empty()
            || (self.is_open() && self.flow.has_note())
            || (matches!(self.phase, Phase::Open) && self.read_ready)
            || (self.write_ready && !self.queue.is_empty())
    }

    /// Takes what `Loop::close` must finish: the protocol and the owed reason.
    pub(crate) fn take_for_close(
        &mut self,
    ) -> Option<(Box<dyn DatagramProtocol>, bool, Option<Failure>)> {
        let reason = match std::mem::replace(&mut self.phase, Phase::Lost) {
            Phase::Lost => return None,
            Phase::Closed(reason) => reason,
            _ => Some(Failure::new(Error::Closed)),
        };
        let greet = std::mem::take(&mut self.greet);
        self.proto.take().map(|p| (p, greet, reason))
    }
}

fn state(io: &mut Registry, key: IoKey) -> Option<&mut DgramState> {
    match &mut io.get_mut(key)?.kind {
        Kind::Datagram(d) => Some(d),
        _ => None,
    }
}

/// Registers a bound (and maybe connected) UDP socket; `connection_made`
/// follows in the next step 6.
pub(crate) fn open(
    lp: &Loop,
    mut sock: mio::net::UdpSocket,
    proto: Box<dyn DatagramProtocol>,
    at: &'static Location<'static>,
) -> io::Result<DatagramTransport> {
    let mut cx = lp.io_ctx();
    let key = cx.io.vacant_key();
    let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
    cx.poll
        .registry()
        .register(&mut sock, key.token(), interest)?;
    #[cfg(unix)]
    cx.io.set_fd(sock.as_raw_fd(), key, Owner::Transport);
    let state = DgramState {
        sock: Some(sock),
        proto: Some(proto),
        phase: Phase::Open,
        queue: VecDeque::new(),
        queued_bytes: 0,
        flow: Flow::default(),
        read_ready: false,
        write_ready: false,
        errors: Vec::new(),
        greet: true,
        dropped: 0,
    };
    cx.io.insert_at(key, Kind::Datagram(state), at);
    cx.io.get_mut(key).expect("just inserted").interest = Some(interest);
    lp.queue_dispatch(&mut cx.io, key);
    Ok(DatagramTransport {
        lp: lp.clone(),
        key,
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

fn close_now(lp: &Loop, cx: &mut IoCtx<'_>, key: IoKey, reason: Option<Failure>) {
    let Some(d) = state(&mut cx.io, key) else {
        return;
    };
    if matches!(d.phase, Phase::Closed(_) | Phase::Lost) {
        return;
    }
    d.phase = Phase::Closed(reason);
    d.queue = VecDeque::new();
    d.queued_bytes = 0;
    d.flow.recheck(0);
    if let Some(mut sock) = d.sock.take() {
        let _ = cx.poll.registry().deregister(&mut sock);
        #[cfg(unix)]
        cx.io.clear_fd_for(sock.as_raw_fd(), key);
    }
    lp.queue_dispatch(&mut cx.io, key);
}

/// Calls one protocol method, containing a panic (reported; the socket is
/// then closed with it).
fn call(
    t: &DatagramTransport,
    proto: &mut Box<dyn DatagramProtocol>,
    f: impl FnOnce(&mut dyn DatagramProtocol),
) -> bool {
    let message = "Exception in datagram protocol callback";
    let Some(failure) = super::contain(&t.lp, t.key, message, || f(&mut **proto)) else {
        return true;
    };
    close_now(&t.lp, &mut t.lp.io_ctx(), t.key, Some(failure));
    false
}

/// Step 6 for a UDP socket.
pub(crate) fn dispatch(lp: &Loop, key: IoKey) {
    let t = DatagramTransport {
        lp: lp.clone(),
        key,
    };
    let proto = {
        let mut cx = lp.io_ctx();
        let Some(src) = cx.io.get_mut(key) else {
            return;
        };
        let r = std::mem::take(&mut src.readable);
        let w = std::mem::take(&mut src.writable);
        let Kind::Datagram(d) = &mut src.kind else {
            return;
        };
        d.read_ready |= r;
        d.write_ready |= w;
        d.proto.take()
    };
    let Some(mut proto) = proto else {
        return;
    };
    let greet = state(&mut lp.io_ctx().io, key).is_some_and(|d| std::mem::take(&mut d.greet));
    let mut ok = !greet || call(&t, &mut proto, |p| p.connection_made(&t));
    if ok {
        flush(lp, key);
        ok = errors(&t, &mut proto) && notes(&t, &mut proto) && read(&t, &mut proto);
    }
    if ok {
        let _ = errors(&t, &mut proto) && notes(&t, &mut proto);
    }
    finish(&t, proto);
}

fn flush(lp: &Loop, key: IoKey) {
    let mut cx = lp.io_ctx();
    let Some(d) = state(&mut cx.io, key) else {
        return;
    };
    if !d.write_ready {
        return;
    }
    let Some(sock) = d.sock.as_ref() else {
        return;
    };
    while let Some((data, to)) = d.queue.front() {
        match send_one(sock, data, *to) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                d.write_ready = false;
                break;
            }
            Err(e) => d.errors.push(e),
            Ok(_) => {}
        }
        let (data, _) = d.queue.pop_front().expect("front exists");
        d.queued_bytes -= data.len();
        d.flow.recheck(d.queued_bytes);
    }
    if d.queue.is_empty() && matches!(d.phase, Phase::Closing) {
        close_now(lp, &mut cx, key, None);
    }
}

fn errors(t: &DatagramTransport, proto: &mut Box<dyn DatagramProtocol>) -> bool {
    loop {
        let e = {
            let mut cx = t.lp.io_ctx();
            match state(&mut cx.io, t.key) {
                Some(d) if d.is_open() && !d.errors.is_empty() => d.errors.remove(0),
                _ => return true,
            }
        };
        if !call(t, proto, |p| p.error_received(t, e)) {
            return false;
        }
    }
}

fn notes(t: &DatagramTransport, proto: &mut Box<dyn DatagramProtocol>) -> bool {
    loop {
        let note = {
            let mut cx = t.lp.io_ctx();
            match state(&mut cx.io, t.key) {
                Some(d) if d.is_open() => d.flow.take_note(),
                _ => None,
            }
        };
        let ok = match note {
            Some(true) => call(t, proto, |p| p.pause_writing(t)),
            Some(false) => call(t, proto, |p| p.resume_writing(t)),
            None => return true,
        };
        if !ok {
            return false;
        }
    }
}

fn read(t: &DatagramTransport, proto: &mut Box<dyn DatagramProtocol>) -> bool {
    let lp = &t.lp;
    let mut buf = lp.take_read_buf();
    let mut budget = READ_BUDGET;
    let mut ok = true;
    for _ in 0..DATAGRAMS_PER_DISPATCH {
        let r = {
            let mut cx = lp.io_ctx();
            let Some(d) = state(&mut cx.io, t.key) else {
                break;
            };
            if !matches!(d.phase, Phase::Open) || !d.read_ready {
                break;
            }
            let sock = d.sock.as_ref().expect("an open socket");
            match sock.recv_from(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    d.read_ready = false;
                    break;
                }
                r => r,
            }
        };
        ok = match r {
            Ok((n, from)) => {
                budget = budget.saturating_sub(n.max(1));
                call(t, proto, |p| p.datagram_received(t, &buf[..n], from))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) => call(t, proto, |p| p.error_received(t, e)),
        };
        if !ok || budget == 0 {
            break;
        }
    }
    lp.put_read_buf(buf);
    ok
}

fn finish(t: &DatagramTransport, mut proto: Box<dyn DatagramProtocol>) {
    let lp = &t.lp;
    let reason = {
        let mut cx = lp.io_ctx();
        let Some(src) = cx.io.get_mut(t.key) else {
            return;
        };
        let Kind::Datagram(d) = &mut src.kind else {
            return;
        };
        match std::mem::replace(&mut d.phase, Phase::Lost) {
            Phase::Closed(reason) => reason,
            phase => {
                d.phase = phase;
                d.proto = Some(proto);
                let again = d.wants_dispatch();
                src.queued = false;
                if again {
                    lp.queue_dispatch(&mut cx.io, t.key);
                }
                return;
            }
        }
    };
    deliver_lost(t, &mut proto, reason);
    let garbage = lp.io_ctx().io.remove(t.key);
    drop((garbage, proto));
}

/// Calls `connection_lost`, containing (and reporting) a panic.
pub(crate) fn deliver_lost(
    t: &DatagramTransport,
    proto: &mut Box<dyn DatagramProtocol>,
    reason: Option<Failure>,
) {
    let message = "Exception in datagram protocol callback (connection_lost)";
    let _ = super::contain(&t.lp, t.key, message, || proto.connection_lost(t, reason));
}

/// A UDP socket, as its protocol and the user see it: a cheap handle
/// (`Clone`; equal handles name the same socket).
///
/// As with [`Transport`](super::Transport), methods change state at once and
/// the protocol hears the consequences from the loop; on a closed socket every
/// method does nothing.
#[derive(Clone)]
pub struct DatagramTransport {
    pub(crate) lp: Loop,
    pub(crate) key: IoKey,
}

impl DatagramTransport {
    fn with<R>(&self, f: impl FnOnce(&mut DgramState) -> R) -> Option<R> {
        state(&mut self.lp.io_ctx().io, self.key).map(f)
    }

    /// The loop this socket belongs to.
    pub fn event_loop(&self) -> &Loop {
        &self.lp
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
        let mut cx = self.lp.io_ctx();
        let Some(d) = state(&mut cx.io, self.key) else {
            return;
        };
        if !matches!(d.phase, Phase::Open) {
            d.dropped += 1;
            if d.dropped == 1 {
                log::warn!("deferloop: send on a closing or closed UDP socket ignored");
            }
            return;
        }
        let sock = d.sock.as_ref().expect("an open socket");
        if d.queue.is_empty() {
            match send_one(sock, data, to) {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => d.write_ready = false,
                Err(e) => {
                    d.errors.push(e);
                    self.lp.queue_dispatch(&mut cx.io, self.key);
                    return;
                }
            }
        }
        d.queue.push_back((data.into(), to));
        d.queued_bytes += data.len();
        d.flow.recheck(d.queued_bytes);
        if d.flow.has_note() {
            self.lp.queue_dispatch(&mut cx.io, self.key);
        }
    }

    /// Closes the socket once the queue is flushed; `connection_lost(None)`
    /// follows. Idempotent.
    pub fn close(&self) {
        let mut cx = self.lp.io_ctx();
        let Some(d) = state(&mut cx.io, self.key) else {
            return;
        };
        if !matches!(d.phase, Phase::Open) {
            return;
        }
        if d.queue.is_empty() {
            close_now(&self.lp, &mut cx, self.key, None);
        } else {
            d.phase = Phase::Closing;
        }
    }

    /// Closes the socket now, dropping the queue; `connection_lost(None)` follows.
    pub fn abort(&self) {
        close_now(&self.lp, &mut self.lp.io_ctx(), self.key, None);
    }

    /// Like [`abort`](Self::abort), with `reason` given to `connection_lost`.
    #[track_caller]
    pub fn abort_with(&self, reason: impl Into<Failure>) {
        let reason = reason.into();
        close_now(&self.lp, &mut self.lp.io_ctx(), self.key, Some(reason));
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
        let mut cx = self.lp.io_ctx();
        let d = state(&mut cx.io, self.key).ok_or(Error::Gone)?;
        let size = d.queued_bytes;
        d.flow.set_limits(high, low, size)?;
        if d.flow.has_note() {
            self.lp.queue_dispatch(&mut cx.io, self.key);
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

super::handle_identity!(DatagramTransport);

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
    ///         t.event_loop().stop();
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
        Ok(open(self, sock, Box::new(protocol), at)?)
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
        Ok(open(self, sock, Box::new(protocol), at)?)
    }
}
