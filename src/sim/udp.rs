//! Datagrams on a simulated host: the UDP socket type the datagram source
//! (`net/udp/`) holds with the `sim` feature — a kernel socket, or a port
//! of the simulated network — and its delivery. A datagram is lost with its
//! link's `loss`, dropped by a partition or a host that is down, delayed by
//! latency, jitter and bandwidth, and so reordered by jitter, as UDP is.

use crate::reactor::{Ready, SourceKey};
use crate::sim::net::{trace, Net, UdpQ};
use crate::sim::wire::{host_of, kick};
use crate::Loop;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::unix::io::{AsFd, BorrowedFd};
use std::rc::Rc;

pub(crate) struct SimUdp {
    q: Rc<RefCell<UdpQ>>,
    net: Rc<RefCell<Net>>,
}

/// A UDP socket: the kernel's, or on a simulated host the network's.
pub(crate) enum UdpSock {
    Real(mio::net::UdpSocket),
    Sim(SimUdp),
}

impl UdpSock {
    /// Binds `addr`: a port of the simulated host `lp` is, else a kernel
    /// socket.
    pub(crate) fn bind_in(lp: &Loop, addr: SocketAddr) -> io::Result<UdpSock> {
        let Some((net, host)) = host_of(lp) else {
            return mio::net::UdpSocket::bind(addr).map(UdpSock::Real);
        };
        let mut n = net.borrow_mut();
        let local = n.bind(host, addr, |h, p| h.udp.contains_key(&p))?;
        let q = Rc::new(RefCell::new(UdpQ {
            host,
            local,
            peer: None,
            inbound: VecDeque::new(),
            open: true,
            key: None,
            lp: lp.downgrade(),
        }));
        n.hosts[host].udp.insert(local.port(), q.clone());
        trace!(n, "{} udp bind {local}", n.name(host));
        drop(n);
        Ok(UdpSock::Sim(SimUdp { q, net }))
    }

    pub(crate) fn connect(&self, remote: SocketAddr) -> io::Result<()> {
        match self {
            UdpSock::Real(s) => s.connect(remote),
            UdpSock::Sim(s) => {
                s.q.borrow_mut().peer = Some(remote);
                Ok(())
            }
        }
    }

    pub(crate) fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        match self {
            UdpSock::Real(s) => s.send_to(data, to),
            UdpSock::Sim(s) => s.send(data, to),
        }
    }

    pub(crate) fn send(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            UdpSock::Real(s) => s.send(data),
            UdpSock::Sim(s) => {
                let to = s.q.borrow().peer.ok_or(io::ErrorKind::NotConnected)?;
                s.send(data, to)
            }
        }
    }

    pub(crate) fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        match self {
            UdpSock::Real(s) => s.recv_from(buf),
            UdpSock::Sim(s) => {
                let Some((data, from)) = s.q.borrow_mut().inbound.pop_front() else {
                    return Err(io::ErrorKind::WouldBlock.into());
                };
                // As recvfrom: what does not fit is discarded.
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                Ok((n, from))
            }
        }
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            UdpSock::Real(s) => s.local_addr(),
            UdpSock::Sim(s) => Ok(s.q.borrow().local),
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            UdpSock::Real(s) => s.peer_addr(),
            UdpSock::Sim(s) => {
                s.q.borrow()
                    .peer
                    .ok_or_else(|| io::ErrorKind::NotConnected.into())
            }
        }
    }
}

impl UdpSock {
    /// The descriptor of a kernel socket; none for a simulated one.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            UdpSock::Real(s) => Some(s.as_fd()),
            UdpSock::Sim(_) => None,
        }
    }
}

impl mio::event::Source for UdpSock {
    fn register(
        &mut self,
        r: &mio::Registry,
        token: mio::Token,
        i: mio::Interest,
    ) -> io::Result<()> {
        match self {
            UdpSock::Real(s) => s.register(r, token, i),
            UdpSock::Sim(s) => {
                let mut q = s.q.borrow_mut();
                q.key = Some(SourceKey::from_token(token));
                // Writable from the start; readable if datagrams wait.
                let ready = if q.inbound.is_empty() {
                    Ready::WRITABLE
                } else {
                    Ready::WRITABLE | Ready::READABLE
                };
                kick(&q.lp, token, ready);
                Ok(())
            }
        }
    }

    fn reregister(
        &mut self,
        r: &mio::Registry,
        token: mio::Token,
        i: mio::Interest,
    ) -> io::Result<()> {
        match self {
            UdpSock::Real(s) => s.reregister(r, token, i),
            UdpSock::Sim(_) => self.register(r, token, i),
        }
    }

    fn deregister(&mut self, r: &mio::Registry) -> io::Result<()> {
        match self {
            UdpSock::Real(s) => s.deregister(r),
            UdpSock::Sim(s) => {
                s.q.borrow_mut().key = None;
                Ok(())
            }
        }
    }
}

impl SimUdp {
    fn send(&self, data: &[u8], to: SocketAddr) -> io::Result<usize> {
        let q = self.q.borrow();
        let mut n = self.net.borrow_mut();
        let Some(dst) = n.host_by_ip(q.host, to.ip()) else {
            trace!(n, "{} udp {} > {to}: no route", n.name(q.host), q.local);
            return Ok(data.len()); // a datagram to nowhere is sent, and gone
        };
        trace!(
            n,
            "{} udp {} > {to} {} bytes",
            n.name(q.host),
            q.local,
            data.len()
        );
        n.send_datagram(q.host, dst, data.to_vec(), q.local, to);
        Ok(data.len())
    }
}

impl Drop for SimUdp {
    fn drop(&mut self) {
        let mut q = self.q.borrow_mut();
        if !q.open {
            return;
        }
        q.open = false;
        if let Ok(mut n) = self.net.try_borrow_mut() {
            let (host, port) = (q.host, q.local.port());
            if n.hosts[host]
                .udp
                .get(&port)
                .is_some_and(|u| Rc::ptr_eq(u, &self.q))
            {
                n.hosts[host].udp.remove(&port);
            }
        }
    }
}
