//! A stream connection's dispatch (step 6): connect completion, flush,
//! flow-control notes, reads, `connection_lost`; and what the loop's close
//! owes it. The state is `state.rs`, the write path `conn.rs`.

use crate::deferred::LoopClosed;
use crate::net::core::buffer;
use crate::net::core::conn::Conn;
use crate::net::core::{self, Phase};
use crate::net::{ConnectFailed, Protocol, Transport};
use crate::reactor::{PostAction, Ready, Source, SourceKey};
use crate::{Error, Failure, Loop};
use std::io;
use std::rc::Rc;

impl Conn {
    /// Completes a connect: `connection_made`, then the Deferred fires.
    /// Returns whether the dispatch goes on.
    fn finish_connect(self: &Rc<Self>, lp: &Loop) -> bool {
        let outcome = {
            let mut st = self.st.borrow_mut();
            if !matches!(st.phase, Phase::Connecting) {
                return true;
            }
            if !(std::mem::take(&mut st.read_ready) | std::mem::take(&mut st.write_ready)) {
                return false;
            }
            let io = st.io.as_mut().expect("a connecting stream has its io");
            io.connect_result()
        };
        match outcome {
            Ok(false) => false,
            Err(e) => {
                // An accepted stream that failed its handshake (TLS) is
                // counted by its listener until this runs its `on_lost`.
                let (resolver, to) = self.give_up(lp).expect("connecting");
                match resolver {
                    Some(r) => {
                        r.errback_if_pending(ConnectFailed::wrap(&to, e));
                    }
                    // An accepted TLS client: nobody waits, as documented on
                    // `listen_tls`, the failure goes to the log.
                    None => log::debug!(peer = to.as_str(); "deferloop: TLS client {to}: {e}"),
                }
                false
            }
            Ok(true) => {
                let resolver = {
                    let mut st = self.st.borrow_mut();
                    if let Some(h) = st.connect_timer.take() {
                        h.cancel();
                    }
                    st.phase = match st.close_when_up.take() {
                        Some(reason) => Phase::Closing(reason),
                        None => Phase::Open,
                    };
                    st.made = true;
                    // The connect's readiness says nothing about data: look.
                    st.read_ready = true;
                    st.write_ready = true;
                    st.connect.take().and_then(|c| c.0)
                };
                let t = self.transport();
                let Some(mut proto) = self.proto.borrow_mut().take() else {
                    return false;
                };
                let ok = self.call(lp, &mut proto, |p| p.connection_made(&t));
                *self.proto.borrow_mut() = Some(proto);
                if let Some(r) = resolver {
                    if ok {
                        r.callback_if_pending(t);
                    } else {
                        // `connection_made` panicked: the connect fails with
                        // that panic (the connection was closed with it).
                        let f = match &self.st.borrow().phase {
                            Phase::Closed(Some(f)) => f.clone(),
                            _ => Failure::new(Error::Gone),
                        };
                        r.errback_if_pending(f);
                    }
                }
                let mut st = self.st.borrow_mut();
                self.flush(lp, &mut st);
                self.after_drain(lp, &mut st);
                // A close made while connecting lingers from now on.
                self.arm_linger(lp, &mut st);
                true
            }
        }
    }

    /// Delivers pending `pause_writing` / `resume_writing` calls.
    fn notes(&self, lp: &Loop, t: &Transport, proto: &mut Box<dyn Protocol>) -> bool {
        loop {
            let note = {
                let mut st = self.st.borrow_mut();
                if st.phase.is_open() {
                    st.wbuf.flow.take_note()
                } else {
                    None
                }
            };
            let ok = match note {
                Some(true) => self.call(lp, proto, |p| p.pause_writing(t)),
                Some(false) => self.call(lp, proto, |p| p.resume_writing(t)),
                None => return true,
            };
            if !ok {
                return false;
            }
        }
    }

