//! A stream connection's state, `ConnState`, and the rules read from it:
//! whether a read may be made now, and whether a dispatch has work. The
//! connection itself, and the write path, are `conn.rs`.

use crate::net::core::buffer::{WriteBuf, GROWTH_ALLOWANCE};
use crate::net::core::io::Wire;
use crate::net::core::{Phase, READ_BUFFER_SIZE};
use crate::net::{Limits, Transport};
use crate::{Failure, Handle, Resolver};
use std::time::{Duration, Instant};

/// A read while bytes are buffered takes at least this much (and otherwise no
/// more than what is left below the high-water mark).
const MIN_READ: usize = 4096;

/// The state of one stream connection. Borrowed only while no user code runs.
pub(crate) struct ConnState {
    pub(super) io: Option<Box<dyn Wire>>,
    pub(super) phase: Phase,
    /// While connecting: the Deferred to fire, and what errors name as the
    /// destination (an address, or the host name being connected to).
    pub(super) connect: Option<(Option<Resolver<Transport>>, String)>,
    pub(super) wbuf: WriteBuf,
    pub(super) read_ready: bool,
    /// The peer's FIN (or a hang-up) was signalled: read until end-of-file,
    /// even after a short read.
    pub(super) read_closed: bool,
    pub(super) write_ready: bool,
    /// Bytes written since the socket last refused a write (over TLS: since
    /// it last refused the layer's records): how far the peer has shown it
    /// keeps up, what lets a read take more than the high-water mark allows
    /// (see `dispatch::read`). Zero after a refusal.
    pub(super) took: usize,
    pub(super) reading_paused: bool,
    /// A framer's own pause (`Transport::hold_reading`), apart from the
    /// protocol's: neither undoes the other.
    pub(super) held: bool,
    /// Keep reading while writing is paused (off: backpressure by default).
    pub(super) read_while_write_paused: bool,
    pub(super) eof_received: bool,
    pub(super) eof_requested: bool,
    pub(super) eof_written: bool,
    /// `connection_made` was called, so `connection_lost` is owed.
    pub(super) made: bool,
    pub(super) dropped_writes: u64,
    /// The turn of the last write made straight to the socket: later writes
    /// in the same turn are coalesced in the buffer.
    pub(super) direct_turn: u64,
    pub(super) cap: usize,
    /// Bytes one dispatch reads at most (`Limits::read_budget`).
    pub(super) read_budget: usize,
    pub(super) linger: Duration,
    pub(super) linger_timer: Option<Handle>,
    /// Fails the connect if it is not up in time.
    pub(super) connect_timer: Option<Handle>,
    /// The protocol asked for a `data_received` with no new bytes.
    pub(super) redeliver: bool,
    /// Abort after this long without data (Twisted's `TimeoutMixin`).
    pub(super) idle_timeout: Option<Duration>,
    pub(super) idle_timer: Option<Handle>,
    /// When data last arrived (only kept while an idle timeout is set).
    pub(super) last_read: Instant,
    /// Abort when the peer takes none of the waiting output for this long.
    pub(super) write_timeout: Option<Duration>,
    pub(super) write_timer: Option<Handle>,
    /// Since when output has waited on a socket that said `WouldBlock` (and
    /// gave no writable edge since): see `deadlines.rs`.
    pub(super) stalled_since: Option<Instant>,
    /// What the layer had sent when the stall began (`Output::sent`):
    /// it also sends outside the core's flush (a write, an EOF, a read).
    pub(super) stall_sent: Option<u64>,
    /// `close()` called while connecting: the reason, to close with once up.
    pub(super) close_when_up: Option<Option<Failure>>,
    /// Bytes read from the wire and handed to the protocol, in all (over
    /// TLS: plaintext); for `ss`.
    pub(super) bytes_in: u64,
    /// Bytes of the protocol's the wire took, in all (over TLS: plaintext);
    /// for `ss`. What waits in the buffer is not counted yet.
    pub(super) bytes_out: u64,
}

impl ConnState {
    /// A new stream's state: connected (`connect` is `None`) or
    /// connecting to what `connect` names.
    pub(crate) fn new(io: Box<dyn Wire>, connect: Option<String>) -> ConnState {
        ConnState {
            io: Some(io),
            phase: if connect.is_some() {
                Phase::Connecting
            } else {
                Phase::Open
            },
            connect: connect.map(|to| (None, to)),
            wbuf: WriteBuf::default(),
            read_ready: false,
            read_closed: false,
            write_ready: false,
            took: 0,
            reading_paused: false,
            held: false,
            read_while_write_paused: false,
            eof_received: false,
            eof_requested: false,
            eof_written: false,
            made: false,
            dropped_writes: 0,
            direct_turn: u64::MAX,
            cap: Limits::DEFAULT.write_buffer_cap,
            read_budget: Limits::DEFAULT.read_budget,
            linger: Limits::DEFAULT.linger,
            linger_timer: None,
            close_when_up: None,
            redeliver: false,
            connect_timer: None,
            idle_timeout: None,
            idle_timer: None,
            last_read: Instant::now(),
            write_timeout: Limits::DEFAULT.write_timeout,
            write_timer: None,
            stalled_since: None,
            stall_sent: None,
            bytes_in: 0,
            bytes_out: 0,
        }
    }

    /// May we read now: open, readable, neither the protocol nor a framer
    /// paused reading, no end-of-file yet, and writing not paused (unless
    /// the protocol reads through its own backpressure). The one place this
    /// is decided: the dispatch reads only while it holds, and a dispatch is
    /// wanted when it does (`wants_dispatch`).
    pub(crate) fn can_read(&self) -> bool {
        matches!(self.phase, Phase::Open)
            && self.read_ready
            && !self.reading_paused
            && !self.held
            && !self.eof_received
            && (!self.wbuf.flow.is_paused() || self.read_while_write_paused)
            && self.io.is_some()
    }

