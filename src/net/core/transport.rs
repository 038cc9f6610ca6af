//! [`Transport`]: the handle to a stream connection that protocols and users
//! hold. It reaches the connection through a `Weak`, so a transport kept in
//! its own protocol keeps neither the connection nor the loop alive.

use crate::net::core::conn::Conn;
use crate::net::core::state::ConnState;
use crate::net::core::{Phase, Reachable, WeakConn};
use crate::net::{Limits, ProtocolRef, SockAddr};
use crate::reactor::WeakLoop;
use crate::{Error, Failure, Loop};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::unix::io::RawFd;
use std::rc::{Rc, Weak};
use std::time::Duration;

/// A stream connection, as its protocol and the user see it: a cheap handle
/// (`Clone`; equal handles name the same connection).
///
/// Methods change the connection's state at once; the protocol hears about the
/// consequences (`pause_writing`, `connection_lost`) from the loop, never from
/// inside the method (see [`Protocol`](crate::net::Protocol)). On a connection that
/// is gone, every method does nothing (writes are dropped, see
/// [`write`](Self::write)) and the queries say "closed".
///
/// # Examples
/// A client sends 4 MiB over TCP as fast as the server reads it: it writes
/// until the transport says the buffer is above its high-water mark, goes on
/// at `resume_writing`, and closes when done; the server reports the total
/// when the connection is lost.
/// ```
/// use deferloop::net::{Protocol, Transport};
/// use deferloop::{Deferred, EventLoop, Failure, Resolver};
///
/// const TOTAL: usize = 4 << 20;
///
/// struct Upload { left: usize }
/// impl Upload {
///     fn produce(&mut self, t: &Transport) {
///         while self.left > 0 && !t.is_writing_paused() {
///             let n = self.left.min(64 * 1024);
///             t.write(&vec![0u8; n]);
///             self.left -= n;
///         }
///         if self.left == 0 {
///             t.close(); // flushes the buffer first
///         }
///     }
/// }
/// impl Protocol for Upload {
///     fn connection_made(&mut self, t: &Transport) {
///         t.set_write_buffer_limits(Some(256 * 1024), None).unwrap();
///         self.produce(t);
///     }
///     fn data_received(&mut self, _t: &Transport, _data: &[u8]) {}
///     fn resume_writing(&mut self, t: &Transport) {
///         self.produce(t);
///     }
/// }
///
/// struct Count { n: usize, done: Option<Resolver<usize>> }
/// impl Protocol for Count {
///     fn data_received(&mut self, _t: &Transport, data: &[u8]) {
///         self.n += data.len();
///     }
///     fn connection_lost(&mut self, _t: &Transport, _reason: Option<Failure>) {
///         if let Some(done) = self.done.take() {
///             done.callback(self.n).unwrap();
///         }
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let (total, done) = Deferred::new();
/// let mut done = Some(done);
/// let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), move || Count {
///     n: 0,
///     done: done.take(),
/// })?;
/// let addr = server.local_addr().as_inet().unwrap();
/// ev.connect_tcp(addr, Upload { left: TOTAL }).connected().detach();
/// assert_eq!(ev.run_until(total).unwrap(), TOTAL);
/// # Ok::<(), deferloop::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Transport {
    pub(crate) conn: WeakConn<Conn>,
}

impl Transport {
    /// A transport of no connection: every method does nothing.
    pub(crate) fn dangling() -> Transport {
        Transport {
            conn: WeakConn::dangling(),
        }
    }

    pub(crate) fn from_weak(conn: Weak<Conn>) -> Transport {
        Transport { conn: conn.into() }
    }

    /// The loop this transport belongs to; `None` once the connection is gone
    /// (the handle keeps neither alive).
    pub fn event_loop(&self) -> Option<Loop> {
        self.conn.event_loop()
    }

    /// A typed handle to this connection's protocol, for code that runs
    /// outside the protocol's own methods (a timer, another connection). Its
    /// [`with`](ProtocolRef::with) fails if the protocol is not a `P`.
    pub fn protocol<P: crate::net::Protocol>(&self) -> ProtocolRef<P> {
        ProtocolRef::of(self)
    }

    /// Asks for one more `data_received` call, with no bytes, in the next
    /// turn — also while reading is paused. For a protocol that holds back
    /// part of what it received (the framers deliver at most a few dozen
    /// frames per turn) and must go on without new bytes arriving. Works
    /// through protocols that wrap others and pass `data_received` on.
    pub fn redeliver(&self) {
        if let Some((conn, lp)) = self.conn.live() {
            conn.st.borrow_mut().redeliver = true;
            conn.wake(&lp);
        }
    }

