//! UDP: a round trip between a bound and a connected socket, errors reported
//! to `error_received` without closing, `connection_lost` exactly once, and
//! the port released only once that has been delivered.

mod util;

use deferloop::net::{DatagramProtocol, DatagramTransport, Limits};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use util::run_until;

#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Made,
    Got(Vec<u8>),
    Error(io::ErrorKind),
    Lost(bool),
}

type Log = Rc<RefCell<Vec<Ev>>>;

struct Udp {
    log: Log,
    echo: bool,
    greet: Option<Vec<u8>>,
}

impl DatagramProtocol for Udp {
    fn connection_made(&mut self, t: &DatagramTransport) {
        self.log.borrow_mut().push(Ev::Made);
        if let Some(g) = self.greet.take() {
            t.send(&g);
        }
    }
    fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], from: SocketAddr) {
        self.log.borrow_mut().push(Ev::Got(data.to_vec()));
        if self.echo {
            t.send_to(data, from);
        }
    }
    fn error_received(&mut self, _: &DatagramTransport, e: io::Error) {
        self.log.borrow_mut().push(Ev::Error(e.kind()));
    }
    fn connection_lost(&mut self, _: &DatagramTransport, reason: Option<Failure>) {
        self.log.borrow_mut().push(Ev::Lost(reason.is_some()));
    }
}

fn udp(log: &Log, echo: bool, greet: Option<&[u8]>) -> Udp {
    Udp {
        log: log.clone(),
        echo,
        greet: greet.map(<[u8]>::to_vec),
    }
}

#[test]
fn a_datagram_round_trip_then_each_side_closes_once() {
    let ev = EventLoop::new().unwrap();
    let server_log = Log::default();
    let server = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), udp(&server_log, true, None))
        .unwrap();
    let addr = server.local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    let client_log = Log::default();
    let client = ev
        .connect_udp(addr, udp(&client_log, false, Some(b"ping")))
        .unwrap();
    assert_eq!(client.peer_addr().unwrap(), addr);
    run_until(&ev, Duration::from_secs(10), || {
        client_log.borrow().len() == 2
    });
    // Several datagrams keep their boundaries.
    for m in [&b"a"[..], b"bb", b""] {
        client.send(m);
    }
    run_until(&ev, Duration::from_secs(10), || {
        client_log.borrow().len() == 5
    });
    client.close();
    server.close();
    client.send(b"late");
    assert_eq!(
        client.dropped_datagrams(),
        1,
        "ignored after close, and counted"
    );
    run_until(&ev, Duration::from_secs(10), || {
        client_log.borrow().last() == Some(&Ev::Lost(false))
            && server_log.borrow().last() == Some(&Ev::Lost(false))
    });
    assert_eq!(
        *client_log.borrow(),
        [
            Ev::Made,
            Ev::Got(b"ping".to_vec()),
            Ev::Got(b"a".to_vec()),
            Ev::Got(b"bb".to_vec()),
            Ev::Got(Vec::new()),
            Ev::Lost(false)
        ]
    );
    assert_eq!(server_log.borrow().first(), Some(&Ev::Made));
    assert_eq!(ev.io_source_count(), 0);
    // A send to the socket once it is gone is logged, not silent.
    let logs = util::logs();
    client.send(b"gone");
    assert_eq!(
        logs.mine_containing("write of 4 bytes to a UDP socket that is gone")
            .len(),
        1
    );
    // The count outlives the socket: still there once it is gone, and the
    // send to the gone socket was counted too.
    assert_eq!(client.dropped_datagrams(), 2, "counted, also once gone");
}

#[test]
fn a_refused_datagram_is_an_error_received_not_a_close() {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let ev = EventLoop::new().unwrap();
    let log = Log::default();
    let t = ev
        .connect_udp(
            ([127, 0, 0, 1], port).into(),
            udp(&log, false, Some(b"anyone?")),
        )
        .unwrap();
    run_until(&ev, Duration::from_secs(10), || {
        log.borrow()
            .contains(&Ev::Error(io::ErrorKind::ConnectionRefused))
    });
    assert!(!t.is_closing(), "an ICMP error does not close the socket");
    t.send(b"again");
    t.abort();
    run_until(&ev, Duration::from_secs(10), || {
        log.borrow().last() == Some(&Ev::Lost(false))
    });
    let lost = log
        .borrow()
        .iter()
        .filter(|e| matches!(e, Ev::Lost(_)))
        .count();
    assert_eq!(lost, 1);
}