    /// The read bound: how many bytes the next read may take, with `budget`
    /// left of this dispatch's and `held` bytes in the write buffers of this
    /// thread's connections.
    ///
    /// Backpressure: a read takes no more than the write side can absorb
    /// below its high-water mark, so a peer that stops reading what it is
    /// sent leaves at most about one high-water mark buffered, not a whole
    /// read budget more. What was written since the socket last refused a
    /// write (`took`) shows how far the peer keeps up (or its kernel does):
    /// a read may take twice that, when that is over the mark, and at most
    /// the budget, so a message the peer took is one short read, not one
    /// per mark, as long as this thread's connections hold less than
    /// `GROWTH_ALLOWANCE` in write buffers. Peers that then stop reading pin
    /// at most that allowance beyond one mark each. A protocol that handles
    /// its own backpressure reads the full budget.
    pub(crate) fn read_limit(&self, budget: usize, held: usize) -> usize {
        if self.read_while_write_paused {
            return budget.min(READ_BUFFER_SIZE);
        }
        let (_, high) = self.wbuf.flow.limits();
        let grown = self.took.saturating_mul(2).min(budget);
        let room = if grown > high && held.saturating_add(grown) <= GROWTH_ALLOWANCE {
            grown
        } else {
            high
        };
        room.saturating_sub(self.wbuf.len())
            .max(MIN_READ)
            .min(budget)
            .min(READ_BUFFER_SIZE)
    }

    /// Whether output waits: in the buffer, or a layer's own.
    pub(crate) fn has_output(&self) -> bool {
        !self.wbuf.is_empty() || self.layer_pending()
    }

    /// A layer (TLS) has output of its own: records the socket refused, or
    /// its close_notify.
    pub(crate) fn layer_pending(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.output().pending)
    }

    pub(crate) fn accepts_writes(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Connecting) && !self.eof_requested
    }

    /// The peer, for a log record's `peer` field: its address, or while
    /// connecting the target, or `"-"`.
    pub(super) fn peer(&self) -> String {
        match (&self.connect, self.io.as_ref().map(|io| io.peer_addr())) {
            (Some((_, to)), _) => to.clone(),
            (None, Some(Ok(a))) => a.to_string(),
            _ => "-".to_owned(),
        }
    }

    /// Whether a dispatch would have work to do right now.
    pub(crate) fn wants_dispatch(&self) -> bool {
        self.can_read()
            || (self.redeliver && matches!(self.phase, Phase::Open))
            || matches!(self.phase, Phase::Closed(_))
            || (self.phase.is_open() && self.wbuf.flow.has_note())
            || (self.write_ready && self.io.is_some() && self.has_output())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::SockAddr;
    use std::io;

    /// A wire that is never ready: only the state's rules are under test.
    struct Idle;

    impl Wire for Idle {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
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
        fn register(&mut self, _: &mio::Registry, _: mio::Token) -> io::Result<()> {
            Ok(())
        }
        fn deregister(&mut self, _: &mio::Registry) {}
        fn name(&self) -> &'static str {
            "idle"
        }
    }

    fn open_readable() -> ConnState {
        let mut st = ConnState::new(Box::new(Idle), None);
        st.read_ready = true;
        st
    }

    #[test]
    fn a_read_is_made_only_while_every_condition_holds() {
        let st = open_readable();
        assert!(st.can_read() && st.wants_dispatch());
        type Spoil = fn(&mut ConnState);
        let spoilers: [Spoil; 7] = [
            |st| st.read_ready = false,
            |st| st.reading_paused = true,
            |st| st.held = true,
            |st| st.eof_received = true,
            |st| st.phase = Phase::Connecting,
            |st| st.phase = Phase::Closing(None),
            |st| st.io = None,
        ];
        for spoil in spoilers {
            let mut st = open_readable();
            spoil(&mut st);
            assert!(!st.can_read());
        }
        // Writing paused stops reads, unless the protocol reads through it.
        let mut st = open_readable();
        st.wbuf.push(&vec![0; 128 * 1024]);
        assert!(st.wbuf.flow.is_paused() && !st.can_read());
        st.read_while_write_paused = true;
        assert!(st.can_read());
    }

    #[test]
    fn the_read_bound_keeps_to_the_mark_unless_the_peer_keeps_up() {
        let budget = 256 * 1024;
        let mut st = open_readable();
        let (_, high) = st.wbuf.flow.limits();
        // Nothing buffered, nothing taken: one high-water mark.
        assert_eq!(st.read_limit(budget, 0), high);
        // Bytes buffered leave less room, but never below one page.
        st.wbuf.push(&vec![0; high - 1000]);
        assert_eq!(st.read_limit(budget, 0), MIN_READ);
        st.wbuf.clear();
        // A peer that took 100 KiB lets a read take twice that...
        st.took = 100 * 1024;
        assert_eq!(st.read_limit(budget, 0), 200 * 1024);
        // ...within the budget...
        assert_eq!(st.read_limit(150 * 1024, 0), 150 * 1024);
        // ...and while the thread's buffers leave room to grow.
        assert_eq!(st.read_limit(budget, GROWTH_ALLOWANCE), high);
        // A protocol with its own backpressure reads the whole budget.
        st.took = 0;
        st.read_while_write_paused = true;
        assert_eq!(st.read_limit(budget, 0), budget);
        assert_eq!(st.read_limit(usize::MAX, 0), READ_BUFFER_SIZE);
    }
}
