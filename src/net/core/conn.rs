//! The connection core's source: one source type for TCP, Unix,
//! pipe and in-memory connections, whatever their [`Wire`]. Owns `Conn`,
//! the write path and connecting; its state is `state.rs`, the dispatch
//! `dispatch.rs`.
//!
//! Readiness: a connection is registered once, for reading *and* writing,
//! edge-triggered. It keeps "readable" and "writable" flags and clears them
//! only when the socket says `WouldBlock` (or a read comes back short: the
//! kernel had no more); so no `epoll_ctl` is made on the data path, and a
//! protocol that pauses reading loses no wake-up.
//!
//! A dispatch: (connect completion) → flush the write buffer → tell the
//! protocol about flow control → read, at most [`Limits::read_budget`] bytes, one
//! `data_received` per read → flush what the protocol wrote → tell it again →
//! deliver `connection_lost` if the connection closed. If the budget ran out
//! with data left, the connection asks for the next turn instead of starving
//! the others. Tests: tests/net_*.rs.

use crate::deferred::LoopClosed;
use crate::net::core::io::Wire;
use crate::net::core::ss;
use crate::net::core::state::ConnState;
use crate::net::core::{self, Phase, WeakConn};
use crate::net::{ConnectFailed, Connection, Limits, Protocol, SockAddr, Transport};
use crate::reactor::{Ready, Source, SourceKey, WeakLoop};
use crate::{fail, Deferred, Error, Failure, Loop};
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::panic::Location;
use std::rc::Rc;
use std::time::Instant;

/// Writes of at least this many bytes are never held back to be coalesced.
const COALESCE_BELOW: usize = 4096;

/// What a discarded connection leaves, to be dropped outside any borrow.
pub(crate) type Garbage = (Option<Box<dyn Protocol>>, Option<Rc<dyn Source>>);

/// One stream connection: a source in the loop's registry, reached by its
/// [`Transport`]s through a `Weak`.
pub(crate) struct Conn {
    pub(super) lp: WeakLoop,
    pub(super) key: SourceKey,
    pub(super) at: &'static Location<'static>,
    pub(super) st: RefCell<ConnState>,
    /// The user's protocol; `None` while one of its methods runs, and after
    /// `connection_lost`.
    pub(super) proto: RefCell<Option<Box<dyn Protocol>>>,
    /// The protocol lends its buffer for reads (`Protocol::lends_buffers`,
    /// asked once): only then is `get_buffer` asked before each read.
    pub(super) lends: bool,
    /// Set while this connection's dispatch runs: what its protocol causes
    /// meanwhile is picked up before the dispatch ends.
    pub(super) dispatching: Cell<bool>,
    /// Run once when the connection has left the registry (a listener
    /// counting its connections).
    pub(super) on_lost: RefCell<Option<Box<dyn FnOnce()>>>,
}

impl Conn {
    /// Registers a new stream, connected (`connect` is `None`) or connecting.
    pub(crate) fn open(
        lp: &Loop,
        mut io: Box<dyn Wire>,
        proto: Box<dyn Protocol>,
        connect: Option<String>,
        at: &'static Location<'static>,
    ) -> Result<Rc<Conn>, Error> {
        // User code, with nothing borrowed; a panic is reported, and the
        // protocol then reads the plain way.
        let mut lends = false;
        let message = "Exception in protocol callback";
        let _ = core::contain(lp, at, message, || lends = proto.lends_buffers());
        let conn = core::enter(lp, at, |key, r| {
            io.register(r, key.token())?;
            let fd = io.fd();
            let conn = Conn {
                lp: lp.downgrade(),
                key,
                at,
                st: RefCell::new(ConnState::new(io, connect)),
                proto: RefCell::new(Some(proto)),
                lends,
                dispatching: Cell::new(false),
                on_lost: RefCell::new(None),
            };
            Ok((conn, fd))
        })?;
        ss::track(&conn);
        lp.counters().conn_opened();
        Ok(conn)
    }

    /// Starts an accepted connection: `connection_made` at once.
    pub(crate) fn start(self: &Rc<Self>, lp: &Loop) {
        {
            let mut st = self.st.borrow_mut();
            st.made = true;
            st.write_ready = true;
        }
        let t = self.transport();
        let Some(mut proto) = self.proto.borrow_mut().take() else {
            return;
        };
        self.call(lp, &mut proto, |p| p.connection_made(&t));
        *self.proto.borrow_mut() = Some(proto);
        if self.st.borrow().wants_dispatch() {
            self.wake(lp);
        }
    }

