//! Host names: "host:port" targets, lookups on the resolver's own pool with a
//! timeout and cancellation, and Happy Eyeballs over the addresses. Only
//! loopback addresses and sockets this test made are ever contacted; lookups
//! other than "localhost" go to a resolver function the test supplies.

use deferloop::net::{ConnectOptions, HostResolver, Protocol, Target, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::io::AsRawFd;
use std::rc::Rc;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

struct Quiet(Rc<Cell<u32>>);
impl Protocol for Quiet {
    fn connection_made(&mut self, _: &Transport) {
        self.0.set(self.0.get() + 1);
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

fn quiet() -> (Quiet, Rc<Cell<u32>>) {
    let c = Rc::new(Cell::new(0));
    (Quiet(c.clone()), c)
}

fn table(addrs: Vec<SocketAddr>) -> HostResolver {
    HostResolver::with_lookup(2, move |host, _| {
        if host == "db.test" {
            Ok(addrs.clone())
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, "no such host"))
        }
    })
}

/// A gate a lookup (or pool job) waits at until the test opens it, by
/// sending or by dropping the sender; never longer than 60 s.
fn gate() -> (mpsc::Sender<()>, impl Fn() + Send + Sync + 'static) {
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let wait = move || {
        let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
    };
    (tx, wait)
}

fn options(resolver: HostResolver) -> ConnectOptions {
    ConnectOptions::default().with_resolver(resolver)
}

/// A port with nothing listening on it (bound, then closed).
fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A listener whose accept queue is full: a connect to it is never answered.
fn black_hole() -> (TcpListener, Vec<std::net::TcpStream>, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen(2) again on our own listening socket: backlog 0.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let addr = l.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..3 {
        if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            fillers.push(s);
        }
    }
    (l, fillers, addr)
}

#[test]
fn targets_parse_from_host_port_strings_pairs_and_addresses() {
    assert_eq!(
        Target::from("db.internal:5432").to_string(),
        "db.internal:5432"
    );
    assert_eq!(
        Target::from("[::1]:80").as_addr(),
        Some("[::1]:80".parse().unwrap())
    );
    assert_eq!(
        Target::from(("127.0.0.1", 7)).as_addr(),
        Some("127.0.0.1:7".parse().unwrap())
    );
    let ev = EventLoop::new().unwrap();
    for bad in ["no-port", "host:notaport", ":80", "a:b:c"] {
        let (p, made) = quiet();
        let e = ev
            .run_until(ev.connect_tcp_to(bad, p).connected())
            .unwrap_err()
            .into_failure()
            .unwrap();
        assert!(e.to_string().contains(bad), "{e}");
        assert_eq!(made.get(), 0);
    }
}

#[test]
fn localhost_connects_to_whichever_family_listens() {
    let ev = EventLoop::new().unwrap();
    let (p, _) = quiet();
    let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
        let (p, _) = quiet();
        p
    });
    let server = server.unwrap();
    drop(p);
    let port = server.local_addr().as_inet().unwrap().port();
    let (p, made) = quiet();
    // An attempt delay of 60 s: an address tried only after it would show.
    let opts = ConnectOptions::default().with_attempt_delay(Some(Duration::from_secs(60)));
    let t0 = Instant::now();
    let t = ev
        .run_until(
            ev.connect_tcp_with(format!("localhost:{port}"), p, &opts)
                .connected(),
        )
        .unwrap();
    assert_eq!(made.get(), 1);
    assert_eq!(
        t.peer_addr().unwrap().as_inet().unwrap(),
        SocketAddr::from(([127, 0, 0, 1], port))
    );
    // If localhost is also ::1 (refused at once here), the next address is
    // tried at once, not after the attempt delay (60 s; 10 s is a bound a
    // loaded machine does not miss, where 240 ms under the default 250 ms
    // delay was one it could).
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn a_first_address_that_never_answers_loses_to_the_second_after_the_delay() {
    let ev = EventLoop::new().unwrap();
    let (_hole, _fillers, hole) = black_hole();
    let server = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || quiet().0)
        .unwrap();
    let good = server.local_addr().as_inet().unwrap();
    let (p, made) = quiet();
    let t0 = Instant::now();
    let conn = ev.connect_tcp_with("db.test:1", p, &options(table(vec![hole, good])));
    let t = ev.run_until(conn.connected()).unwrap();
    let took = t0.elapsed();
    assert_eq!(t.peer_addr().unwrap().as_inet(), Some(good));
    assert!(
        took >= Duration::from_millis(240),
        "waited for the delay: {took:?}"
    );
    // Not after the first attempt's connect timeout (30 s by default): 10 s
    // tells the two apart on a loaded machine too.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(made.get(), 1);
    // The losing attempt was closed: only the winner and the server remain.
    ev.call_later(Duration::from_millis(10), |_| {}).unwrap();
    ev.run_once().unwrap();
    assert_eq!(ev.io_source_count(), 3, "listener, client, accepted");
}