    /// Reads up to the connection's read budget (`Limits::read_budget`) in bytes, one `data_received`
    /// (or, into a buffer the protocol lends, one `buffer_updated`) per read.
    /// Returns whether the budget ran out with the socket still readable.
    fn read(&self, lp: &Loop, t: &Transport, proto: &mut Box<dyn Protocol>) -> (bool, bool) {
        enum Step {
            /// `(bytes, read on, yield)`: yield is a layer's budget spent.
            Data(usize, bool, bool),
            Eof,
            Stop,
            /// Nothing read, and the layer's budget spent: next turn.
            Yield,
            /// Interrupted: read again.
            Again,
        }
        let mut buf = core::take_read_buf();
        let mut budget = self.st.borrow().read_budget;
        let mut spent = false;
        let mut got = false;
        loop {
            let limit = {
                let st = self.st.borrow();
                if !st.can_read() {
                    break;
                }
                st.read_limit(budget, buffer::held_on_this_thread())
            };
            // A protocol that keeps its bytes in a buffer of its own lends it
            // (asyncio's BufferedProtocol): the read goes straight into it.
            let mut lent = None;
            if self.lends && !self.call(lp, proto, |p| lent = p.get_buffer(t, limit)) {
                break;
            }
            let step = 'read: {
                let mut st = self.st.borrow_mut();
                let st = &mut *st;
                if !st.can_read() {
                    break 'read Step::Stop;
                }
                let io = st.io.as_mut().expect("a readable stream has its io");
                let (read, limit) = match &mut lent {
                    Some(v) => {
                        if v.capacity() == v.len() {
                            v.reserve(limit);
                        }
                        let limit = limit.min(v.capacity() - v.len());
                        let read = io.read_into(v, limit).unwrap_or_else(|| {
                            let r = io.read(&mut buf[..limit]);
                            if let Ok(n) = r {
                                v.extend_from_slice(&buf[..n]);
                            }
                            r
                        });
                        (read, limit)
                    }
                    None => (io.read(&mut buf[..limit]), limit),
                };
                match read {
                    Ok(0) => {
                        st.write_ready |= io.input().writable;
                        st.read_ready = false;
                        st.eof_received = true;
                        Step::Eof
                    }
                    Ok(n) => {
                        lp.counters().received(n);
                        st.bytes_in += n as u64;
                        // A short read emptied the socket: the next data brings
                        // a new edge. Unless the peer's FIN was signalled: its
                        // edge is spent, so read on to the end-of-file. (Or a
                        // layer holds more, or spent its own budget: see
                        // `Wire::input`.)
                        let said = io.input();
                        st.write_ready |= said.writable;
                        if n < limit && !said.spent && !st.read_closed && !said.held {
                            st.read_ready = false;
                        }
                        Step::Data(n, st.read_ready, said.spent)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let said = io.input();
                        st.write_ready |= said.writable;
                        if said.spent {
                            Step::Yield
                        } else {
                            st.read_ready = false;
                            Step::Stop
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Again,
                    Err(e) => {
                        self.close_now(lp, st, Some(Failure::new(e)));
                        Step::Stop
                    }
                }
            };
            // A lent buffer goes back at once, with what the read appended.
            let lent_back = lent.is_some();
            if let Some(v) = lent {
                let n = if let Step::Data(n, ..) = step { n } else { 0 };
                if !self.call(lp, proto, |p| p.buffer_updated(t, v, n)) {
                    break;
                }
            }
            match step {
                Step::Data(n, more, yielded) => {
                    got = true;
                    if !lent_back && !self.call(lp, proto, |p| p.data_received(t, &buf[..n])) {
                        break;
                    }
                    budget -= n;
                    if budget == 0 || yielded {
                        spent = more;
                        break;
                    }
                    if !more {
                        break;
                    }
                }
                Step::Eof => {
                    let mut keep_open = false;
                    if self.call(lp, proto, |p| keep_open = p.eof_received(t)) {
                        // Both sides ended (`write_eof` was asked): a
                        // close, which sends what is left (a layer's too)
                        // within the linger time.
                        if !keep_open || self.st.borrow().eof_requested {
                            t.close();
                        }
                    }
                    break;
                }
                Step::Stop => break,
                Step::Again => {}
                Step::Yield => {
                    spent = true;
                    break;
                }
            }
        }
        core::put_read_buf(buf);
        (spent, got)
    }

    /// Flushes what the protocol wrote, delivers the notes it caused, then
    /// `connection_lost` if owed; else puts the protocol back.
    fn finish(&self, lp: &Loop, t: &Transport, mut proto: Box<dyn Protocol>) -> bool {
        let reason = loop {
            let mut st = self.st.borrow_mut();
            self.flush(lp, &mut st);
            if st.phase.is_open() && st.wbuf.flow.has_note() {
                drop(st);
                self.notes(lp, t, &mut proto);
                continue;
            }
            if let Phase::Closed(reason) = &mut st.phase {
                let reason = reason.take();
                st.phase = Phase::Lost;
                break reason;
            }
            let again = st.wants_dispatch();
            drop(st);
            *self.proto.borrow_mut() = Some(proto);
            return again;
        };
        self.lost(lp, t, &mut proto, reason);
        let garbage = lp.remove_source(self.key);
        drop((garbage, proto));
        self.run_on_lost();
        false
    }

    /// Calls `connection_lost`, containing (and reporting) a panic.
    fn lost(
        &self,
        lp: &Loop,
        t: &Transport,
        proto: &mut Box<dyn Protocol>,
        reason: Option<Failure>,
    ) {
        self.assert_unborrowed();
        let message = "Exception in protocol callback (connection_lost)";
        let _ = core::contain(lp, self.at, message, || proto.connection_lost(t, reason));
    }
}

/// A connection no longer held by the loop: one fewer in
/// [`Stats::connections_open`](crate::Stats::connections_open).
impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(lp) = self.lp.upgrade() {
            lp.counters().conn_dropped();
        }
    }
}

