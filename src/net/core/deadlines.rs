//! A connection's deadlines: the idle timeout, the write timeout, the connect
//! timeout and the linger after `close`. Each is one loop timer holding a weak
//! reference to the connection; past it the connection is aborted (or the
//! connect abandoned) with a `TimedOut` error that says which deadline passed.
//! The idle and write timers re-arm themselves lazily: activity is one store,
//! not a timer operation. Tests: tests/net_limits.rs, tests/net_tcp_close.rs,
//! tests/net_write_timeout.rs, tests/loop_manual_clock.rs.

use crate::net::core::conn::Conn;
use crate::net::core::state::ConnState;
use crate::net::core::Phase;
use crate::timers::later;
use crate::{Failure, Loop};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

impl Conn {
    /// Sets (or, with `None`, clears) the idle timeout: the connection is
    /// aborted with a `TimedOut` error after `d` without data from the peer.
    pub(crate) fn set_idle_timeout(self: &Rc<Self>, lp: &Loop, d: Option<Duration>) {
        let old = {
            let mut st = self.st.borrow_mut();
            st.idle_timeout = d;
            st.last_read = lp.time();
            st.idle_timer.take()
        };
        if let Some(h) = old {
            h.cancel();
        }
        if let Some(d) = d {
            self.arm_idle(lp, later(lp.time(), d));
        }
    }