    /// Sends `data`: written to the socket at once if nothing is buffered
    /// (the first write of a turn), else buffered and written as the socket
    /// drains. Never blocks.
    ///
    /// Short writes (under 4 KiB) made to one connection within one turn are
    /// coalesced: the first goes to the socket, the rest are written together
    /// at the end of the connection's dispatch or in the next turn, so a
    /// broadcast of many messages to many connections costs about one system
    /// call per connection per turn.
    ///
    /// A write that takes the buffer above the high-water mark makes
    /// [`is_writing_paused`](Self::is_writing_paused) true at once; the
    /// protocol's `pause_writing` follows, and the connection stops being read
    /// until the buffer drains (see [`set_read_while_write_paused`](Self::set_read_while_write_paused)).
    /// A buffer above the hard cap ([`set_write_buffer_cap`](Self::set_write_buffer_cap),
    /// 64 MiB by default) aborts the connection with [`WriteBufferFull`](crate::net::WriteBufferFull).
    ///
    /// Before the connection is up (a `connect_tcp` in progress) writes are
    /// buffered and sent once it is. After [`close`](Self::close),
    /// [`write_eof`](Self::write_eof), [`abort`](Self::abort) or the
    /// connection's loss, writes are **ignored** (asyncio's behaviour): the
    /// first one is logged with `log::warn!`, and
    /// [`dropped_writes`](Self::dropped_writes) counts them. Once the
    /// connection is gone altogether (after `connection_lost`, when the loop
    /// let go of it) there is nothing left to count in: a write is then
    /// logged with `log::warn!` once per thread. A write error
    /// (reset, broken pipe) aborts the connection with that error as the
    /// reason given to `connection_lost`.
    pub fn write(&self, data: &[u8]) {
        self.write_vectored(&[data]);
    }

