//! UDP: the datagram socket as a source, its dispatch, and the
//! [`DatagramTransport`] handle. Owns `Dgram`, `DgramSource`, `DatagramTransport`.
//!
//! A socket is an [`EventSource`] in [`Mode::Edge`], as listeners, signals
//! and children are: registered once (read + write). `Dgram` owns the socket
//! and its state, reached weakly by every `DatagramTransport`; the loop's
//! `DgramSource` holds the only strong reference, so the socket is closed
//! only when the loop drops the source, after its descriptor left the
//! selector: a closed socket stays open (unread) until `connection_lost` is
//! delivered, and a descriptor number reused meanwhile is never
//! deregistered under its new owner.
//! A send is tried at once when nothing is queued; a datagram the socket
//! refuses with `WouldBlock` is queued whole (one allocation) and the queue's
//! byte count drives the same flow control as a stream's write buffer. Send and
//! receive errors go to `error_received` (delivered by the loop, never from
//! inside `send_to`); they do not close the socket. The phases, the contained
//! protocol calls and `connection_lost` follow the same rules as streams
//! (`net/core/mod.rs`). The handle is `transport.rs`. Tests: tests/net_udp.rs,
//! tests/net_fd_reuse.rs.

use crate::net::core::buffer::Flow;
use crate::net::core::{self, Phase};
use crate::net::{DatagramProtocol, DatagramTransport, Limits};
use crate::reactor::{Ready, SourceKey, WeakLoop};
use crate::source::{EventSource, Interest, Mode, PostAction, Readiness};
use crate::{Error, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::unix::io::BorrowedFd;
use std::panic::Location;
use std::rc::Rc;

/// The socket: the kernel's; with the `sim` feature, the kernel's or a
/// simulated host's (`crate::sim::udp`).
#[cfg(not(feature = "sim"))]
pub(crate) type UdpSock = mio::net::UdpSocket;
#[cfg(feature = "sim")]
pub(crate) use crate::sim::udp::UdpSock;

/// The socket's descriptor; none for a simulated one.
#[cfg(not(feature = "sim"))]
fn fd_of(sock: &UdpSock) -> Option<BorrowedFd<'_>> {
    Some(std::os::unix::io::AsFd::as_fd(sock))
}
#[cfg(feature = "sim")]
fn fd_of(sock: &UdpSock) -> Option<BorrowedFd<'_>> {
    sock.fd()
}

pub(crate) struct DgramState {
    /// The socket is used only while this is open or closing.
    pub(crate) phase: Phase,
    /// Datagrams the socket refused for now, with their destination
    /// (`None`: the connected peer).
    pub(crate) queue: VecDeque<(Box<[u8]>, Option<SocketAddr>)>,
    pub(crate) queued_bytes: usize,
    pub(crate) flow: Flow,
    pub(crate) read_ready: bool,
    pub(crate) write_ready: bool,
    /// Errors from sends made outside the loop's dispatch, for `error_received`.
    pub(crate) errors: VecDeque<io::Error>,
    /// `connection_made` still to be delivered (the first dispatch does it).
    pub(crate) greet: bool,
    /// Datagrams ignored: sent after a close, or over the queue's cap.
    /// Shared with every handle, so the count outlives the socket.
    pub(crate) dropped: Rc<Cell<u64>>,
    /// The queue is over its cap: the drop was reported to `error_received`.
    pub(crate) over_cap: bool,
    /// The send queue's cap (`Limits::write_buffer_cap`).
    pub(crate) cap: usize,
    /// Bytes and datagrams one dispatch receives at most.
    pub(crate) read_budget: usize,
    pub(crate) per_dispatch: usize,
}

/// What [`DgramState::admit`] decided for a datagram about to be queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Counted in; queue it.
    Queue,
    /// Over the cap: dropped and counted.
    Drop,
    /// Over the cap, the first drop of a burst: an error for
    /// `error_received` was queued too.
    DropAndTell,
}

impl DgramState {
    /// A new socket's state: open, nothing queued, `connection_made` owed.
    fn new() -> DgramState {
        DgramState {
            phase: Phase::Open,
            queue: VecDeque::new(),
            queued_bytes: 0,
            flow: Flow::default(),
            read_ready: false,
            write_ready: false,
            errors: VecDeque::new(),
            greet: true,
            dropped: Rc::default(),
            over_cap: false,
            cap: SEND_QUEUE_CAP,
            read_budget: Limits::DEFAULT.read_budget,
            per_dispatch: Limits::DEFAULT.datagrams_per_dispatch,
        }
    }

