//! A simulated host's sockets as the connection core sees them: a stream
//! [`Wire`] with no file descriptor (`SimWire`), a listening socket
//! (`SimListen`), and the hooks `Loop::connect_tcp` and `Loop::listen_tcp`
//! call, which find the simulated host a loop belongs to.
//!
//! The hooks cost one thread-local look at an empty list on a thread that
//! runs no simulation; without the `sim` feature they do not exist.

use crate::net::Wire;
use crate::net::{SockAddr, Target};
use crate::reactor::{Ready, SourceKey};
use crate::sim::net::{trace, End, EndRef, Ev, HostId, ListenQ, Net, Seg};
use crate::Loop;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};

/// A simulated host's loop (its `addr_id`), its network and its number.
type HostEntry = (usize, Weak<RefCell<Net>>, HostId);

thread_local! {
    /// The loops of the simulated hosts on this thread.
    static HOSTS: RefCell<Vec<HostEntry>> = const { RefCell::new(Vec::new()) };
}

pub(crate) fn register(lp: &Loop, net: &Rc<RefCell<Net>>, host: HostId) {
    HOSTS.with(|h| {
        h.borrow_mut()
            .push((lp.addr_id(), Rc::downgrade(net), host))
    });
}

pub(crate) fn unregister(net: &Rc<RefCell<Net>>, host: HostId) {
    let net = Rc::downgrade(net);
    HOSTS.with(|h| {
        h.borrow_mut()
            .retain(|(_, n, id)| !(Weak::ptr_eq(n, &net) && *id == host));
    });
}

/// The simulated host `lp` belongs to, if any.
pub(crate) fn host_of(lp: &Loop) -> Option<(Rc<RefCell<Net>>, HostId)> {
    HOSTS.with(|h| {
        let h = h.borrow();
        if h.is_empty() {
            return None;
        }
        let id = lp.addr_id();
        h.iter()
            .find(|(l, _, _)| *l == id)
            .and_then(|(_, n, host)| Some((n.upgrade()?, *host)))
    })
}

/// A host name on a simulated host: the simulated host of that name, at
/// its address (`"backup:7001"`); any other target as it is (a name no
/// simulated host has goes to the real resolver).
pub(crate) fn resolve(lp: &Loop, target: Target) -> Target {
    if target.as_addr().is_some() {
        return target;
    }
    let Some((net, _)) = host_of(lp) else {
        return target;
    };
    let Ok((name, port)) = target.parts() else {
        return target;
    };
    let n = net.borrow();
    match n.hosts.iter().find(|h| h.name == name) {
        Some(h) => Target::from(SocketAddr::new(h.ip, port)),
        None => target,
    }
}

/// `Loop::connect_tcp` on a simulated host: a socket connecting over the
/// simulated network; `None` on any other loop.
pub(crate) fn connect(lp: &Loop, to: SocketAddr) -> Option<io::Result<Box<dyn Wire>>> {
    let (net, host) = host_of(lp)?;
    let mut n = net.borrow_mut();
    let Some(dst) = n.host_by_ip(host, to.ip()) else {
        trace!(n, "{} connect {to}: no route", n.name(host));
        return Some(Err(io::ErrorKind::HostUnreachable.into()));
    };
    let port = n.ephemeral_port(host);
    let local = SocketAddr::new(n.hosts[host].ip, port);
    let end = Rc::new(RefCell::new(End::new(host, local, to, lp.downgrade())));
    n.hosts[host].ends.push(Rc::downgrade(&end));
    trace!(n, "{} {local} > {to} connect", n.name(host));
    n.send(
        host,
        dst,
        0,
        Ev::Syn {
            client: end.clone(),
            to,
        },
    );
    drop(n);
    Some(Ok(Box::new(SimWire { end, net })))
}

