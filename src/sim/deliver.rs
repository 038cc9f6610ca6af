//! What the network does when a delivery falls due: a connect reaches a
//! listener or is refused, a segment or a reset reaches its end, a datagram
//! its port. Runs in the driver, between turns (`mod.rs`); above `net.rs`
//! (the network's state) and `wire.rs`/`udp.rs` (the sockets over it).

use crate::reactor::Ready;
use crate::sim::net::{trace, End, EndRef, Ev, HostId, Net, Seg};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

/// Applies one delivery. Runs in the driver, between turns: no host code
/// runs here, it only marks sockets and wakes their sources.
pub(crate) fn apply(net: &Rc<RefCell<Net>>, src: HostId, dst: HostId, ev: Ev) {
    match ev {
        Ev::Syn { client, to } => syn(net, src, dst, client, to),
        Ev::Refuse { client } => {
            let mut c = client.borrow_mut();
            {
                let n = net.borrow();
                trace!(n, "{} {} > {} refused", n.name(dst), c.local, c.peer_addr);
            }
            c.refused = true;
            c.wake(Ready::READABLE | Ready::WRITABLE | Ready::READ_CLOSED);
        }
        Ev::Rst { to } => {
            let mut e = to.borrow_mut();
            if e.dead || e.reset {
                return;
            }
            {
                let n = net.borrow();
                trace!(n, "{} {} < {} reset", n.name(dst), e.local, e.peer_addr);
            }
            e.reset = true;
            e.inbound.clear();
            e.wake(Ready::READABLE | Ready::WRITABLE | Ready::READ_CLOSED);
        }
        Ev::Window { to } => {
            let mut e = to.borrow_mut();
            if e.blocked && !e.dead {
                e.blocked = false;
                e.wake(Ready::WRITABLE);
            }
        }
        Ev::Seg { to, seq, seg } => segment(net, src, dst, &to, seq, seg),
        Ev::Dgram { data, from, to } => dgram(net, dst, data, from, to),
    }
}

fn syn(net: &Rc<RefCell<Net>>, src: HostId, dst: HostId, client: EndRef, to: SocketAddr) {
    let mut n = net.borrow_mut();
    let from = client.borrow().local;
    let q = if n.hosts[dst].up {
        n.hosts[dst].listeners.get(&to.port()).cloned()
    } else {
        None
    };
    let Some(q) = q.filter(|q| q.borrow().open) else {
        trace!(n, "{} {from} > {to} connect refused", n.name(dst));
        return n.send_control(dst, src, Ev::Refuse { client });
    };
    if client.borrow().dead {
        return; // given up meanwhile: its retransmitted connect finds nobody
    }
    let lp = q.borrow().lp.clone();
    let mut server = End::new(dst, to, from, lp);
    server.connected = true;
    server.peer = Rc::downgrade(&client);
    let seq = server.next_seq();
    let server = Rc::new(RefCell::new(server));
    client.borrow_mut().peer = Rc::downgrade(&server);
    n.hosts[dst].ends.push(Rc::downgrade(&server));
    trace!(n, "{} {to} < {from} connected", n.name(dst));
    let mut q = q.borrow_mut();
    q.backlog.push_back(server.clone());
    if let (Some(key), Some(lp)) = (q.key, q.lp.upgrade()) {
        lp.wake_source(key, Ready::READABLE);
    }
    drop(q);
    let ev = Ev::Seg {
        to: client,
        seq,
        seg: Seg::SynAck,
    };
    n.send(dst, src, 0, ev);
}

fn segment(net: &Rc<RefCell<Net>>, src: HostId, dst: HostId, to: &EndRef, seq: u64, seg: Seg) {
    let mut e = to.borrow_mut();
    if e.dead || e.reset || e.refused {
        // A closed socket answers data with a reset (and a connect's late
        // answer too: the server side must learn it is gone).
        if matches!(seg, Seg::Data(_) | Seg::SynAck) {
            if let Some(peer) = e.peer.upgrade() {
                net.borrow_mut()
                    .send_control(dst, src, Ev::Rst { to: peer });
            }
        }
        return;
    }
    e.arrived(seq, seg);
    let mut ready = Ready::EMPTY;
    let n = net.borrow();
    while let Some(seg) = e.next_in_order() {
        match seg {
            Seg::SynAck => {
                e.connected = true;
                trace!(n, "{} {} > {} connected", n.name(dst), e.local, e.peer_addr);
                ready = ready | Ready::WRITABLE;
            }
            Seg::Data(bytes) => {
                trace!(
                    n,
                    "{} {} < {} {} bytes",
                    n.name(dst),
                    e.local,
                    e.peer_addr,
                    bytes.len()
                );
                e.inbound.extend(bytes);
                ready = ready | Ready::READABLE;
            }
            Seg::Fin => {
                trace!(n, "{} {} < {} eof", n.name(dst), e.local, e.peer_addr);
                e.peer_eof = true;
                ready = ready | Ready::READABLE | Ready::READ_CLOSED;
            }
        }
    }
    drop(n);
    if !ready.is_empty() {
        e.wake(ready);
    }
}

/// Delivers a datagram to the port bound at `to` on `dst`, if any.
fn dgram(net: &Rc<RefCell<Net>>, dst: HostId, data: Vec<u8>, from: SocketAddr, to: SocketAddr) {
    let n = net.borrow();
    let q = if n.hosts[dst].up {
        n.hosts[dst].udp.get(&to.port()).cloned()
    } else {
        None
    };
    let Some(q) = q.filter(|q| {
        let q = q.borrow();
        q.open && q.peer.is_none_or(|p| p == from)
    }) else {
        trace!(
            n,
            "{} udp {to} < {from} {} bytes dropped (no socket)",
            n.name(dst),
            data.len()
        );
        return;
    };
    trace!(n, "{} udp {to} < {from} {} bytes", n.name(dst), data.len());
    drop(n);
    let mut q = q.borrow_mut();
    q.inbound.push_back((data, from));
    if let (Some(key), Some(lp)) = (q.key, q.lp.upgrade()) {
        lp.wake_source(key, Ready::READABLE);
    }
}