    pub(crate) fn transport(self: &Rc<Self>) -> Transport {
        Transport {
            conn: WeakConn::new(self),
        }
    }

    /// Asks for a dispatch, unless this connection's dispatch is running (it
    /// checks for work before it ends).
    pub(crate) fn wake(&self, lp: &Loop) {
        if !self.dispatching.get() {
            lp.wake_source(self.key, Ready::EMPTY);
        }
    }

    /// Closes the socket now: the buffer is dropped, the socket leaves the
    /// selector, and `connection_lost(reason)` is owed. The first reason wins.
    pub(crate) fn close_now(&self, lp: &Loop, st: &mut ConnState, reason: Option<Failure>) {
        if matches!(st.phase, Phase::Closed(_) | Phase::Lost) {
            return;
        }
        st.wbuf.clear();
        st.phase = if st.made {
            Phase::Closed(reason)
        } else {
            Phase::Lost
        };
        if let Some(mut io) = st.io.take() {
            lp.with_selector(|r| io.deregister(r));
            if let Some(fd) = io.fd() {
                lp.release_fd(fd, self.key);
            }
        }
        let timers = [
            st.linger_timer.take(),
            st.idle_timer.take(),
            st.write_timer.take(),
        ];
        for h in timers.into_iter().flatten() {
            h.cancel();
        }
        self.wake(lp);
    }