    /// Counts a datagram of `len` bytes into the queue's size if that stays
    /// within `cap`; else drops it (see [`Admit`]).
    pub(crate) fn admit(&mut self, len: usize, cap: usize) -> Admit {
        let cost = len + DATAGRAM_OVERHEAD;
        if self.queued_bytes + cost <= cap {
            self.queued_bytes += cost;
            return Admit::Queue;
        }
        self.dropped.set(self.dropped.get() + 1);
        if std::mem::replace(&mut self.over_cap, true) {
            return Admit::Drop;
        }
        self.errors.push_back(io::Error::other(format!(
            "UDP send queue over its cap of {cap} bytes: datagrams dropped"
        )));
        Admit::DropAndTell
    }
}

/// What one queued datagram costs beyond its bytes, in the queue's count
/// (so that even empty datagrams count towards flow control and the cap).
pub(crate) const DATAGRAM_OVERHEAD: usize = 64;

/// The send queue's default hard cap, as a stream's write buffer's
/// ([`Limits::write_buffer_cap`]): over it a datagram is dropped (UDP may
/// drop; memory may not grow without bound).
pub(crate) const SEND_QUEUE_CAP: usize = Limits::DEFAULT.write_buffer_cap;

impl DgramState {
    fn wants_dispatch(&self) -> bool {
        self.greet
            || matches!(self.phase, Phase::Closed(_))
            || !self.errors.is_empty()
            || (self.phase.is_open() && self.flow.has_note())
            || (matches!(self.phase, Phase::Open) && self.read_ready)
            || (self.write_ready && !self.queue.is_empty())
    }
}

/// A UDP socket and its state, as its transports reach it (weakly).
pub(crate) struct Dgram {
    pub(crate) lp: WeakLoop,
    pub(crate) key: SourceKey,
    pub(crate) at: &'static Location<'static>,
    /// Used only while the phase is open; closed when the `Dgram` drops.
    pub(crate) sock: UdpSock,
    pub(crate) st: RefCell<DgramState>,
    pub(crate) dispatching: Cell<bool>,
}

/// A UDP socket, as the loop's source: the only strong owner of its
/// `Dgram`, and the owner of its protocol.
pub(crate) struct DgramSource {
    d: Rc<Dgram>,
    /// `None` while it is called.
    proto: Option<Box<dyn DatagramProtocol>>,
}

/// Registers a bound (and maybe connected) UDP socket; `connection_made`
/// follows in the next step 6.
pub(crate) fn open(
    lp: &Loop,
    mut sock: UdpSock,
    proto: Box<dyn DatagramProtocol>,
    at: &'static Location<'static>,
) -> Result<DatagramTransport, Error> {
    let mut made = None;
    let h = lp.add_source_with(at, |key, r| {
        if fd_of(&sock).is_none() {
            // A simulated socket: it wakes the source by its token.
            let both = mio::Interest::READABLE | mio::Interest::WRITABLE;
            r.register(&mut sock, key.token(), both)?;
        }
        let d = Rc::new(Dgram {
            lp: lp.downgrade(),
            key,
            at,
            sock,
            st: RefCell::new(DgramState::new()),
            dispatching: Cell::new(false),
        });
        made = Some(DatagramTransport::new(&d));
        Ok(DgramSource {
            d,
            proto: Some(proto),
        })
    })?;
    h.wake();
    h.detach(); // it stays until `connection_lost` is delivered
    Ok(made.expect("built"))
}