    /// (Re)starts, from now, the time a connect in progress may take; `None`
    /// for no limit. Past it the attempt is abandoned and its Deferred fails
    /// with a `TimedOut` error naming the address.
    pub(crate) fn set_connect_timeout(self: &Rc<Self>, lp: &Loop, d: Option<Duration>) {
        let old = self.st.borrow_mut().connect_timer.take();
        if let Some(h) = old {
            h.cancel();
        }
        if !matches!(self.st.borrow().phase, Phase::Connecting) {
            return;
        }
        let Some(d) = d else { return };
        let weak = Rc::downgrade(self);
        let timer = lp.call_later(d, move |lp| {
            let Some(conn) = weak.upgrade() else { return };
            {
                let mut st = conn.st.borrow_mut();
                st.connect_timer = None;
                if !matches!(st.phase, Phase::Connecting) {
                    return;
                }
            }
            if let Some((Some(r), to)) = conn.give_up(lp) {
                let e = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {to}: no answer within {d:?}"),
                );
                r.errback_if_pending(e);
            }
        });
        self.st.borrow_mut().connect_timer = timer.ok();
    }

    /// Data arrived: push the idle deadline back (the timer re-arms itself
    /// lazily when it fires, so this is one clock read, not a timer per read).
    pub(crate) fn note_activity(&self, lp: &Loop) {
        let mut st = self.st.borrow_mut();
        if st.idle_timeout.is_some() {
            st.last_read = lp.time();
        }
    }

    fn arm_idle(self: &Rc<Self>, lp: &Loop, at: Instant) {
        let weak = Rc::downgrade(self);
        let timer = lp.call_at(at, move |lp| {
            let Some(conn) = weak.upgrade() else { return };
            let mut st = conn.st.borrow_mut();
            st.idle_timer = None;
            let Some(d) = st.idle_timeout else { return };
            let deadline = later(st.last_read, d);
            if lp.time() < deadline {
                drop(st);
                return conn.arm_idle(lp, deadline);
            }
            let e = io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no data from the peer for {d:?} (idle timeout)"),
            );
            conn.close_now(lp, &mut st, Some(Failure::new(e)));
        });
        self.st.borrow_mut().idle_timer = timer.ok();
    }

    /// While closing and not yet flushed: abort after the linger time (see
    /// `close`, and `finish_connect` for a close made while connecting).
    pub(crate) fn arm_linger(self: &Rc<Self>, lp: &Loop, st: &mut ConnState) {
        if matches!(st.phase, Phase::Closing(_)) && st.linger_timer.is_none() {
            let weak = Rc::downgrade(self);
            let linger = st.linger;
            st.linger_timer = lp
                .call_later(linger, move |lp| {
                    if let Some(conn) = weak.upgrade() {
                        let e = io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("close did not flush within the linger time ({linger:?})"),
                        );
                        conn.close_now(lp, &mut conn.st.borrow_mut(), Some(Failure::new(e)));
                    }
                })
                .ok();
        }
    }

    /// Sets (or, with `None`, clears) the write timeout; a stall already
    /// under way counts from its start.
    pub(crate) fn set_write_timeout(self: &Rc<Self>, lp: &Loop, d: Option<Duration>) {
        let (old, since) = {
            let mut st = self.st.borrow_mut();
            st.write_timeout = d;
            (st.write_timer.take(), st.stalled_since)
        };
        if let Some(h) = old {
            h.cancel();
        }
        if let (Some(d), Some(since)) = (d, since) {
            self.arm_write(lp, later(since, d));
        }
    }

    /// At the end of a dispatch: output waiting on a socket that said
    /// `WouldBlock` starts the write timeout (a writable edge ends the stall:
    /// see `dispatch`). One clock read a stall; the timer, once armed,
    /// re-arms itself. A TLS handshake's wait is its own deadline's.
    pub(crate) fn watch_writes(self: &Rc<Self>, lp: &Loop) {
        let mut st = self.st.borrow_mut();
        let waiting = !st.write_ready
            && matches!(st.phase, Phase::Open | Phase::Closing(_))
            && st.has_output()
            && !handshaking(&st);
        if !waiting {
            st.stalled_since = None;
            return;
        }
        if st.stalled_since.is_some() {
            return;
        }
        let now = lp.time();
        st.stalled_since = Some(now);
        st.stall_sent = layer_sent(&st);
        if let (Some(d), None) = (st.write_timeout, &st.write_timer) {
            drop(st);
            self.arm_write(lp, later(now, d));
        }
    }

    fn arm_write(self: &Rc<Self>, lp: &Loop, at: Instant) {
        let weak = Rc::downgrade(self);
        let timer = lp.call_at(at, move |lp| {
            let Some(conn) = weak.upgrade() else { return };
            let mut st = conn.st.borrow_mut();
            st.write_timer = None;
            let (Some(d), Some(since)) = (st.write_timeout, st.stalled_since) else {
                return;
            };
            let deadline = later(since, d);
            if lp.time() < deadline {
                drop(st);
                return conn.arm_write(lp, deadline);
            }
            if conn.took_some(lp, &mut st) {
                // A new stall, if any, starts now (at the dispatch's end).
                st.stalled_since = None;
                drop(st);
                return conn.wake(lp);
            }
            let e = io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer took none of the output waiting for it in {d:?} (write timeout)"),
            );
            conn.close_now(lp, &mut st, Some(Failure::new(e)));
        });
        self.st.borrow_mut().write_timer = timer.ok();
    }

    /// The write timeout's last check. A socket signals writable only once
    /// about a third of its send buffer is free, so a peer reading slowly
    /// may have taken some without an edge: a layer's records may have left
    /// since the stall began (with a write, an EOF or a read's answer), and
    /// else the socket is tried. What reached the socket is progress: the
    /// core's buffer shrinking, or with a layer (which may take plaintext
    /// and send nothing), the layer's count of bytes sent.
    fn took_some(&self, lp: &Loop, st: &mut ConnState) -> bool {
        if !st.has_output() || layer_sent(st) != st.stall_sent {
            return true;
        }
        let before = (st.wbuf.len(), layer_sent(st));
        st.write_ready = true;
        self.flush(lp, st);
        let took = match (before, layer_sent(st)) {
            ((_, Some(sent)), Some(now)) => now != sent,
            ((len, _), _) => st.wbuf.len() != len,
        };
        if !took {
            st.write_ready = false;
        }
        took
    }
}

fn layer_sent(st: &ConnState) -> Option<u64> {
    st.io.as_ref().and_then(|io| io.output().sent)
}

/// Whether a layer's handshake holds the writes back (not the peer).
fn handshaking(st: &ConnState) -> bool {
    st.io.as_ref().is_some_and(|io| io.output().handshaking)
}