/// `Loop::listen_tcp` on a simulated host: a listening port of the
/// simulated network; `None` on any other loop.
pub(crate) fn listen(lp: &Loop, addr: SocketAddr) -> Option<io::Result<(SimListen, SockAddr)>> {
    let (net, host) = host_of(lp)?;
    let mut n = net.borrow_mut();
    let local = match n.bind(host, addr, |h, p| h.listeners.contains_key(&p)) {
        Ok(local) => local,
        Err(e) => return Some(Err(e)),
    };
    let q = Rc::new(RefCell::new(ListenQ {
        host,
        addr: local,
        backlog: VecDeque::new(),
        open: true,
        key: None,
        lp: lp.downgrade(),
    }));
    n.hosts[host].listeners.insert(local.port(), q.clone());
    trace!(n, "{} listen {local}", n.name(host));
    drop(n);
    Some(Ok((SimListen { q, net }, SockAddr::Inet(local))))
}

/// Signals `ready` to a source being registered: in a callback of its own,
/// as the loop's source table is borrowed while a source registers.
pub(crate) fn kick(lp: &crate::reactor::WeakLoop, token: mio::Token, ready: Ready) {
    if let Some(lp) = lp.upgrade() {
        let key = SourceKey::from_token(token);
        let _ = lp.call_soon(move |lp| lp.wake_source(key, ready));
    }
}

/// One end of a simulated stream, driven by the connection core.
pub(crate) struct SimWire {
    end: EndRef,
    net: Rc<RefCell<Net>>,
}