    /// Sends `parts` one after the other, as [`write`](Self::write) would,
    /// but with one system call when nothing is buffered and the parts add
    /// up to 4 KiB or less (a header and a body, say): they are copied into
    /// one `send`, not written with `writev`, which could raise SIGPIPE.
    pub fn write_vectored(&self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return;
        }
        match self.conn.live() {
            Some((conn, lp)) => conn.write(&lp, parts, total),
            None => gone_write("the transport of a connection", total),
        }
    }

    /// Closes the write side once the buffer is flushed (TCP `shutdown(SHUT_WR)`):
    /// the peer reads end-of-file; reading goes on. Later writes are ignored.
    /// Once the peer has ended too (here, or when its EOF comes and
    /// `eof_received` keeps the connection open), this is a
    /// [`close`](Self::close): what is buffered goes out, then the socket
    /// closes, within the linger time. So a peer that half-closes and never
    /// reads the reply cannot hold the connection forever.
    pub fn write_eof(&self) {
        let Some((conn, lp)) = self.conn.live() else {
            return;
        };
        let mut st = conn.st.borrow_mut();
        if !st.accepts_writes() {
            return;
        }
        st.eof_requested = true;
        if st.eof_received {
            drop(st);
            return conn.close(&lp, None);
        }
        conn.after_drain(&lp, &mut st);
        conn.watch_layer(&lp, &st);
    }

    /// Closes the connection gracefully: reading stops now, what is buffered is
    /// written, then the socket closes and `connection_lost(None)` follows.
    /// If the peer does not take what is buffered within the linger time
    /// ([`set_linger`](Self::set_linger), 30 s by default), the connection is
    /// aborted with a `TimedOut` error instead. Idempotent. On a connection
    /// still connecting, it closes once up and flushed.
    pub fn close(&self) {
        if let Some((conn, lp)) = self.conn.live() {
            conn.close(&lp, None);
        }
    }

    /// Like [`close`](Self::close), with `reason` given to `connection_lost`:
    /// for a protocol that gives up on its peer but still flushes a last reply
    /// (the framers do this on an over-long line).
    #[track_caller]
    pub fn close_with(&self, reason: impl Into<Failure>) {
        let reason = reason.into();
        if let Some((conn, lp)) = self.conn.live() {
            conn.close(&lp, Some(reason));
        }
    }

    /// Closes the connection now: the buffer is dropped, the socket closed;
    /// `connection_lost(None)` follows (asyncio's `abort`). On a connection
    /// still connecting, the attempt is abandoned: its Deferred fails and the
    /// protocol is never called.
    pub fn abort(&self) {
        self.abort_inner(None);
    }

    /// Like [`abort`](Self::abort), with `reason` given to `connection_lost`:
    /// for a protocol that gives up on its peer (a framing error, say).
    #[track_caller]
    pub fn abort_with(&self, reason: impl Into<Failure>) {
        self.abort_inner(Some(reason.into()));
    }

    fn abort_inner(&self, reason: Option<Failure>) {
        let Some((conn, lp)) = self.conn.live() else {
            return;
        };
        if !conn.is_connecting() {
            return conn.abort(&lp, reason);
        }
        if let Some((Some(r), to)) = conn.give_up(&lp) {
            let e = io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("connect to {to}: aborted before it was up"),
            );
            r.errback_if_pending(reason.unwrap_or_else(|| Failure::new(e)));
        }
    }

    /// Whether the connection is closing or closed (a connection still
    /// connecting is neither).
    pub fn is_closing(&self) -> bool {
        self.conn
            .with(|s| !matches!(s.phase, Phase::Open | Phase::Connecting))
            .unwrap_or(true)
    }

    /// Whether a connect is still in progress.
    pub fn is_connecting(&self) -> bool {
        self.conn
            .with(|s| matches!(s.phase, Phase::Connecting))
            .unwrap_or(false)
    }

    /// Stops calling `data_received` until [`resume_reading`](Self::resume_reading).
    /// No system call: the kernel's buffer fills, and TCP pushes back on the peer.
    pub fn pause_reading(&self) {
        self.conn.with(|s| s.reading_paused = true);
    }

    /// Undoes [`pause_reading`](Self::pause_reading); data that arrived
    /// meanwhile is delivered from the next turn.
    pub fn resume_reading(&self) {
        let Some((conn, lp)) = self.conn.live() else {
            return;
        };
        let mut st = conn.st.borrow_mut();
        if std::mem::take(&mut st.reading_paused) {
            // Frames a framer holds go on from the next turn.
            st.redeliver |= st.held;
            drop(st);
            conn.wake(&lp);
        }
    }

    /// Whether the protocol paused reading (`pause_reading`).
    pub(crate) fn reading_paused(&self) -> bool {
        self.conn.with(|s| s.reading_paused).unwrap_or(false)
    }

    /// A framer's own pause while frames of a read wait for later turns
    /// (framing/mod.rs): kept apart from `pause_reading`, so a protocol's
    /// `resume_reading` does not lift it, nor does its end lift the
    /// protocol's pause.
    pub(crate) fn hold_reading(&self, on: bool) {
        let Some((conn, lp)) = self.conn.live() else {
            return;
        };
        let was = std::mem::replace(&mut conn.st.borrow_mut().held, on);
        if was && !on {
            conn.wake(&lp);
        }
    }

    /// Whether the connection is read: open, not paused by the protocol
    /// ([`pause_reading`](Self::pause_reading)), no EOF yet (asyncio's
    /// `is_reading`). A framer holding the rest of a burst's frames for later
    /// turns (net/framing) also leaves the socket unread meanwhile, but that
    /// hold ends by itself and is not shown here: `false` always means a
    /// pause someone has to lift.
    pub fn is_reading(&self) -> bool {
        self.conn
            .with(|s| {
                matches!(s.phase, Phase::Open | Phase::Connecting)
                    && !s.reading_paused
                    && !s.eof_received
            })
            .unwrap_or(false)
    }

    /// Applies `limits` to this connection: its read budget, write buffer
    /// marks and cap, write and idle timeouts, linger, and (while it
    /// connects) its connect timeout. What only a listener or a UDP socket
    /// uses is ignored. A listener does this for each connection it
    /// accepts ([`Listener::set_limits`](crate::net::Listener::set_limits)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high_water >= low_water` (then
    /// nothing changes); [`Error::Gone`] for a connection that no longer exists.
    pub fn set_limits(&self, limits: &Limits) -> Result<(), Error> {
        let (conn, lp) = self.conn.live().ok_or(Error::Gone)?;
        conn.apply_limits(&lp, limits)
    }

    /// Bytes one dispatch reads from this connection at most
    /// ([`Limits::read_budget`](crate::net::Limits::read_budget)); 0 once
    /// the connection is gone.
    pub fn read_budget(&self) -> usize {
        self.conn.with(|s| s.read_budget).unwrap_or(0)
    }

    /// Whether to go on reading while writing is paused. Off by default: a
    /// connection whose write buffer is above its high-water mark is not read
    /// until it drains, so a peer that sends without reading the replies
    /// cannot grow the buffer without bound. A protocol that handles
    /// `pause_writing` itself (a proxy pausing the *other* side) may turn it on.
    pub fn set_read_while_write_paused(&self, on: bool) {
        let Some((conn, lp)) = self.conn.live() else {
            return;
        };
        conn.st.borrow_mut().read_while_write_paused = on;
        conn.wake(&lp);
    }

    /// Sets the write buffer's high- and low-water marks (asyncio's rules: see
    /// [`Limits::high_water`](crate::net::Limits::high_water)); the buffer is
    /// re-checked at once, so lowering `high` below the current size pauses
    /// the protocol.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high >= low`; [`Error::Gone`] for a
    /// connection that no longer exists.
    pub fn set_write_buffer_limits(
        &self,
        high: Option<usize>,
        low: Option<usize>,
    ) -> Result<(), Error> {
        let (conn, lp) = self.conn.live().ok_or(Error::Gone)?;
        conn.st.borrow_mut().wbuf.set_limits(high, low)?;
        conn.wake(&lp);
        Ok(())
    }

    /// `(high, low)` water marks of the write buffer, in the order
    /// [`set_write_buffer_limits`](Self::set_write_buffer_limits) takes them.
    pub fn write_buffer_limits(&self) -> (usize, usize) {
        self.conn
            .with(|s| {
                let (low, high) = s.wbuf.flow.limits();
                (high, low)
            })
            .unwrap_or((0, 0))
    }

    /// Sets the hard cap on buffered bytes (default
    /// [`Limits::write_buffer_cap`](crate::net::Limits::write_buffer_cap), 64 MiB):
    /// a write that takes the buffer past it aborts the connection with
    /// [`WriteBufferFull`](crate::net::WriteBufferFull), logged.
    pub fn set_write_buffer_cap(&self, cap: usize) {
        self.conn.with(|s| s.cap = cap);
    }

    /// Sets how long a graceful [`close`](Self::close) may wait for the peer
    /// to take what is buffered before it aborts (default
    /// [`Limits::linger`](crate::net::Limits::linger), 30 s). Applies to closes
    /// that start after the call.
    pub fn set_linger(&self, linger: Duration) {
        self.conn.with(|s| s.linger = linger);
    }

    /// Aborts the connection with a `TimedOut` error once `timeout` passes
    /// without data from the peer (Twisted's `TimeoutMixin`); `None` turns
    /// it off (the default), as does `Duration::MAX`. Each read pushes the
    /// deadline back; the timer re-arms itself lazily, so a busy connection
    /// costs one clock read per read, not a timer operation.
    pub fn set_idle_timeout(&self, timeout: Option<Duration>) {
        if let Some((conn, lp)) = self.conn.live() {
            conn.set_idle_timeout(&lp, timeout);
        }
    }

    /// Aborts the connection with a `TimedOut` error once output has waited
    /// `timeout` and the peer took none of it (default
    /// [`Limits::write_timeout`](crate::net::Limits::write_timeout), 60 s, as
    /// nginx's `send_timeout`; none for a child process's stdin); `None` or
    /// `Duration::MAX` turns it off. The wait starts when the socket refuses
    /// a write, and starts again whenever the peer takes some: at a writable
    /// edge, or when the check at the deadline finds it took some (TLS
    /// records left meanwhile, or the socket takes more now).
    /// So a slow reader is kept, and one that stops reading (to hold the
    /// connection and its buffer, or with its own reading paused the way
    /// ours pauses above the high-water mark) is not kept for ever; asyncio
    /// and Twisted have no such default, and there that peer holds the
    /// connection until the program ends. "Took" is TCP's: a peer that reads
    /// less than a segment's worth (64 KiB on loopback) in that time keeps
    /// its window shut and has taken nothing. A stall already under way
    /// counts from its start; a TLS handshake's wait is its own deadline's.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) {
        if let Some((conn, lp)) = self.conn.live() {
            conn.set_write_timeout(&lp, timeout);
        }
    }

    /// The write timeout (see [`set_write_timeout`](Self::set_write_timeout));
    /// `None` when it is off, and once the connection is gone.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.conn.with(|s| s.write_timeout).flatten()
    }

    /// Whether a layer (TLS) is on this connection's wire, perhaps still
    /// handshaking; `false` once the connection is gone.
    pub(crate) fn is_layered(&self) -> bool {
        self.conn
            .upgrade()
            .and_then(|c| c.with_wire(|io| io.layer().is_some()))
            .unwrap_or(false)
    }

    /// Bytes buffered, not yet taken by the socket.
    pub fn write_buffer_size(&self) -> usize {
        self.conn.with(|s| s.wbuf.len()).unwrap_or(0)
    }

    /// Whether the buffer is above its high-water mark (and has not drained to
    /// the low one since): the state `pause_writing` reports.
    pub fn is_writing_paused(&self) -> bool {
        self.conn.with(|s| s.wbuf.flow.is_paused()).unwrap_or(false)
    }

    /// Writes ignored because the transport was closing or closed.
    pub fn dropped_writes(&self) -> u64 {
        self.conn.with(|s| s.dropped_writes).unwrap_or(0)
    }

    fn query<R>(
        &self,
        f: impl FnOnce(&dyn crate::net::core::io::Wire) -> io::Result<R>,
    ) -> io::Result<R> {
        self.conn
            .with(|s| s.io.as_deref().map(f))
            .flatten()
            .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }

    /// The local address.
    ///
    /// # Errors
    /// `ErrorKind::NotConnected` once the socket is closed; else the OS error.
    pub fn local_addr(&self) -> io::Result<SockAddr> {
        self.query(|io| io.local_addr())
    }

    /// The peer's address.
    ///
    /// # Errors
    /// As for [`local_addr`](Self::local_addr).
    pub fn peer_addr(&self) -> io::Result<SockAddr> {
        self.query(|io| io.peer_addr())
    }

    /// The socket's file descriptor while it is open (for `setsockopt` and
    /// the like; the loop keeps owning it: `add_reader` on it is refused).
    /// `None` for an in-memory connection.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.conn
            .with(|s| s.io.as_ref().and_then(|io| io.fd()))
            .flatten()
    }

    /// Sets `TCP_NODELAY` (on by default for every TCP connection deferloop makes).
    ///
    /// # Errors
    /// `ErrorKind::Unsupported` on a Unix or in-memory connection;
    /// `NotConnected` once closed.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.query(|io| io.set_nodelay(on))
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// # Errors
    /// As for [`set_nodelay`](Self::set_nodelay).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.query(|io| io.nodelay())
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Transport");
        let info = self.conn.with(|s| {
            let peer = s.io.as_ref().and_then(|io| io.peer_addr().ok());
            (peer, s.wbuf.len())
        });
        match info {
            Some((peer, buffered)) => d
                .field("peer", &peer)
                .field("closing", &self.is_closing())
                .field("buffered", &buffered),
            None => d.field("closed", &true),
        };
        d.finish()
    }
}

