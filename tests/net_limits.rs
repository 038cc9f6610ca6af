//! Limits a server sets on its peers: an idle timeout per connection, a cap
//! on a listener's open connections, the listen backlog, and `Limits` as one
//! value per connection, listener or UDP socket.

mod util;

use deferloop::net::{memory, Limits, Listener};
use deferloop::EventLoop;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use util::net::{Ev, ManualConn, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(10);

#[test]
fn a_silent_peer_is_disconnected_after_the_idle_timeout() {
    // Manual time: no sleeping, exact deadlines.
    let c = ManualConn::open();
    c.t.set_idle_timeout(Some(Duration::from_millis(60)));
    // Data pushes the deadline back.
    for _ in 0..4 {
        c.clock.advance(Duration::from_millis(45));
        c.peer.send(b"x");
        c.turn();
    }
    assert_eq!(c.lost(), 0, "still talking");
    c.clock.advance(Duration::from_millis(59));
    c.turn();
    assert_eq!(c.lost(), 0, "not before the timeout");
    c.after(Duration::from_millis(1));
    c.assert_timed_out("idle timeout");
}

/// Asks for an empty `data_received` on every one it gets (working
/// through data of its own); counts them.
struct Redelivers(std::rc::Rc<std::cell::Cell<u32>>);

impl deferloop::net::Protocol for Redelivers {
    fn data_received(&mut self, t: &deferloop::net::Transport, _: &[u8]) {
        self.0.set(self.0.get() + 1);
        t.redeliver();
    }
}

/// A redelivery is the protocol's own work, not the peer talking: it does
/// not push the idle deadline back.
#[test]
fn redeliveries_do_not_keep_a_silent_peer_connected() {
    let ev = EventLoop::new().unwrap();
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let (t, peer) = memory::open(&ev, Redelivers(calls.clone())).unwrap();
    t.set_idle_timeout(Some(Duration::from_millis(100)));
    peer.send(b"x");
    run_until(&ev, T, || peer.is_closed());
    assert!(calls.get() > 1, "redelivered");
}

#[test]
fn turning_the_idle_timeout_off_keeps_the_connection() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, _peer) = memory::open(&ev, rec).unwrap();
    t.set_idle_timeout(Some(Duration::from_millis(20)));
    t.set_idle_timeout(None);
    ev.call_later(Duration::from_millis(60), |lp| lp.stop())
        .unwrap();
    ev.run().unwrap();
    assert_eq!(seen.borrow().events, [Ev::Made]);
}

fn listener(ev: &EventLoop) -> (Listener, SocketAddr) {
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || Rec::new().0)
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    (l, addr)
}

#[test]
fn a_listener_at_its_cap_waits_and_accepts_again_below_it() {
    let ev = EventLoop::new().unwrap();
    let (l, addr) = listener(&ev);
    l.set_max_connections(Some(2));
    let clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    run_until(&ev, T, || l.accepted() == 2);
    ev.call_later(Duration::from_millis(50), |lp| lp.stop())
        .unwrap();
    ev.run().unwrap();
    assert_eq!(l.accepted(), 2, "the third waits in the backlog");
    assert_eq!(l.connection_count(), 2);
    // One closes: the third is accepted.
    l.connections()[0].abort();
    run_until(&ev, T, || l.accepted() == 3);
    assert_eq!(l.connection_count(), 2);
    l.set_max_connections(None);
    drop(clients);
}

#[test]
fn an_idle_timeout_set_on_a_listener_reaches_its_connections() {
    let ev = EventLoop::new().unwrap();
    let (l, addr) = listener(&ev);
    l.set_idle_timeout(Some(Duration::from_millis(50)));
    let _c = TcpStream::connect(addr).unwrap();
    run_until(&ev, T, || l.accepted() == 1);
    run_until(&ev, T, || l.connection_count() == 0);
}

#[test]
fn the_backlog_can_be_set_and_defaults_to_the_system_maximum() {
    let ev = EventLoop::new().unwrap();
    let (l, addr) = listener(&ev);
    // Far more than mio's or std's defaults wait in the kernel's queue
    // while the loop does not accept (bounded by the system's maximum).
    let max = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(128)
        .min(600);
    // With a small backlog the kernel drops SYNs past it and a connect
    // stalls: a bounded connect makes that a failure, not a hang.
    let waiting: Vec<TcpStream> = (0..max)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .unwrap_or_else(|e| panic!("connect {i} of {max} while not accepting: {e}"))
        })
        .collect();
    run_until(&ev, T, || l.accepted() as usize == max);
    l.set_backlog(16).unwrap();
    drop(waiting);
    l.stop_listening().detach();
    assert!(l.set_backlog(16).is_err());
}

/// Limits set on a listener reach each connection it accepts afterwards;
/// its own part (the accept batch) stays with it.
#[test]
fn limits_set_on_a_listener_reach_the_connections_it_accepts() {
    let ev = EventLoop::new().unwrap();
    let (l, addr) = listener(&ev);
    assert_eq!(l.limits(), Limits::DEFAULT);
    let mut limits = Limits::DEFAULT;
    limits.high_water = 8 * 1024;
    limits.low_water = 2 * 1024;
    limits.write_timeout = Some(Duration::from_secs(7));
    limits.read_budget = 4096;
    limits.accept_batch = 1;
    l.set_limits(&limits).unwrap();
    assert_eq!(l.limits(), limits);
    let _c = TcpStream::connect(addr).unwrap();
    run_until(&ev, T, || l.accepted() == 1);
    let t = &l.connections()[0];
    assert_eq!(t.write_buffer_limits(), (8 * 1024, 2 * 1024));
    assert_eq!(t.write_timeout(), Some(Duration::from_secs(7)));
    assert_eq!(t.read_budget(), 4096);
}

#[test]
fn limits_with_the_water_marks_crossed_are_refused_and_change_nothing() {
    let ev = EventLoop::new().unwrap();
    let (l, _) = listener(&ev);
    let (rec, _) = Rec::new();
    let (t, _peer) = memory::open(&ev, rec).unwrap();
    let mut bad = Limits::DEFAULT;
    bad.high_water = 1024;
    bad.low_water = 4096;
    bad.read_budget = 1;
    assert!(l.set_limits(&bad).is_err());
    assert_eq!(l.limits(), Limits::DEFAULT);
    assert!(t.set_limits(&bad).is_err());
    assert_eq!(t.read_budget(), Limits::DEFAULT.read_budget);
    assert_eq!(
        t.write_buffer_limits(),
        (Limits::DEFAULT.high_water, Limits::DEFAULT.low_water)
    );
}

/// A connection's read budget bounds what one dispatch reads: the rest
/// waits for the next turn.
#[test]
fn a_connections_read_budget_bounds_one_dispatch() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let mut limits = Limits::DEFAULT;
    limits.read_budget = 1000;
    t.set_limits(&limits).unwrap();
    peer.send(&[7; 5000]);
    let mut per_turn = Vec::new();
    while seen.borrow().bytes.len() < 5000 {
        let before = seen.borrow().bytes.len();
        let h = ev.call_later(Duration::from_millis(20), |_| {}).unwrap();
        ev.run_once().unwrap();
        h.cancel();
        per_turn.push(seen.borrow().bytes.len() - before);
        assert!(per_turn.len() < 100, "stuck: {per_turn:?}");
    }
    assert!(per_turn.iter().all(|&n| n <= 1000), "{per_turn:?}");
    assert!(
        per_turn.iter().filter(|&&n| n > 0).count() >= 5,
        "{per_turn:?}"
    );
}
