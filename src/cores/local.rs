//! A pool loop's own part: the listeners and connections it serves, the
//! hand-off acceptor, and the drain. Everything here stays on its loop's
//! thread (a thread-local); only `Send` closures reach it through `Peers`.

use super::{Factory, Hook, Peers, Spec, Spread};
use crate::net::{Listener, SockAddr, Transport};
use crate::reactor::ExceptionContext;
use crate::timers::later;
use crate::{Error, Failure, Loop};
use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::io::{AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// This loop's share of the pool's listeners and connections.
pub(super) struct Local {
    grace: Duration,
    on_drain: Option<Hook>,
    listeners: Vec<Listener>,
    /// `HandOff` sockets this loop accepts from (loop 0), as reader fds.
    acceptors: Vec<(RawFd, Rc<TcpListener>)>,
    /// Connections handed to this loop.
    adopted: Vec<Transport>,
    pruned_at: usize,
    draining: bool,
}

impl Local {
    pub(super) fn new(grace: Duration, on_drain: Option<Hook>) -> Local {
        Local {
            grace,
            on_drain,
            listeners: Vec::new(),
            acceptors: Vec::new(),
            adopted: Vec::new(),
            pruned_at: 0,
            draining: false,
        }
    }
}

thread_local! {
    pub(super) static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

pub(super) fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    LOCAL.with(|l| l.borrow_mut().as_mut().map(f))
}

/// Installs this loop's part of a listener.
pub(super) fn install(lp: &Loop, peers: &Peers, spec: &Spec) -> Result<(), Error> {
    let i = peers.index;
    match spec.spread {
        Spread::ReusePort => {
            let sock = spec.socks.lock().unwrap_or_else(|e| e.into_inner())[i]
                .take()
                .expect("one socket per loop");
            let f = spec.factory.clone();
            let l = lp.listen_tcp_boxed(sock, Box::new(move |peer| f(peer)), Location::caller())?;
            with_local(|loc| loc.listeners.push(l));
        }
        Spread::HandOff if i == 0 => {
            let sock = spec.socks.lock().unwrap_or_else(|e| e.into_inner())[0]
                .take()
                .expect("one socket");
            sock.set_nonblocking(true)?;
            let sock = Rc::new(sock);
            let fd = sock.as_raw_fd();
            let (f, peers, s) = (spec.factory.clone(), peers.clone(), sock.clone());
            let mut next = 0usize;
            lp.add_reader(fd, move |lp| {
                accept_batch(lp, &s, &peers, &f, &mut next);
            })?;
            with_local(|loc| loc.acceptors.push((fd, sock)));
        }
        Spread::HandOff => {}
    }
    Ok(())
}

/// Accepts what is waiting (at most a batch) and hands each connection to
/// the next loop in turn. A failing accept is reported and ends the batch;
/// the reader is level-triggered, so exhaustion is retried a second later.
fn accept_batch(lp: &Loop, sock: &Rc<TcpListener>, peers: &Peers, f: &Factory, next: &mut usize) {
    for _ in 0..crate::net::Limits::DEFAULT.accept_batch {
        match sock.accept() {
            Ok((s, peer)) => {
                let to = *next % peers.len();
                *next = next.wrapping_add(1);
                if to == peers.index {
                    adopt(lp, s, peer, f);
                } else {
                    let f = f.clone();
                    if let Err(e) = peers.call(to, move |lp| adopt(lp, s, peer, &f)) {
                        // Loop `to` has ended: the connection went with the call.
                        let what = "a connection accepted for a loop that has ended was dropped";
                        report(lp, what, Failure::new(e));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                report(lp, "accept failed; accepting again in 1 s", Failure::new(e));
                let fd = sock.as_raw_fd();
                lp.remove_reader(fd);
                let (s, peers, f, at) = (sock.clone(), peers.clone(), f.clone(), *next);
                let _ = lp.call_later(crate::net::Limits::DEFAULT.accept_retry_delay, move |lp| {
                    if with_local(|l| l.draining) == Some(false) {
                        let mut next = at;
                        let s2 = s.clone();
                        let again = lp
                            .add_reader(fd, move |lp| accept_batch(lp, &s2, &peers, &f, &mut next));
                        if let Err(e) = again {
                            report(
                                lp,
                                "accepting stopped: the listener could not be watched again",
                                Failure::new(e),
                            );
                        }
                    }
                });
                return;
            }
        }
    }
}

/// Serves a connection handed to this loop.
fn adopt(lp: &Loop, s: std::net::TcpStream, peer: SocketAddr, f: &Factory) {
    if with_local(|l| l.draining) != Some(false) {
        return; // draining, or not a pool loop any more: the socket closes
    }
    let at = Location::caller();
    let proto = match catch_unwind(AssertUnwindSafe(|| f(&SockAddr::Inet(peer)))) {
        Ok(p) => p,
        Err(payload) => {
            let failure = Failure::from_panic(payload, at);
            return report(lp, "Exception in protocol factory", failure);
        }
    };
    match lp.adopt_boxed(s, proto, at) {
        Ok(t) => {
            with_local(|l| {
                l.adopted.push(t);
                if l.adopted.len() >= 2 * l.pruned_at.max(64) {
                    l.adopted.retain(|t| t.conn.strong_count() > 0);
                    l.pruned_at = l.adopted.len();
                }
            });
        }
        Err(e) => report(
            lp,
            "taking over a handed connection failed",
            Failure::new(e),
        ),
    }
}

fn report(lp: &Loop, message: &str, failure: Failure) {
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(&failure),
        location: None,
    });
}

/// Drains this loop: stop accepting, tell the user, wait for connections to
/// close (at most the grace period), abort the rest, stop. Idempotent.
pub(super) fn drain(lp: &Loop) {
    let taken = with_local(|l| {
        if std::mem::replace(&mut l.draining, true) {
            return None;
        }
        let mut conns = std::mem::take(&mut l.adopted);
        for li in l.listeners.drain(..) {
            conns.extend(li.connections());
            let _fired = li.stop_listening();
        }
        let acceptors = std::mem::take(&mut l.acceptors);
        Some((conns, acceptors, l.on_drain.clone(), l.grace))
    });
    let Some(Some((conns, acceptors, hook, grace))) = taken else {
        if taken.is_none() {
            lp.stop(); // not a pool loop (any more)
        }
        return;
    };
    for (fd, sock) in acceptors {
        lp.remove_reader(fd);
        drop(sock);
    }
    if let Some(hook) = hook {
        hook(lp);
    }
    let deadline = later(Instant::now(), grace);
    wait_closed(lp, conns, deadline);
}

/// Stops once `conns` have all closed, or aborts them at `deadline`.
fn wait_closed(lp: &Loop, mut conns: Vec<Transport>, deadline: Instant) {
    conns.retain(|t| t.conn.strong_count() > 0);
    if conns.is_empty() {
        lp.stop();
        return;
    }
    if Instant::now() >= deadline {
        for t in &conns {
            t.abort();
        }
        // Their `connection_lost` runs in the next turn; stop after it.
        let _ = lp.call_soon(|lp| lp.stop());
        return;
    }
    let _ = lp.call_later(Duration::from_millis(10), move |lp| {
        wait_closed(lp, conns, deadline);
    });
}
