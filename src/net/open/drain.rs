//! Stopping a listener gracefully: [`Listener::shutdown`] (stop accepting,
//! let the open connections finish, abort them at a deadline) and
//! [`Listener::shutdown_now`], both with a Deferred that says when the last
//! connection is gone. Owns `Tracker`, the set of a listener's open
//! connections, which outlives the listening socket. Tests: tests/shutdown_*.rs.
//!
//! asyncio's `Server.wait_closed()` waited for connections with no deadline
//! and hung for years (cpython #104344); here every wait has one.

use crate::net::core::conn::Conn;
use crate::net::{Listener, Transport};
use crate::{succeed, Deferred, Failure, Resolver};
use slab::Slab;
use std::cell::RefCell;
use std::io;
use std::rc::Weak;
use std::time::Duration;

/// The accepted connections of one listener that are still open, and who
/// waits for there to be none.
#[derive(Default)]
pub(crate) struct Tracker {
    slab: RefCell<Slab<Weak<Conn>>>,
    idle: RefCell<Vec<Resolver<()>>>,
}

impl Tracker {
    pub(crate) fn insert(&self, conn: Weak<Conn>) -> usize {
        self.slab.borrow_mut().insert(conn)
    }

    /// A connection is gone; the last one fires the waiters.
    pub(crate) fn remove(&self, slot: usize) {
        let empty = {
            let mut slab = self.slab.borrow_mut();
            slab.try_remove(slot);
            slab.is_empty()
        };
        if empty {
            let waiters = std::mem::take(&mut *self.idle.borrow_mut());
            for r in waiters {
                r.callback_if_pending(());
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.borrow().len()
    }

    pub(crate) fn transports(&self) -> Vec<Transport> {
        self.slab
            .borrow()
            .iter()
            .map(|(_, c)| Transport::from_weak(c.clone()))
            .collect()
    }

    /// Fires once no connection is open (at once if none is).
    fn when_empty(&self) -> Deferred<()> {
        if self.len() == 0 {
            return succeed(());
        }
        let (d, r) = Deferred::new();
        self.idle.borrow_mut().push(r);
        d
    }
}

impl Listener {
    /// Stops accepting (as [`stop_listening`](Self::stop_listening)) and lets
    /// the open connections finish: the Deferred fires when the last one is
    /// gone. Those still open after `deadline` are aborted (their protocols
    /// hear `connection_lost` with a `TimedOut` error), so it never takes
    /// much longer than `deadline`. `Duration::ZERO` aborts them at once.
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::{Protocol, Transport};
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// struct Echo;
    /// impl Protocol for Echo {
    ///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
    ///         t.write(data);
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let listener = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)?;
    /// // … later, on SIGTERM:
    /// ev.run_until(listener.shutdown(Duration::from_secs(10)))?;
    /// assert!(!listener.is_listening());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn shutdown(&self, deadline: Duration) -> Deferred<()> {
        let lp = self.src.upgrade().and_then(|s| s.lp.upgrade());
        let _ = self.stop_listening();
        let done = self.conns.when_empty();
        let lp = lp.or_else(|| self.connections().iter().find_map(Transport::event_loop));
        let Some(lp) = lp else { return done };
        if done.is_called() {
            return done;
        }
        let conns = std::rc::Rc::downgrade(&self.conns);
        let timer = lp.call_later(deadline, move |_| {
            let Some(conns) = conns.upgrade() else { return };
            for t in conns.transports() {
                t.abort_with(Failure::new(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("still open at the shutdown deadline ({deadline:?})"),
                )));
            }
        });
        done.add_both(move |r| {
            if let Ok(h) = timer {
                h.cancel();
            }
            r
        })
    }

    /// Stops accepting and closes every open connection now (each flushes
    /// what it has buffered first, as [`Transport::close`] does); the
    /// Deferred fires when the last one is gone.
    #[track_caller]
    pub fn shutdown_now(&self) -> Deferred<()> {
        let _ = self.stop_listening();
        for t in self.connections() {
            t.close();
        }
        self.conns.when_empty()
    }
}