#[test]
fn when_every_address_fails_the_error_names_the_host_and_each_address() {
    let ev = EventLoop::new().unwrap();
    let (a, b) = (closed_port(), closed_port());
    let (p, made) = quiet();
    let conn = ev.connect_tcp_with("db.test:5432", p, &options(table(vec![a, b])));
    let e = ev
        .run_until(conn.connected())
        .unwrap_err()
        .into_failure()
        .unwrap()
        .to_string();
    assert!(e.contains("db.test:5432"), "{e}");
    assert!(
        e.contains(&a.to_string()) && e.contains(&b.to_string()),
        "{e}"
    );
    assert_eq!(made.get(), 0, "no protocol method");
    assert_eq!(ev.io_source_count(), 0);
}

#[test]
fn a_host_that_does_not_resolve_fails_with_its_name() {
    let ev = EventLoop::new().unwrap();
    let (p, made) = quiet();
    let conn = ev.connect_tcp_with("nowhere.test:80", p, &options(table(vec![])));
    let e = ev
        .run_until(conn.connected())
        .unwrap_err()
        .into_failure()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("nowhere.test") && text.contains("no such host"),
        "{text}"
    );
    assert_eq!(made.get(), 0);
    // And a lookup that answers with nothing.
    let r = table(vec![]);
    let e = ev
        .run_until(r.lookup(&ev, "db.test", 1, Duration::from_secs(5)))
        .unwrap_err()
        .into_failure()
        .unwrap();
    assert!(e.to_string().contains("no addresses"), "{e}");
}

#[test]
fn a_lookup_slower_than_its_timeout_fails_in_time() {
    let ev = EventLoop::new().unwrap();
    // The lookup answers only when the gate opens, after the checks (or
    // after 60 s): a timeout that did not fire would show as 60 s.
    let (open, wait) = gate();
    let slow = HostResolver::with_lookup(1, move |_, port| {
        wait();
        Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    });
    let t0 = Instant::now();
    let e = ev
        .run_until(slow.lookup(&ev, "slow.test", 1, Duration::from_millis(100)))
        .unwrap_err();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    let f: &Failure = e.failure().expect("a failure");
    let io = f.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), io::ErrorKind::TimedOut);
    assert!(io.to_string().contains("slow.test"), "{io}");

    // Through connect: the connection fails the same way, protocol uncalled.
    let (p, made) = quiet();
    let opts = ConnectOptions::default()
        .with_resolver(slow)
        .with_lookup_timeout(Duration::from_millis(50));
    let e = ev
        .run_until(ev.connect_tcp_with("slow.test:1", p, &opts).connected())
        .unwrap_err()
        .into_failure()
        .unwrap();
    assert!(e.to_string().contains("slow.test"), "{e}");
    assert_eq!(made.get(), 0);
    drop(open);
}

#[test]
fn cancelling_a_connect_during_its_lookup_abandons_it() {
    let ev = EventLoop::new().unwrap();
    let (open, wait) = gate();
    let slow = HostResolver::with_lookup(1, move |_, port| {
        wait();
        Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    });
    let (p, made) = quiet();
    let d = ev
        .connect_tcp_with("slow.test:1", p, &options(slow.clone()))
        .connected();
    d.cancel();
    let e = ev.run_until(d).unwrap_err();
    assert!(e.check::<deferloop::deferred::Cancelled>(), "{e}");
    // The late answer finds nothing to do. The resolver has one thread and
    // its answers come back in order, so once a second lookup has answered,
    // the first one's answer has been handled (no sleep to guess when).
    drop(open);
    let after = slow.lookup(&ev, "other.test", 1, Duration::from_secs(60));
    ev.run_until(after).unwrap();
    assert_eq!(made.get(), 0);
    assert_eq!(ev.io_source_count(), 0);
}

#[test]
fn lookups_do_not_wait_for_a_busy_thread_pool() {
    let ev = EventLoop::new().unwrap();
    ev.set_max_threads(1).unwrap();
    // The pool's one thread is held until the lookup has answered (or 60 s):
    // a lookup that waited for it would take 60 s, so 10 s tells them apart.
    let (open, wait) = gate();
    let busy = ev.defer_to_thread(wait);
    let t0 = Instant::now();
    let addrs = ev
        .run_until(table(vec![closed_port()]).lookup(&ev, "db.test", 1, Duration::from_secs(5)))
        .unwrap();
    assert_eq!(addrs.len(), 1);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    drop(open);
    ev.run_until(busy).unwrap();
}