/// A send that fails (here a datagram too large for UDP) just before a
/// close is still told to `error_received`, before `connection_lost`.
#[test]
fn a_send_error_just_before_close_is_still_received() {
    let ev = EventLoop::new().unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let log = Log::default();
    let t = ev
        .connect_udp(peer.local_addr().unwrap(), udp(&log, false, None))
        .unwrap();
    run_until(&ev, Duration::from_secs(10), || !log.borrow().is_empty());
    t.send(&vec![0; 70_000]); // over the 65,507 bytes a datagram can hold
    t.close();
    run_until(&ev, Duration::from_secs(10), || {
        matches!(log.borrow().last(), Some(Ev::Lost(_)))
    });
    let log = log.borrow();
    assert!(
        matches!(&log[..], [Ev::Made, Ev::Error(_), Ev::Lost(false)]),
        "{log:?}"
    );
}

#[test]
fn closing_the_loop_tells_an_open_socket() {
    let ev = EventLoop::new().unwrap();
    let log = Log::default();
    let _t = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), udp(&log, false, None))
        .unwrap();
    drop(ev);
    assert_eq!(*log.borrow(), [Ev::Made, Ev::Lost(true)]);
}

/// A UDP socket's limits: datagrams per dispatch bound what one turn
/// receives; crossed water marks are refused.
#[test]
fn a_sockets_limits_bound_the_datagrams_one_dispatch_receives() {
    let ev = EventLoop::new().unwrap();
    let log: Log = Rc::new(RefCell::new(Vec::new()));
    let t = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), udp(&log, false, None))
        .unwrap();
    let mut bad = Limits::DEFAULT;
    bad.high_water = 1;
    bad.low_water = 2;
    assert!(t.set_limits(&bad).is_err());
    let mut limits = Limits::DEFAULT;
    limits.datagrams_per_dispatch = 1;
    t.set_limits(&limits).unwrap();
    let to = t.local_addr().unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..4u8 {
        client.send_to(&[i], to).unwrap();
    }
    let got = || {
        log.borrow()
            .iter()
            .filter(|e| matches!(e, Ev::Got(_)))
            .count()
    };
    let mut per_turn = Vec::new();
    while got() < 4 {
        let before = got();
        let h = ev.call_later(Duration::from_millis(50), |_| {}).unwrap();
        ev.run_once().unwrap();
        h.cancel();
        per_turn.push(got() - before);
        assert!(per_turn.len() < 200, "stuck: {per_turn:?}");
    }
    assert!(per_turn.iter().all(|&n| n <= 1), "{per_turn:?}");
}

/// The socket is the loop's source's to close (a public `EventSource`
/// owning it): after `close`, the transport is closed at once (no address,
/// sends ignored), and the port is released once `connection_lost` has
/// been delivered, when the loop has taken the descriptor out of its
/// selector.
#[test]
fn a_closed_socket_releases_its_port_once_connection_lost_is_delivered() {
    let ev = EventLoop::new().unwrap();
    let log = Log::default();
    let t = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), udp(&log, false, None))
        .unwrap();
    let addr = t.local_addr().unwrap();
    run_until(&ev, Duration::from_secs(10), || !log.borrow().is_empty());
    t.close();
    assert!(t.is_closing());
    assert_eq!(
        t.local_addr().unwrap_err().kind(),
        io::ErrorKind::NotConnected
    );
    assert_eq!(
        std::net::UdpSocket::bind(addr).unwrap_err().kind(),
        io::ErrorKind::AddrInUse,
        "still the source's until connection_lost"
    );
    run_until(&ev, Duration::from_secs(10), || {
        matches!(log.borrow().last(), Some(Ev::Lost(_)))
    });
    assert_eq!(*log.borrow(), [Ev::Made, Ev::Lost(false)]);
    std::net::UdpSocket::bind(addr).expect("the port is free again");
}
