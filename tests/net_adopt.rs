//! Sockets made elsewhere (src/net/open/adopt.rs): `SO_REUSEPORT` listeners on one
//! port, a `std` listener, and a stream accepted on another thread.

use deferloop::net::{bind_reuseport, Protocol, Transport};
use deferloop::EventLoop;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

fn echo_once(ev: &EventLoop, addr: SocketAddr) {
    let t = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"ping").unwrap();
        let mut b = [0; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
    });
    while !t.is_finished() {
        ev.run_once_timeout(Duration::from_millis(5)).unwrap();
    }
    t.join().unwrap();
}

#[test]
fn reuseport_sockets_share_a_port_and_each_serves() {
    for any in ["127.0.0.1:0", "[::1]:0"] {
        let Ok(first) = bind_reuseport(any.parse().unwrap()) else {
            assert!(any.starts_with('['), "IPv4 loopback must bind");
            continue; // no IPv6 here
        };
        let addr = first.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let second = bind_reuseport(addr).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
        assert!(
            TcpListener::bind(addr).is_err(),
            "a socket without the option is refused"
        );
        let ev = EventLoop::new().unwrap();
        let l1 = ev.listen_tcp_std(first, || Echo).unwrap();
        let l2 = ev.listen_tcp_std(second, || Echo).unwrap();
        assert_eq!(l1.local_addr().as_inet(), Some(addr));
        // The kernel spreads connections over both by a hash of their
        // addresses: 64 all landing on one would be a 2^-63 chance.
        let mut tries = 0;
        while (l1.accepted() == 0 || l2.accepted() == 0) && tries < 64 {
            echo_once(&ev, addr);
            tries += 1;
        }
        assert!(
            l1.accepted() > 0 && l2.accepted() > 0,
            "each serves: {} and {} of {tries}",
            l1.accepted(),
            l2.accepted()
        );
    }
}

#[test]
fn a_stream_accepted_elsewhere_is_adopted() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let ev = EventLoop::new().unwrap();
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"hello").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        back
    });
    let (s, _) = l.accept().unwrap();
    let t = ev.adopt_tcp(s, Echo).unwrap();
    assert!(t.nodelay().unwrap());
    while !client.is_finished() {
        ev.run_once_timeout(Duration::from_millis(5)).unwrap();
    }
    assert_eq!(client.join().unwrap(), b"hello");
}
