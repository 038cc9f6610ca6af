//! `ss` for [`ps`](crate::ps): the loop's stream connections, as rows of
//! [`Connection`]. Owns the per-thread list of the
//! connections opened while the Deferred registry is on.
//!
//! The whole net-side hook is `track` (one call in `Conn::open`) and `list`,
//! which asks each connection for its row (the `Row` trait, which `Conn`
//! implements in `conn.rs`: this file imports nothing of the core's, and
//! `ps` nothing of `net/` but this file). Its bytes in and out are two
//! counters the read and write paths add to (one addition a read or
//! write); the idle time of a connection without an idle timeout is not
//! known. Tests: tests/ps_net_waits.rs.

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Instant;

/// One stream connection, for `ss`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Connection {
    /// The peer's address (while connecting: the address connected to).
    pub peer: String,
    /// `connecting`, `open`, `closing` or `closed`.
    pub state: &'static str,
    /// Bytes written by the protocol and not yet taken by the socket.
    pub write_buffered: usize,
    /// Bytes received and handed to the protocol, in all (over TLS: the
    /// plaintext).
    pub bytes_in: u64,
    /// Bytes the protocol wrote that the socket took, in all (over TLS: the
    /// plaintext); what waits in `write_buffered` is not counted yet.
    pub bytes_out: u64,
    /// Reading is paused (by the protocol, a framer, or backpressure).
    pub reading_paused: bool,
    /// Writing is paused: the protocol was told to stop producing.
    pub writing_paused: bool,
    /// With an idle timeout set: how long since data last arrived, and the
    /// timeout.
    pub idle: Option<(std::time::Duration, std::time::Duration)>,
    /// Where it was opened (listened for, or connected from).
    pub opened_at: &'static std::panic::Location<'static>,
}

/// A connection as `ss` reads it (the core's `Conn`, `conn.rs`).
pub(crate) trait Row {
    /// Its row at `now`; `None` once it is lost (or while its state is
    /// borrowed, which no `ss` made between turns meets).
    fn row(&self, now: Instant) -> Option<Connection>;
}

thread_local! {
    static CONNS: RefCell<Vec<Weak<dyn Row>>> = const { RefCell::new(Vec::new()) };
}

/// Lists `conn` for `ss`, if the registry is on.
#[inline]
pub(crate) fn track<C: Row + 'static>(conn: &Rc<C>) {
    if crate::deferred::registry::on() {
        CONNS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() == c.capacity() {
                c.retain(|w| w.strong_count() > 0);
            }
            c.push(Rc::downgrade(conn) as Weak<dyn Row>);
        });
    }
}

/// The connections still in the loop, oldest first.
pub(crate) fn list(now: Instant) -> Vec<Connection> {
    CONNS.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|w| w.strong_count() > 0);
        c.iter()
            .filter_map(Weak::upgrade)
            .filter_map(|conn| conn.row(now))
            .collect()
    })
}