thread_local! {
    static GONE_WRITE_LOGGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A write to `what`, which no longer exists (a connection, a UDP socket, a
/// child's stdin): logged once per thread, as a dead handle has no counter
/// of its own.
#[cold]
pub(crate) fn gone_write(what: &str, total: usize) {
    if !GONE_WRITE_LOGGED.with(|l| l.replace(true)) {
        log::warn!(
            what = what, bytes = total;
            "deferloop: write of {total} bytes to {what} that is gone ignored \
             (logged once per thread)"
        );
    }
}

impl Conn {
    /// What [`Transport::set_limits`] does; also a listener's, for each
    /// connection it accepts.
    pub(crate) fn apply_limits(self: &Rc<Self>, lp: &Loop, limits: &Limits) -> Result<(), Error> {
        {
            let mut st = self.st.borrow_mut();
            st.wbuf
                .set_limits(Some(limits.high_water), Some(limits.low_water))?;
            st.cap = limits.write_buffer_cap;
            st.linger = limits.linger;
            st.read_budget = limits.read_budget.max(1);
        }
        self.set_idle_timeout(lp, limits.idle_timeout);
        self.set_write_timeout(lp, limits.write_timeout);
        // Does nothing once up: set_connect_timeout checks the phase.
        self.set_connect_timeout(lp, Some(limits.connect_timeout));
        self.wake(lp);
        Ok(())
    }
}

impl Reachable for Conn {
    type State = ConnState;
    fn state(&self) -> &RefCell<ConnState> {
        &self.st
    }
    fn weak_loop(&self) -> &WeakLoop {
        &self.lp
    }
}