impl Source for Conn {
    fn dispatch(self: Rc<Self>, lp: &Loop, _key: SourceKey, ready: Ready) -> PostAction {
        let this = self;
        {
            let mut st = this.st.borrow_mut();
            st.read_ready |= ready.contains(Ready::READABLE);
            if ready.contains(Ready::WRITABLE) {
                // The peer took data: a stall of the write timeout is over.
                st.write_ready = true;
                st.stalled_since = None;
            }
            st.read_closed |= ready.contains(Ready::READ_CLOSED);
            // A hang-up or error while the connection is not being read (its
            // reading paused, a close flushing): a reset would otherwise go
            // unnoticed until the next read, which may never come.
            if ready.contains(Ready::READ_CLOSED) && !st.can_read() && st.phase.is_open() {
                let pending = st.io.as_mut().and_then(|io| io.take_error().ok().flatten());
                if let Some(e) = pending {
                    this.close_now(lp, &mut st, Some(Failure::new(e)));
                }
            }
        }
        if !this.finish_connect(lp) {
            return PostAction::Continue;
        }
        let Some(mut proto) = this.proto.borrow_mut().take() else {
            return PostAction::Continue;
        };
        this.dispatching.set(true);
        let t = this.transport();
        {
            let mut st = this.st.borrow_mut();
            this.flush(lp, &mut st);
        }
        let redeliver = {
            let mut st = this.st.borrow_mut();
            std::mem::take(&mut st.redeliver) && matches!(st.phase, Phase::Open)
        };
        let (again, got) = if this.notes(lp, &t, &mut proto)
            && (!redeliver || this.call(lp, &mut proto, |p| p.data_received(&t, &[])))
        {
            this.read(lp, &t, &mut proto)
        } else {
            (false, false)
        };
        if !got && !redeliver {
            // Quiet: an emptied write buffer gives its memory back, so an
            // idle connection costs a few KiB whatever it did before. (A
            // redelivery is not quiet: a framer is handing out a burst, and
            // its protocol answering. The TLS layer keeps no buffer of its
            // own once its records are out: tls/io.rs.)
            this.st.borrow_mut().wbuf.release_if_empty();
        }
        // Only bytes from the peer count for its idle timeout.
        if got {
            this.note_activity(lp);
        }
        let wants = this.finish(lp, &t, proto);
        this.watch_writes(lp);
        this.dispatching.set(false);
        if again || wants {
            PostAction::Again
        } else {
            PostAction::Continue
        }
    }

    fn close(self: Rc<Self>, lp: &Loop) {
        let (phase, connect, made) = {
            let mut st = self.st.borrow_mut();
            if let Some(mut io) = st.io.take() {
                lp.with_selector(|r| io.deregister(r));
            }
            (
                std::mem::replace(&mut st.phase, Phase::Lost),
                st.connect.take(),
                st.made,
            )
        };
        if let Some((Some(r), _)) = connect {
            r.errback_if_pending(LoopClosed);
        }
        let reason = match phase {
            Phase::Lost | Phase::Connecting => return,
            _ if !made => return,
            Phase::Closed(reason) | Phase::Closing(reason @ Some(_)) => reason,
            Phase::Open | Phase::Closing(None) => Some(Failure::new(LoopClosed)),
        };
        let Some(mut proto) = self.proto.borrow_mut().take() else {
            return;
        };
        let t = self.transport();
        self.lost(lp, &t, &mut proto, reason);
        drop(proto);
    }