    /// Runs the `on_lost` hook, once.
    pub(crate) fn run_on_lost(&self) {
        let hook = self.on_lost.borrow_mut().take();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Removes a stream that never became a connection (refused, cancelled,
    /// timed out): no protocol method is called, the `on_lost` hook runs.
    /// Returns what to drop. A protocol lent out just now (the abort came
    /// from inside `ProtocolRef::with`) stays in its slot and goes with the
    /// connection.
    pub(crate) fn discard(&self, lp: &Loop) -> Garbage {
        {
            let mut st = self.st.borrow_mut();
            st.made = false;
            self.close_now(lp, &mut st, None);
            st.connect = None;
            // A connect abandoned early leaves no 30 s deadline behind.
            if let Some(h) = st.connect_timer.take() {
                h.cancel();
            }
        }
        let proto = self.proto.try_borrow_mut().ok().and_then(|mut p| p.take());
        let garbage = (proto, lp.remove_source(self.key));
        self.run_on_lost();
        garbage
    }

    /// Writes `parts` (`total` bytes): straight to the socket if nothing is
    /// buffered and this is the first write of the turn (or a large one),
    /// else into the buffer, flushed at the end of this connection's dispatch
    /// or in the next turn. So a broadcast of many short messages costs one
    /// system call per connection per turn, not one per message.
    pub(crate) fn write(&self, lp: &Loop, parts: &[&[u8]], total: usize) {
        let mut st = self.st.borrow_mut();
        let st = &mut *st;
        if !st.accepts_writes() {
            st.dropped_writes += 1;
            if st.dropped_writes == 1 {
                log::warn!(peer:% = st.peer(), conn_at:% = self.at, bytes = total;
                    "deferloop: write of {total} bytes to a closing or closed transport ignored");
            }
            return;
        }
        let turn = lp.turn_count();
        let mut written = 0;
        // Small writes after the first of a turn are coalesced; a large one
        // gains nothing from a copy and goes straight out.
        let direct = st.direct_turn != turn || total >= COALESCE_BELOW;
        if st.wbuf.is_empty() && direct && matches!(st.phase, Phase::Open) {
            st.direct_turn = turn;
            let io = st.io.as_mut().expect("an open stream has its io");
            match write_parts_now(&mut **io, parts, total) {
                Ok(n) => {
                    written = n;
                    lp.counters().sent(n);
                    st.bytes_out += n as u64;
                }
                Err(e) => return self.close_now(lp, st, Some(Failure::new(e))),
            }
            // A layer may take it all and the socket refuse its records.
            let refused = written < total || io.output().pending;
            if written < total {
                st.write_ready = false;
            }
            st.took = if refused {
                0
            } else {
                st.took.saturating_add(total)
            };
        }
        if written == total {
            return self.watch_layer(lp, st);
        }
        let mut skip = written;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            st.wbuf.push(&part[skip..]);
            skip = 0;
        }
        if st.wbuf.len() > st.cap {
            let e = crate::net::WriteBufferFull { cap: st.cap };
            log::warn!(peer:% = st.peer(), conn_at:% = self.at, cap = st.cap;
                "deferloop: {e}; connection aborted");
            return self.close_now(lp, st, Some(Failure::new(e)));
        }
        self.wake(lp);
    }

    /// Writes what is buffered, if the socket is writable.
    pub(crate) fn flush(&self, lp: &Loop, st: &mut ConnState) {
        if !self.flush_layer(lp, st) {
            return;
        }
        if !st.write_ready
            || st.wbuf.is_empty()
            || !matches!(st.phase, Phase::Open | Phase::Closing(_))
        {
            return;
        }
        let Some(io) = st.io.as_mut() else { return };
        let r = loop {
            if st.wbuf.is_empty() {
                break Ok(());
            }
            match io.write(st.wbuf.pending()) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    lp.counters().sent(n);
                    st.bytes_out += n as u64;
                    st.wbuf.consume(n);
                    st.took = st.took.saturating_add(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.write_ready = false;
                    st.took = 0;
                    break Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if io.output().pending {
            st.took = 0;
        }
        match r {
            Err(e) => self.close_now(lp, st, Some(Failure::new(e))),
            Ok(()) => self.after_drain(lp, st),
        }
    }

    /// A layer's own output (TLS records) goes before what is buffered.
    /// Returns whether the buffer may be flushed now. (A plain socket has
    /// none: see `Wire::output`.)
    fn flush_layer(&self, lp: &Loop, st: &mut ConnState) -> bool {
        let Some(io) = st.io.as_mut() else {
            return true;
        };
        if !st.write_ready || !io.output().pending {
            return true;
        }
        match io.flush_output(false) {
            Ok(true) => {
                if st.wbuf.is_empty() {
                    self.after_drain(lp, st);
                }
                true
            }
            Ok(false) => {
                st.write_ready = false;
                st.took = 0;
                false
            }
            Err(e) => {
                self.close_now(lp, st, Some(Failure::new(e)));
                false
            }
        }
    }

    /// What to do once the write buffer is empty: a pending close or EOF.
    pub(crate) fn after_drain(&self, lp: &Loop, st: &mut ConnState) {
        if !st.wbuf.is_empty() || matches!(st.phase, Phase::Connecting) {
            return;
        }
        // A `write_eof` asked for shuts the write side first, closing or not
        // (once both sides have ended the connection is closing: see
        // `Transport::write_eof` and dispatch's EOF). A layer queues its EOF
        // behind its records (TLS: close_notify, then the socket's
        // shutdown), however they leave: on a writable edge or answering a
        // read.
        if st.eof_requested && !st.eof_written {
            st.eof_written = true;
            let r = st.io.as_mut().map_or(Ok(()), |io| io.shutdown_write());
            if let Err(e) = r {
                return self.close_now(lp, st, Some(Failure::new(e)));
            }
        }
        if matches!(st.phase, Phase::Closing(_)) {
            // A layer's last words (TLS: close_notify) go out first.
            match st.io.as_mut().map_or(Ok(true), |io| io.flush_output(true)) {
                Ok(true) => {}
                Ok(false) => {
                    st.write_ready = false;
                    return;
                }
                Err(e) => return self.close_now(lp, st, Some(Failure::new(e))),
            }
            if let Phase::Closing(reason) = &mut st.phase {
                let reason = reason.take();
                self.close_now(lp, st, reason);
            }
        }
    }

    /// `close()`: stop reading, flush, then close; abort after the linger
    /// time if the peer does not take the rest.
    pub(crate) fn close(self: &Rc<Self>, lp: &Loop, reason: Option<Failure>) {
        let mut st = self.st.borrow_mut();
        if !matches!(st.phase, Phase::Open | Phase::Connecting) {
            return;
        }
        if matches!(st.phase, Phase::Connecting) {
            // Closed once up and flushed; see `finish_connect`.
            st.close_when_up.get_or_insert(reason);
            return;
        }
        st.phase = Phase::Closing(reason);
        self.after_drain(lp, &mut st);
        self.arm_linger(lp, &mut st);
        self.watch_layer(lp, &st);
    }

    /// A layer may keep output of its own (TLS records the socket refused)
    /// after a write, EOF or close made outside a dispatch, with nothing
    /// buffered here: ask for a dispatch, whose end starts the write timeout
    /// (`watch_writes`). Inside one, its end does that anyway.
    pub(crate) fn watch_layer(&self, lp: &Loop, st: &ConnState) {
        if !self.dispatching.get() && st.layer_pending() {
            self.wake(lp);
        }
    }

    /// The rule every borrow of the state keeps: none is held while user
    /// code runs. Checked (in debug builds) before each protocol method; a
    /// user's call back into its transport would otherwise meet a borrow.
    pub(super) fn assert_unborrowed(&self) {
        debug_assert!(
            self.st.try_borrow_mut().is_ok(),
            "a protocol method called with the connection's state borrowed"
        );
    }

    /// Calls one protocol method, containing a panic: it is reported and the
    /// connection is aborted with it. Returns whether the call returned.
    pub(crate) fn call(
        &self,
        lp: &Loop,
        proto: &mut Box<dyn Protocol>,
        f: impl FnOnce(&mut dyn Protocol),
    ) -> bool {
        self.assert_unborrowed();
        let message = "Exception in protocol callback";
        match core::contain(lp, self.at, message, || f(&mut **proto)) {
            None => true,
            Some(failure) => {
                self.close_now(lp, &mut self.st.borrow_mut(), Some(failure));
                false
            }
        }
    }
}

/// `ss`'s row: the state of one connection, read between turns.
impl ss::Row for Conn {
    fn row(&self, now: Instant) -> Option<ss::Connection> {
        let st = self.st.try_borrow().ok()?;
        let state = match st.phase {
            Phase::Connecting => "connecting",
            Phase::Open => "open",
            Phase::Closing(_) => "closing",
            Phase::Closed(_) => "closed",
            Phase::Lost => return None,
        };
        let peer = match (&st.io, &st.connect) {
            (_, Some((_, to))) => to.clone(),
            // A pipe has no address: its kind stands in for one.
            (Some(io), None) => io
                .peer_addr()
                .map_or_else(|_| format!("({})", io.name()), |a| a.to_string()),
            (None, None) => "-".into(),
        };
        Some(ss::Connection {
            peer,
            state,
            write_buffered: st.wbuf.len(),
            bytes_in: st.bytes_in,
            bytes_out: st.bytes_out,
            reading_paused: st.reading_paused || st.held,
            writing_paused: st.wbuf.flow.is_paused(),
            idle: st
                .idle_timeout
                .map(|limit| (now.saturating_duration_since(st.last_read), limit)),
            opened_at: self.at,
        })
    }
}

/// Starts a connect: registers the connecting stream and returns the
/// [`Connection`] at once. A failure to start (closed loop, `connect` refused
/// at once) gives a connection whose transport is closed and whose Deferred
/// has failed. Cancelling the Deferred removes the stream; the protocol is
/// dropped uncalled.
pub(crate) fn connect<P: Protocol>(
    lp: &Loop,
    io: io::Result<Box<dyn Wire>>,
    to: SockAddr,
    protocol: P,
    at: &'static Location<'static>,
) -> Connection<P> {
    let failed = |f: Failure| Connection::new(Transport::dangling(), fail(f));
    let io = match io {
        Ok(io) => io,
        Err(e) => return failed(Failure::new(ConnectFailed::wrap(&to, e))),
    };
    let conn = match Conn::open(lp, io, Box::new(protocol), Some(to.to_string()), at) {
        Ok(conn) => conn,
        Err(Error::Io(e)) => return failed(Failure::new(ConnectFailed::wrap(&to, e))),
        Err(Error::Closed) => return failed(Failure::new(LoopClosed)),
        Err(e) => return failed(Failure::new(e)),
    };
    let weak = Rc::downgrade(&conn);
    let (d, r) = Deferred::with_canceller(move |_| {
        if let Some(conn) = weak.upgrade() {
            if let Some(lp) = conn.event_loop() {
                let garbage = conn.discard(&lp);
                drop(garbage);
            }
        }
    });
    d.tag_wait(|| crate::deferred::registry::Wait::Connect {
        addr: to.to_string(),
    });
    conn.set_resolver(r);
    conn.set_connect_timeout(lp, Some(Limits::DEFAULT.connect_timeout));
    Connection::new(conn.transport(), d)
}

/// Writes as much of `parts` (`total` bytes) as the socket takes now.
fn write_parts_now(io: &mut dyn Wire, parts: &[&[u8]], total: usize) -> io::Result<usize> {
    let mut n = 0;
    while n < total {
        let r = if parts.len() == 1 {
            io.write(&parts[0][n..])
        } else {
            let mut skip = n;
            let mut slices: SmallVec<[IoSlice<'_>; 4]> = SmallVec::new();
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                } else {
                    slices.push(IoSlice::new(&p[skip..]));
                    skip = 0;
                }
            }
            io.write_vectored(&slices)
        };
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
