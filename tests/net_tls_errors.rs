//! TLS failures, each with a clear error where it belongs: a wrong host
//! name, an expired certificate or an unknown CA fail the connect's
//! Deferred; a handshake that never finishes meets its deadline on either
//! side; a peer that closes without close_notify is reported as truncation;
//! a peer that does not speak TLS is a protocol error.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{ClientConfig, TlsError};
use deferloop::net::{Protocol, Transport};
use deferloop::{Deferred, EventLoop, Failure};
use std::cell::RefCell;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::rc::Rc;
use std::time::Duration;
use util::net::{Ev, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// The failure a connect's Deferred ended with (it must fail).
fn connect_failure(ev: &EventLoop, d: Deferred<Transport>) -> Failure {
    let d = d.add_timeout(T, &ev.to_loop());
    match ev.run_until(d) {
        Ok(_) => panic!("the connect succeeded"),
        Err(e) => e.into_failure().expect("the Deferred failed"),
    }
}

/// Connects a recording client to a TLS echo server that uses `server_pki`,
/// as `name`, trusting `client`; returns the failure and what the client saw.
fn failed_connect(server_pki: &tls::Pki, name: &str, client: &ClientConfig) -> (Failure, Vec<Ev>) {
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls(local(), &tls::server(server_pki), || Rec::echo().0)
        .unwrap();
    let (rec, seen) = Rec::new();
    let c = ev.connect_tls(l.local_addr().as_inet().unwrap(), name, client, rec);
    let f = connect_failure(&ev, c.connected());
    // The server dropped its side too: nothing is left open.
    run_until(&ev, T, || l.connection_count() == 0);
    let events = seen.borrow().events.clone();
    (f, events)
}

#[test]
fn a_wrong_host_name_fails_the_connect_and_no_protocol_method_is_called() {
    let logs = util::logs();
    let pki = tls::localhost();
    let (f, events) = failed_connect(&pki, "not-localhost.example", &tls::client(&pki));
    // The server's side, which nobody waits for, is logged (at debug).
    assert!(
        logs.mine()
            .iter()
            .any(|r| r.level == log::Level::Debug && r.message.contains("TLS client")),
        "the server logged its failed handshake"
    );
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{f}");
    assert!(f.to_string().contains("not valid for name"), "{f}");
    assert!(f.to_string().starts_with("connect to 127.0.0.1:"), "{f}");
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn an_expired_certificate_fails_the_connect() {
    let pki = tls::pki(&["localhost"], true);
    let (f, events) = failed_connect(&pki, "localhost", &tls::client(&pki));
    assert!(f.to_string().to_lowercase().contains("expired"), "{f}");
    assert!(events.is_empty());
}

#[test]
fn a_certificate_from_an_unknown_ca_fails_the_connect() {
    let pki = tls::localhost();
    let other = tls::localhost();
    let (f, _) = failed_connect(&pki, "localhost", &tls::client(&other));
    // Both CAs have the same name: the signature is what fails.
    assert!(f.to_string().contains("invalid peer certificate"), "{f}");
}

#[test]
fn skipping_verification_for_tests_accepts_any_certificate() {
    let pki = tls::pki(&["elsewhere.example"], true);
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls(local(), &tls::server(&pki), || Rec::echo().0)
        .unwrap();
    let client = ClientConfig::new().dangerous_skip_verification_for_tests();
    let c = ev.connect_tls(
        l.local_addr().as_inet().unwrap(),
        "localhost",
        &client,
        Rec::new().0,
    );
    let t = ev
        .run_until(c.connected().add_timeout(T, &ev.to_loop()))
        .unwrap();
    assert!(t.is_tls_handshake_done());
}

#[test]
fn a_client_that_never_finishes_its_handshake_is_dropped_at_the_deadline() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let server = tls::server(&pki).with_handshake_timeout(Duration::from_millis(200));
    let (rec, seen) = Rec::new();
    let mut rec = Some(rec);
    let l = ev
        .listen_tls(local(), &server, move || rec.take().unwrap())
        .unwrap();
    let mut silent = TcpStream::connect(l.local_addr().as_inet().unwrap()).unwrap();
    run_until(&ev, T, || l.accepted() == 1);
    assert_eq!(l.connection_count(), 1);
    let started = std::time::Instant::now();
    run_until(&ev, T, || l.connection_count() == 0);
    assert!(started.elapsed() >= Duration::from_millis(150));
    // The server closed the socket; its protocol was never called.
    silent.set_read_timeout(Some(T)).unwrap();
    assert_eq!(silent.read(&mut [0; 16]).unwrap(), 0);
    assert!(seen.borrow().events.is_empty());
}

#[test]
fn a_server_that_never_answers_fails_the_connect_at_the_deadline() {
    let mute = TcpListener::bind(local()).unwrap();
    let ev = EventLoop::new().unwrap();
    let client = ClientConfig::new().with_handshake_timeout(Duration::from_millis(200));
    let c = ev.connect_tls(
        mute.local_addr().unwrap(),
        "localhost",
        &client,
        Rec::new().0,
    );
    let f = connect_failure(&ev, c.connected());
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{f}");
    assert!(
        f.to_string()
            .contains("TLS handshake not done within 200ms"),
        "{f}"
    );
}

/// Sends a line, then half-closes the socket itself: a FIN, no close_notify.
/// Records what `shutdown` returned, if there was an fd (checked by the test,
/// not here: the loop contains a protocol's panics).
struct Truncates(Rc<RefCell<Vec<Option<i32>>>>);
impl Protocol for Truncates {
    fn connection_made(&mut self, t: &Transport) {
        t.write(b"partial");
    }
    fn data_received(&mut self, t: &Transport, _: &[u8]) {
        // The server's echo: everything was read; now cut the stream.
        let fd = t.raw_fd();
        // SAFETY: shutdown on the connection's own open socket.
        let r = fd.map(|fd| unsafe { libc::shutdown(fd, libc::SHUT_WR) });
        self.0.borrow_mut().push(r);
    }
}

#[test]
fn a_peer_that_closes_without_close_notify_is_reported_as_truncation() {
    let pki = tls::localhost();
    let shut = Rc::new(RefCell::new(Vec::new()));
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let mut rec = Some(rec);
    let l = ev
        .listen_tls(local(), &tls::server(&pki), move || rec.take().unwrap())
        .unwrap();
    let c = ev.connect_tls(
        l.local_addr().as_inet().unwrap(),
        "localhost",
        &tls::client(&pki),
        Truncates(shut.clone()),
    );
    let _t = c.transport().clone();
    run_until(&ev, T, || {
        matches!(seen.borrow().events.last(), Some(Ev::Lost(_)))
    });
    assert!(!shut.borrow().is_empty(), "data_received ran");
    for r in shut.borrow().iter() {
        let r = r.unwrap();
        assert_eq!(r, 0);
    }
    let s = seen.borrow();
    assert_eq!(s.bytes, b"partial");
    assert!(
        !s.events.contains(&Ev::Eof),
        "not a clean end: {:?}",
        s.events
    );
    let f = s.reason.as_ref().expect("a reason");
    assert!(matches!(TlsError::of(f), Some(TlsError::Truncated)), "{f}");
    assert_eq!(
        f.downcast_ref::<std::io::Error>().unwrap().kind(),
        ErrorKind::UnexpectedEof
    );
    assert!(f.to_string().contains("without close_notify"), "{f}");
}

/// Greets in plain text: not TLS.
struct PlainGreeter;
impl Protocol for PlainGreeter {
    fn connection_made(&mut self, t: &Transport) {
        t.write(b"220 plain text here, no TLS\r\n");
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn a_peer_that_does_not_speak_tls_is_a_protocol_error() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let l = ev.listen_tcp(local(), || PlainGreeter).unwrap();
    let c = ev.connect_tls(
        l.local_addr().as_inet().unwrap(),
        "localhost",
        &tls::client(&pki),
        Rec::new().0,
    );
    let f = connect_failure(&ev, c.connected());
    assert_eq!(
        f.downcast_ref::<std::io::Error>().unwrap().kind(),
        ErrorKind::InvalidData,
        "{f}"
    );
    assert!(f.to_string().contains("TLS: "), "{f}");
}

#[test]
fn a_plain_client_at_a_tls_server_never_reaches_a_protocol() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let mut rec = Some(rec);
    let l = ev
        .listen_tls(local(), &tls::server(&pki), move || rec.take().unwrap())
        .unwrap();
    let mut plain = TcpStream::connect(l.local_addr().as_inet().unwrap()).unwrap();
    std::io::Write::write_all(&mut plain, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    run_until(&ev, T, || l.accepted() == 1);
    run_until(&ev, T, || l.connection_count() == 0);
    assert!(seen.borrow().events.is_empty());
    let _ = plain.as_raw_fd();
}

/// As over plain TCP (tests/net_faults.rs): a reset that arrives while a TLS
/// connection's reading is paused is noticed at once, not when reading
/// resumes (which may be never).
#[test]
fn a_reset_while_a_tls_connection_is_paused_loses_it() {
    use std::sync::mpsc;
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let mut slot = Some(Rec {
        keep_open: true,
        ..rec
    });
    let l = ev
        .listen_tls(local(), &tls::server(&pki), move || slot.take().unwrap())
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    // A blocking rustls client on a std socket, which it resets when told.
    let (go, wait) = mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let (sock, _c) = tls::raw_connect(&pki, addr);
        wait.recv().unwrap();
        util::net::reset(sock);
    });
    run_until(&ev, T, || seen.borrow().transport.is_some());
    let t = seen.borrow().transport.clone().unwrap();
    t.pause_reading();
    go.send(()).unwrap();
    client.join().unwrap();
    run_until(&ev, T, || util::net::lost_count(&seen) == 1);
    let s = seen.borrow();
    let reason = s.reason.as_ref().expect("lost with an error");
    let e = reason
        .downcast_ref::<std::io::Error>()
        .expect("an io error");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{reason}");
}