#[test]
fn udp_connects_to_a_host_name() {
    use deferloop::net::{DatagramProtocol, DatagramTransport};
    struct Echo;
    impl DatagramProtocol for Echo {
        fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], from: SocketAddr) {
            t.send_to(data, from);
        }
    }
    struct Ping(Rc<Cell<bool>>);
    impl DatagramProtocol for Ping {
        fn connection_made(&mut self, t: &DatagramTransport) {
            t.send(b"ping");
        }
        fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], _: SocketAddr) {
            assert_eq!(data, b"ping");
            self.0.set(true);
            t.close();
        }
    }
    let ev = EventLoop::new().unwrap();
    let first = ev
        .run_until(HostResolver::system().lookup(&ev, "localhost", 0, Duration::from_secs(5)))
        .unwrap()[0];
    let server = ev.listen_udp(first, Echo).unwrap();
    let port = server.local_addr().unwrap().port();
    let got = Rc::new(Cell::new(false));
    let _t = ev
        .run_until(ev.connect_udp_to(format!("localhost:{port}").as_str(), Ping(got.clone())))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !got.get() {
        assert!(Instant::now() < deadline);
        ev.call_later(Duration::from_millis(10), |_| {}).unwrap();
        ev.run_once().unwrap();
    }
}

/// A lookup function that panics fails its lookup at once, with the panic's
/// message (it used to surface only as the lookup's timeout).
#[test]
fn a_panicking_lookup_function_fails_the_lookup_with_its_message() {
    let ev = EventLoop::new().unwrap();
    let r = HostResolver::with_lookup(1, |_, _| panic!("resolver-kaput"));
    let t0 = std::time::Instant::now();
    let d = r.lookup(&ev, "any.test", 80, Duration::from_secs(30));
    let f = ev.run_until(d).unwrap_err().into_failure().unwrap();
    assert!(f.to_string().contains("resolver-kaput"), "{f}");
    assert!(t0.elapsed() < Duration::from_secs(10), "not the timeout");
}

/// What [`unanswered_host_connect`] sets up: the loop, its clock, the
/// connect's Deferred, how often the protocol was made, and the black hole
/// (kept open while the test runs).
type Unanswered = (
    EventLoop,
    deferloop::ManualClock,
    deferloop::Deferred<Transport>,
    Rc<Cell<u32>>,
    (TcpListener, Vec<std::net::TcpStream>),
);

/// A host-name connect, on a manual clock, to an address that never
/// answers, with `timeout` (or the default) as its connect timeout. Runs
/// until the lookup answered and the attempt started (a source beside the
/// connection's own).
fn unanswered_host_connect(timeout: Option<Duration>) -> Unanswered {
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let (hole_listener, fillers, hole) = black_hole();
    let (p, made) = quiet();
    let mut conn = ev.connect_tcp_with("db.test:1", p, &options(table(vec![hole])));
    if let Some(t) = timeout {
        conn = conn.connect_timeout(Some(t));
    }
    let d = conn.connected();
    let t0 = Instant::now();
    while ev.io_source_count() < 2 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no attempt started");
        ev.run_once_timeout(Duration::from_millis(10)).unwrap();
    }
    (ev, clock, d, made, (hole_listener, fillers))
}

/// The failure of `d`, which must come at once (well before the kernel's
/// own SYN timeout, about two minutes), with the attempt closed.
fn fails_promptly(ev: &EventLoop, d: deferloop::Deferred<Transport>) -> Failure {
    let t1 = Instant::now();
    let f = ev.run_until(d).unwrap_err().into_failure().unwrap();
    assert!(
        t1.elapsed() < Duration::from_secs(10),
        "not the kernel's timeout"
    );
    assert_eq!(ev.io_source_count(), 0, "the attempt was closed");
    f
}

/// A host-name connect has the same default deadline as `connect_tcp`: 30 s
/// for the lookup and every attempt, then a `TimedOut` naming the host (it
/// used to wait for the kernel's own SYN timeout, about two minutes).
#[test]
fn a_host_name_connect_that_is_never_answered_times_out_at_the_default() {
    let (ev, clock, d, made, _hole) = unanswered_host_connect(None);
    clock.advance(Duration::from_secs(29));
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert!(!d.is_called(), "still trying before 30 s");
    clock.advance(Duration::from_secs(1));
    let f = fails_promptly(&ev, d);
    let e = f.downcast_ref::<io::Error>().expect("an io error");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{f}");
    assert!(
        f.to_string()
            .contains("connect to db.test:1: no answer within 30s"),
        "{f}"
    );
    assert_eq!(made.get(), 0);
}

/// `Connection::connect_timeout` on a host-name connect replaces the default
/// and behaves the same: the error names the host, the attempts close.
#[test]
fn a_host_name_connect_with_its_own_timeout_names_the_host() {
    let (ev, clock, d, _made, _hole) = unanswered_host_connect(Some(Duration::from_secs(5)));
    clock.advance(Duration::from_secs(5));
    let f = fails_promptly(&ev, d);
    assert!(
        f.to_string()
            .contains("connect to db.test:1: no answer within 5s"),
        "{f}"
    );
}