pub(crate) fn send_one(sock: &UdpSock, data: &[u8], to: Option<SocketAddr>) -> io::Result<usize> {
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
    pub(crate) fn wake(&self, lp: &Loop) {
        if !self.dispatching.get() {
            lp.wake_source(self.key, Ready::EMPTY);
        }
    }

    pub(crate) fn close_now(&self, lp: &Loop, st: &mut DgramState, reason: Option<Failure>) {
        if matches!(st.phase, Phase::Closed(_) | Phase::Lost) {
            return;
        }
        st.phase = Phase::Closed(reason);
        st.queue = VecDeque::new();
        st.queued_bytes = 0;
        st.flow.recheck(0);
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
        if !st.write_ready || !st.phase.is_open() {
            return;
        }
        while let Some((data, to)) = st.queue.front() {
            match send_one(&self.sock, data, *to) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.write_ready = false;
                    break;
                }
                Err(e) => st.errors.push_back(e),
                Ok(_) => {}
            }
            let (data, _) = st.queue.pop_front().expect("front exists");
            st.queued_bytes -= data.len() + DATAGRAM_OVERHEAD;
            st.flow.recheck(st.queued_bytes);
        }
        if st.queue.is_empty() {
            st.over_cap = false;
        }
        if st.queue.is_empty() && matches!(st.phase, Phase::Closing(_)) {
            self.close_now(lp, st, None);
        }
    }

    /// Delivers queued errors and flow-control notes; false if a call panicked.
    /// Errors are delivered after a close too (a send that failed before it,
    /// or while flushing): `connection_lost` comes after them.
    fn tell(
        &self,
        lp: &Loop,
        t: &DatagramTransport,
        proto: &mut Box<dyn DatagramProtocol>,
    ) -> bool {
        {
            let st = self.st.borrow();
            if st.errors.is_empty() && !st.flow.has_note() {
                return true; // the common case: nothing to tell
            }
        }
        loop {
            let (error, note) = {
                let mut st = self.st.borrow_mut();
                match st.errors.pop_front() {
                    Some(e) => (Some(e), None),
                    None if st.phase.is_open() => (None, st.flow.take_note()),
                    None => return true,
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

    /// Receives up to `Limits::datagrams_per_dispatch` datagrams or
    /// `Limits::read_budget` bytes (this socket's); returns whether the budget ran out with the socket still readable.
    fn read(
        &self,
        lp: &Loop,
        t: &DatagramTransport,
        proto: &mut Box<dyn DatagramProtocol>,
    ) -> bool {
        {
            let st = self.st.borrow();
            if !matches!(st.phase, Phase::Open) || !st.read_ready {
                return false; // nothing to read: the buffer is not taken
            }
        }
        let mut buf = core::take_read_buf();
        let (mut budget, per_dispatch) = {
            let st = self.st.borrow();
            (st.read_budget, st.per_dispatch)
        };
        let mut spent = true;
        for _ in 0..per_dispatch {
            let r = {
                let mut st = self.st.borrow_mut();
                if !matches!(st.phase, Phase::Open) || !st.read_ready {
                    spent = false;
                    break;
                }
                match self.sock.recv_from(&mut buf) {
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

impl EventSource for DgramSource {
    type Ret = PostAction;

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        fd_of(&self.d.sock)
    }

    fn interest(&self) -> Interest {
        Interest::BOTH
    }

    fn mode(&self) -> Mode {
        Mode::Edge
    }

    fn process(&mut self, lp: &Loop, r: Readiness) -> PostAction {
        let d = &self.d;
        let greet = {
            let mut st = d.st.borrow_mut();
            st.read_ready |= r.readable;
            st.write_ready |= r.writable;
            if !st.wants_dispatch() {
                // Writable with nothing queued, say: nothing to do, no
                // protocol call.
                return PostAction::Continue;
            }
            std::mem::take(&mut st.greet)
        };
        let Some(mut proto) = self.proto.take() else {
            return PostAction::Continue;
        };
        d.dispatching.set(true);
        let t = DatagramTransport::new(d);
        let mut again = false;
        if !greet || d.call(lp, &mut proto, |p| p.connection_made(&t)) {
            d.flush(lp);
            if d.tell(lp, &t, &mut proto) {
                again = d.read(lp, &t, &mut proto);
                d.tell(lp, &t, &mut proto);
            }
        }
        d.dispatching.set(false);
        let reason = {
            let mut st = d.st.borrow_mut();
            match std::mem::replace(&mut st.phase, Phase::Lost) {
                Phase::Closed(reason) => reason,
                phase => {
                    st.phase = phase;
                    let wants = st.wants_dispatch();
                    drop(st);
                    self.proto = Some(proto);
                    return if again || wants {
                        PostAction::Again
                    } else {
                        PostAction::Continue
                    };
                }
            }
        };
        d.lost(lp, &t, &mut proto, reason);
        // Dropped with the source, once it is out of the selector.
        self.proto = Some(proto);
        PostAction::Remove
    }

    fn loop_closed(&mut self, lp: &Loop) {
        let d = &self.d;
        let (reason, greet) = {
            let mut st = d.st.borrow_mut();
            let reason = match std::mem::replace(&mut st.phase, Phase::Lost) {
                Phase::Lost => return,
                Phase::Closed(reason) => reason,
                _ => Some(Failure::new(crate::deferred::LoopClosed)),
            };
            (reason, std::mem::take(&mut st.greet))
        };
        let Some(mut proto) = self.proto.take() else {
            return;
        };
        let t = DatagramTransport::new(d);
        if greet {
            let message = "Exception in datagram protocol callback";
            let _ = core::contain(lp, d.at, message, || proto.connection_made(&t));
        }
        d.lost(lp, &t, &mut proto, reason);
    }

    fn name(&self) -> &'static str {
        "udp"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue's count includes a fixed cost per datagram, so empty ones
    /// count too; over the cap datagrams are dropped and counted, and only
    /// the first drop of a burst is told.
    #[test]
    fn the_send_queue_counts_every_datagram_and_drops_over_its_cap() {
        let mut st = DgramState::new();
        let cap = 10 * DATAGRAM_OVERHEAD;
        for _ in 0..10 {
            assert_eq!(st.admit(0, cap), Admit::Queue);
        }
        assert_eq!(st.queued_bytes, cap);
        assert_eq!(st.admit(0, cap), Admit::DropAndTell);
        assert_eq!(st.admit(100, cap), Admit::Drop);
        assert_eq!(
            (st.dropped.get(), st.errors.len(), st.queued_bytes),
            (2, 1, cap)
        );
    }
}
