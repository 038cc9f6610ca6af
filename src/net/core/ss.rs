//! `ss` for [`ps`](crate::ps): the loop's stream connections, as rows of
//! [`Connection`]. Owns the per-thread list of the
//! connections opened while the Deferred registry is on.
//!
//! The whole net-side hook is `track` (one call in `Conn::open`) and `list`,
//! which reads each connection's state; nothing is counted on the read or
//! write paths, so bytes in/out and the idle time of a connection without an
//! idle timeout are not known. Tests: tests/ps_net_waits.rs.

use super::conn::Conn;
use super::Phase;
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

thread_local! {
    static CONNS: RefCell<Vec<Weak<Conn>>> = const { RefCell::new(Vec::new()) };
}

/// Lists `conn` for `ss`, if the registry is on.
#[inline]
pub(crate) fn track(conn: &Rc<Conn>) {
    if crate::deferred::registry::on() {
        CONNS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() == c.capacity() {
                c.retain(|w| w.strong_count() > 0);
            }
            c.push(Rc::downgrade(conn));
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
            .filter_map(|conn| row(&conn, now))
            .collect()
    })
}

fn row(conn: &Conn, now: Instant) -> Option<Connection> {
    let st = conn.st.try_borrow().ok()?;
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
    Some(Connection {
        peer,
        state,
        write_buffered: st.wbuf.len(),
        reading_paused: st.reading_paused || st.held,
        writing_paused: st.wbuf.flow.is_paused(),
        idle: st
            .idle_timeout
            .map(|limit| (now.saturating_duration_since(st.last_read), limit)),
        opened_at: conn.at,
    })
}
