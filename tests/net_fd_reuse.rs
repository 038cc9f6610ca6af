//! A listener or a UDP socket closed inside its own dispatch keeps its
//! descriptor open until the loop has taken it out of the selector: a
//! socket opened at once, and one opened later under the same descriptor
//! number, both get their events (closing first and deregistering the
//! number afterwards would silence the new owner). A listener stopped in its
//! own accept loop closes its socket when that loop returns. One test in this file,
//! so no other test's sockets take the freed number.

use deferloop::net::{DatagramProtocol, DatagramTransport, Listener, Protocol, Transport};
use deferloop::{EventLoop, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::Duration;

/// Opens a socket pair, registers one end as a raw reader that counts
/// `hits` when data arrives, and writes to the other; returns both (kept
/// open by the caller).
fn watched_pair(lp: &Loop, hits: &Rc<Cell<u32>>) -> (UnixStream, UnixStream) {
    let (a, mut b) = UnixStream::pair().unwrap();
    let fd = a.as_raw_fd();
    let h = hits.clone();
    lp.add_reader(fd, move |lp| {
        h.set(h.get() + 1);
        lp.remove_reader(fd);
    })
    .unwrap();
    b.write_all(b"x").unwrap();
    (a, b)
}

/// Opens socket pairs until one end has descriptor `fd` (the number just
/// freed), then watches that one; the pairs are kept in `keep`.
fn reuse(lp: &Loop, fd: RawFd, hits: &Rc<Cell<u32>>, keep: &RefCell<Vec<UnixStream>>) {
    for _ in 0..64 {
        let (a, b) = UnixStream::pair().unwrap();
        let (fa, fb) = (a.as_raw_fd(), b.as_raw_fd());
        keep.borrow_mut().extend([a, b]);
        if fa == fd || fb == fd {
            let h = hits.clone();
            lp.add_reader(fd, move |lp| {
                h.set(h.get() + 1);
                lp.remove_reader(fd);
            })
            .unwrap();
            let mut keep = keep.borrow_mut();
            let n = keep.len();
            let other = if fa == fd { n - 1 } else { n - 2 };
            keep[other].write_all(b"x").unwrap();
            return;
        }
    }
    panic!("descriptor {fd} was never freed");
}

struct Ctx {
    lp: Loop,
    hits: Rc<Cell<u32>>,
    keep: RefCell<Vec<UnixStream>>,
    listener: RefCell<Option<Listener>>,
    freed: Cell<Option<RawFd>>,
    addr: Cell<Option<SocketAddr>>,
}

struct Accepted(Rc<Ctx>);

impl Protocol for Accepted {
    fn connection_made(&mut self, _: &Transport) {
        let c = &self.0;
        let l = c.listener.borrow().clone().unwrap();
        let fd = l.raw_fd().unwrap();
        let _ = l.stop_listening();
        assert!(!l.is_listening() && l.raw_fd().is_none());
        // The socket closes when this accept loop returns, not before.
        let addr = c.addr.get().unwrap();
        let e = std::net::TcpListener::bind(addr).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        // Opened at once, inside the listener's own dispatch.
        let (a, b) = watched_pair(&c.lp, &c.hits);
        c.keep.borrow_mut().extend([a, b]);
        c.freed.set(Some(fd));
        let c2 = c.clone();
        c.lp.call_soon(move |lp| {
            drop(std::net::TcpListener::bind(addr).expect("closed by now"));
            reuse(lp, fd, &c2.hits, &c2.keep);
        })
        .unwrap();
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

struct Closer(Rc<Ctx>, RawFd);

impl DatagramProtocol for Closer {
    fn datagram_received(&mut self, t: &DatagramTransport, _: &[u8], _: SocketAddr) {
        t.close();
        let (a, b) = watched_pair(&self.0.lp, &self.0.hits);
        self.0.keep.borrow_mut().extend([a, b]);
    }
    fn connection_lost(&mut self, _: &DatagramTransport, _: Option<Failure>) {
        let (c, fd) = (self.0.clone(), self.1);
        self.0
            .lp
            .call_soon(move |lp| reuse(lp, fd, &c.hits, &c.keep))
            .unwrap();
    }
}

fn run_until(ev: &EventLoop, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "events never arrived");
        ev.run_once_timeout(Duration::from_millis(50)).unwrap();
    }
}

#[test]
fn a_socket_closed_in_its_own_dispatch_silences_no_new_owner_of_its_number() {
    let ev = EventLoop::new().unwrap();
    let c = Rc::new(Ctx {
        lp: ev.to_loop(),
        hits: Rc::default(),
        keep: RefCell::default(),
        listener: RefCell::default(),
        freed: Cell::new(None),
        addr: Cell::new(None),
    });
    let c2 = c.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Accepted(c2.clone()))
        .unwrap();
    let addr = match l.local_addr() {
        deferloop::net::SockAddr::Inet(a) => *a,
        other => panic!("{other:?}"),
    };
    *c.listener.borrow_mut() = Some(l);
    c.addr.set(Some(addr));
    let _client = TcpStream::connect(addr).unwrap();
    run_until(&ev, || c.hits.get() == 2);
    assert!(c.freed.get().is_some());

    // The same for a UDP socket closed in its own datagram_received: its
    // descriptor is the lowest free number when it is made.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    let fd = probe.as_raw_fd();
    drop(probe);
    let t = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), Closer(c.clone(), fd))
        .unwrap();
    udp.send_to(b"x", t.local_addr().unwrap()).unwrap();
    run_until(&ev, || c.hits.get() == 4);
}