impl Wire for SimWire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut e = self.end.borrow_mut();
        if e.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if e.inbound.is_empty() {
            return if e.peer_eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(e.inbound.len());
        let (a, b) = e.inbound.as_slices();
        let k = n.min(a.len());
        buf[..k].copy_from_slice(&a[..k]);
        buf[k..n].copy_from_slice(&b[..n - k]);
        e.inbound.drain(..n);
        // The window opens: a writer that found it full hears of it one
        // latency later, as it would from the ACK.
        if let Some(peer) = e.peer.upgrade() {
            let mut p = peer.borrow_mut();
            p.unacked = p.unacked.saturating_sub(n);
            if p.blocked {
                let dst = p.host;
                drop(p);
                self.net
                    .borrow_mut()
                    .send_control(e.host, dst, Ev::Window { to: peer });
            }
        }
        Ok(n)
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut e = self.end.borrow_mut();
        if e.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if e.eof_sent {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if !e.connected {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = self.net.borrow_mut();
        let room = n.window.saturating_sub(e.unacked);
        let k = room.min(data.len());
        if k == 0 && !data.is_empty() {
            e.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let Some(peer) = e.peer.upgrade() else {
            return Err(io::ErrorKind::ConnectionReset.into());
        };
        e.unacked += k;
        let seq = e.next_seq();
        let dst = peer.borrow().host;
        trace!(
            n,
            "{} {} > {} {k} bytes",
            n.name(e.host),
            e.local,
            e.peer_addr
        );
        let ev = Ev::Seg {
            to: peer,
            seq,
            seg: Seg::Data(data[..k].to_vec()),
        };
        n.send(e.host, dst, k, ev);
        Ok(k)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        let mut e = self.end.borrow_mut();
        if e.eof_sent || e.reset {
            return Ok(());
        }
        e.eof_sent = true;
        if let Some(peer) = e.peer.upgrade() {
            let seq = e.next_seq();
            let dst = peer.borrow().host;
            let mut n = self.net.borrow_mut();
            trace!(n, "{} {} > {} eof", n.name(e.host), e.local, e.peer_addr);
            n.send(
                e.host,
                dst,
                0,
                Ev::Seg {
                    to: peer,
                    seq,
                    seg: Seg::Fin,
                },
            );
        }
        Ok(())
    }

    fn connect_result(&mut self) -> io::Result<bool> {
        let e = self.end.borrow();
        if e.refused {
            return Err(io::ErrorKind::ConnectionRefused.into());
        }
        if e.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        Ok(e.connected)
    }

    fn peer_addr(&self) -> io::Result<SockAddr> {
        Ok(SockAddr::Inet(self.end.borrow().peer_addr))
    }

    fn local_addr(&self) -> io::Result<SockAddr> {
        Ok(SockAddr::Inet(self.end.borrow().local))
    }

    fn register(&mut self, _: &mio::Registry, token: mio::Token) -> io::Result<()> {
        let mut e = self.end.borrow_mut();
        e.key = Some(SourceKey::from_token(token));
        // What arrived before the source existed (an accepted connection's
        // first bytes) is signalled now.
        let mut ready = Ready::EMPTY;
        if e.connected {
            ready = ready | Ready::WRITABLE;
        }
        if !e.inbound.is_empty() || e.peer_eof || e.reset {
            ready = ready | Ready::READABLE;
        }
        if e.peer_eof || e.reset {
            ready = ready | Ready::READ_CLOSED;
        }
        if !ready.is_empty() {
            kick(&e.lp, token, ready);
        }
        Ok(())
    }

    fn deregister(&mut self, _: &mio::Registry) {
        self.end.borrow_mut().key = None;
    }

    fn name(&self) -> &'static str {
        "sim"
    }

    fn set_nodelay(&self, _: bool) -> io::Result<()> {
        Ok(())
    }

    fn nodelay(&self) -> io::Result<bool> {
        Ok(true)
    }
}

impl Drop for SimWire {
    /// Closing the socket: a FIN if everything sent to it was read, a reset
    /// if bytes were left unread (as Linux does); what arrives later is
    /// answered with a reset.
    fn drop(&mut self) {
        let mut e = self.end.borrow_mut();
        if e.dead {
            return;
        }
        e.dead = true;
        e.key = None;
        if !e.connected || e.reset || e.refused {
            return;
        }
        let Ok(mut n) = self.net.try_borrow_mut() else {
            return;
        };
        if !e.inbound.is_empty() {
            trace!(
                n,
                "{} {} > {} reset (unread bytes)",
                n.name(e.host),
                e.local,
                e.peer_addr
            );
            n.reset_peer(&e);
        } else if !e.eof_sent {
            e.eof_sent = true;
            if let Some(peer) = e.peer.upgrade() {
                let seq = e.next_seq();
                let dst = peer.borrow().host;
                trace!(n, "{} {} > {} close", n.name(e.host), e.local, e.peer_addr);
                n.send(
                    e.host,
                    dst,
                    0,
                    Ev::Seg {
                        to: peer,
                        seq,
                        seg: Seg::Fin,
                    },
                );
            }
        }
    }
}

/// A listening port on a simulated host.
pub(crate) struct SimListen {
    q: Rc<RefCell<ListenQ>>,
    net: Rc<RefCell<Net>>,
}

impl SimListen {
    pub(crate) fn accept(&self) -> io::Result<(Box<dyn Wire>, SockAddr)> {
        let end = self.q.borrow_mut().backlog.pop_front();
        let Some(end) = end else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let peer = {
            let mut e = end.borrow_mut();
            e.lp = self.q.borrow().lp.clone();
            e.peer_addr
        };
        let wire = SimWire {
            end,
            net: self.net.clone(),
        };
        Ok((Box::new(wire), SockAddr::Inet(peer)))
    }

    fn close(&mut self) {
        let mut q = self.q.borrow_mut();
        if !q.open {
            return;
        }
        q.open = false;
        q.key = None;
        let Ok(mut n) = self.net.try_borrow_mut() else {
            return;
        };
        let (host, port) = (q.host, q.addr.port());
        if n.hosts[host]
            .listeners
            .get(&port)
            .is_some_and(|l| Rc::ptr_eq(l, &self.q))
        {
            n.hosts[host].listeners.remove(&port);
        }
        trace!(n, "{} stop listening {}", n.name(host), q.addr);
        // Connections made but never accepted are reset.
        for end in q.backlog.drain(..) {
            let mut e = end.borrow_mut();
            e.dead = true;
            n.reset_peer(&e);
        }
    }
}

impl mio::event::Source for SimListen {
    fn register(
        &mut self,
        _: &mio::Registry,
        token: mio::Token,
        _: mio::Interest,
    ) -> io::Result<()> {
        let mut q = self.q.borrow_mut();
        q.key = Some(SourceKey::from_token(token));
        if !q.backlog.is_empty() {
            kick(&q.lp, token, Ready::READABLE);
        }
        Ok(())
    }

    fn reregister(
        &mut self,
        r: &mio::Registry,
        token: mio::Token,
        i: mio::Interest,
    ) -> io::Result<()> {
        self.register(r, token, i)
    }

    fn deregister(&mut self, _: &mio::Registry) -> io::Result<()> {
        self.close();
        Ok(())
    }
}

impl Drop for SimListen {
    fn drop(&mut self) {
        self.close();
    }
}