    fn name(&self) -> &'static str {
        self.st
            .borrow()
            .io
            .as_ref()
            .map_or("stream (closed)", |io| io.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::core::io::{Input, Wire};
    use crate::net::SockAddr;
    use crate::reactor::Ready;
    use crate::EventLoop;
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;
    use std::panic::Location;

    /// A layer whose reads follow a script: `Some(data)`, or `None` for
    /// "nothing yet, my budget is spent" (`Input::spent`); then `WouldBlock`.
    struct Scripted {
        script: VecDeque<Option<&'static [u8]>>,
        spent: bool,
        key: Rc<Cell<Option<SourceKey>>>,
    }

    impl Wire for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.script.pop_front() {
                Some(Some(data)) => {
                    buf[..data.len()].copy_from_slice(data);
                    Ok(data.len())
                }
                Some(None) => {
                    self.spent = true;
                    Err(io::ErrorKind::WouldBlock.into())
                }
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            Ok(data.len())
        }
        fn shutdown_write(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn peer_addr(&self) -> io::Result<SockAddr> {
            Ok(SockAddr::Unix(None))
        }
        fn local_addr(&self) -> io::Result<SockAddr> {
            Ok(SockAddr::Unix(None))
        }
        fn register(&mut self, _: &mio::Registry, token: mio::Token) -> io::Result<()> {
            self.key.set(Some(SourceKey::from_token(token)));
            Ok(())
        }
        fn deregister(&mut self, _: &mio::Registry) {}
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn input(&mut self) -> Input {
            Input {
                spent: std::mem::take(&mut self.spent),
                ..Input::default()
            }
        }
    }

    struct Got(Rc<RefCell<Vec<u8>>>);

    impl Protocol for Got {
        fn data_received(&mut self, _: &Transport, data: &[u8]) {
            self.0.borrow_mut().extend_from_slice(data);
        }
    }

    /// A connection over a `Scripted` layer, and one readable edge.
    struct Setup {
        ev: EventLoop,
        got: Rc<RefCell<Vec<u8>>>,
    }

    fn setup(script: &[Option<&'static [u8]>]) -> Setup {
        let ev = EventLoop::new().unwrap();
        let lp = ev.to_loop();
        let key = Rc::new(Cell::new(None));
        let io = Scripted {
            script: script.iter().copied().collect(),
            spent: false,
            key: key.clone(),
        };
        let got = Rc::new(RefCell::new(Vec::new()));
        let proto = Box::new(Got(got.clone()));
        let conn = Conn::open(&lp, Box::new(io), proto, None, Location::caller()).unwrap();
        conn.start(&lp);
        lp.wake_source(key.get().unwrap(), Ready::READABLE);
        Setup { ev, got }
    }

    fn turns(ev: &EventLoop, n: usize) {
        for _ in 0..n {
            ev.run_once_timeout(std::time::Duration::from_millis(10))
                .unwrap();
        }
    }

    /// No protocol method runs with the state borrowed: checked in one
    /// place, `Conn::call`.
    #[test]
    #[should_panic(expected = "with the connection's state borrowed")]
    fn a_protocol_method_never_runs_with_the_state_borrowed() {
        let ev = EventLoop::new().unwrap();
        let lp = ev.to_loop();
        let io = Scripted {
            script: VecDeque::new(),
            spent: false,
            key: Rc::default(),
        };
        let got = Rc::new(RefCell::new(Vec::new()));
        let conn = Conn::open(
            &lp,
            Box::new(io),
            Box::new(Got(got)),
            None,
            Location::caller(),
        );
        let conn = conn.unwrap();
        let mut proto: Box<dyn Protocol> = Box::new(Got(Rc::default()));
        let _held = conn.st.borrow();
        conn.call(&lp, &mut proto, |_| {});
    }

    /// A layer that spent its budget before any plaintext came out is read
    /// again in the next turns without a new edge from the socket (which
    /// may never come: the rest is already in it).
    #[test]
    fn a_layer_that_spent_its_budget_is_read_again_next_turn() {
        let s = setup(&[None, None, Some(&b"hi"[..])]);
        turns(&s.ev, 4);
        assert_eq!(*s.got.borrow(), b"hi");
    }
}
