//! TLS over loopback: echo through an unchanged protocol (small, and 4 MiB
//! with flow control engaged), a framer over TLS, IPv6, ALPN, and a clean
//! close with close_notify on both sides.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::framing::{FrameProtocol, Lines};
use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use util::net::{assert_lifecycle, Ev, Rec, Shared};
use util::run_until;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Sends `msg` once connected; closes after `want` bytes came back.
struct SendThenClose {
    rec: Rec,
    msg: Vec<u8>,
    want: usize,
}

impl Protocol for SendThenClose {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        t.write(&self.msg);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
        if self.rec.seen.borrow().bytes.len() >= self.want {
            t.close();
        }
    }
    fn pause_writing(&mut self, t: &Transport) {
        self.rec.pause_writing(t);
    }
    fn resume_writing(&mut self, t: &Transport) {
        self.rec.resume_writing(t);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

/// Echoes `msg` over TLS and checks both ends; returns what the client saw.
fn echo_round_trip(addr: SocketAddr, msg: Vec<u8>) -> Shared {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let listener = ev
        .listen_tls(addr, &tls::server(&pki), move || {
            let (r, s) = Rec::echo();
            s2.borrow_mut().push(s);
            r
        })
        .unwrap();
    let addr = listener.local_addr().as_inet().unwrap();
    let (rec, client) = Rec::new();
    let want = msg.len();
    let name = if addr.is_ipv6() { "::1" } else { "localhost" };
    let conn = ev.connect_tls(
        addr,
        name,
        &tls::client(&pki),
        SendThenClose {
            rec,
            msg: msg.clone(),
            want,
        },
    );
    let d = conn.connected();
    run_until(&ev, T, || {
        matches!(client.borrow().events.last(), Some(Ev::Lost(_)))
            && servers
                .borrow()
                .first()
                .is_some_and(|s| matches!(s.borrow().events.last(), Some(Ev::Lost(_))))
    });
    assert!(d.result().is_ok_and(|r| r.is_ok()));
    assert_lifecycle(&client);
    let server = servers.borrow()[0].clone();
    assert_lifecycle(&server);
    assert_eq!(client.borrow().bytes, msg);
    assert_eq!(server.borrow().bytes, msg);
    // Clean on both sides: the client closed with close_notify, the server
    // read it as an end-of-file and closed with its own.
    assert_eq!(client.borrow().events.last(), Some(&Ev::Lost(None)));
    assert!(server.borrow().events.contains(&Ev::Eof));
    assert_eq!(server.borrow().events.last(), Some(&Ev::Lost(None)));
    client
}

#[test]
fn echo_of_one_byte_then_close_notify_on_both_sides() {
    echo_round_trip(local(), b"x".to_vec());
}

#[test]
fn echo_of_four_mib_with_flow_control_engaged() {
    let msg: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
    let client = echo_round_trip(local(), msg);
    // 4 MiB written at once is far over the write buffer's high-water mark.
    let ev = &client.borrow().events;
    let paused = ev.iter().position(|e| *e == Ev::PauseWriting);
    let resumed = ev.iter().position(|e| *e == Ev::ResumeWriting);
    assert!(
        matches!((paused, resumed), (Some(p), Some(r)) if p < r),
        "paused, then resumed: {:?}",
        ev.iter()
            .filter(|e| !matches!(e, Ev::Data(_)))
            .collect::<Vec<_>>()
    );
}

#[test]
fn echo_over_ipv6_checks_the_address_in_the_certificate() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        return; // no IPv6 on this machine
    }
    echo_round_trip("[::1]:0".parse().unwrap(), b"over v6".to_vec());
}

/// Answers each line with its length: a framer, unchanged, over TLS.
struct Len;
impl FrameProtocol for Len {
    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        t.write(format!("{}\r\n", line.len()).as_bytes());
    }
}

#[test]
fn a_framer_runs_over_tls_unchanged() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls(local(), &tls::server(&pki), || Lines::new(Len))
        .unwrap();
    let (rec, client) = Rec::new();
    let p = SendThenClose {
        rec,
        msg: b"ne\r\n".to_vec(),
        want: 7,
    };
    let c = ev.connect_tls(
        l.local_addr().as_inet().unwrap(),
        "localhost",
        &tls::client(&pki),
        p,
    );
    let t = c.transport().clone();
    // Before the handshake: sent first, once it is done.
    t.write(b"hello\r\nsplit li");
    run_until(&ev, T, || {
        matches!(client.borrow().events.last(), Some(Ev::Lost(_)))
    });
    assert_eq!(client.borrow().bytes, b"5\r\n10\r\n");
}

/// Records the ALPN protocol agreed when the connection is made, and whether
/// the handshake was done by then (checked by the test, not here: the loop
/// contains a protocol's panics).
struct Alpn(Rc<RefCell<Option<Option<Vec<u8>>>>>, Rc<RefCell<Vec<bool>>>);
impl Protocol for Alpn {
    fn connection_made(&mut self, t: &Transport) {
        self.1
            .borrow_mut()
            .push(t.is_tls() && t.is_tls_handshake_done());
        *self.0.borrow_mut() = Some(t.tls_alpn_protocol());
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn alpn_is_agreed_before_connection_made_on_both_sides() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let seen_server = Rc::new(RefCell::new(None));
    let done = Rc::new(RefCell::new(Vec::new()));
    let (s2, d2) = (seen_server.clone(), done.clone());
    let server = tls::server(&pki).with_alpn(&[b"h2", b"echo/1"]);
    let l = ev
        .listen_tls(local(), &server, move || Alpn(s2.clone(), d2.clone()))
        .unwrap();
    let seen_client = Rc::new(RefCell::new(None));
    let client = tls::client(&pki).with_alpn(&[b"echo/1", b"http/1.1"]);
    let c = ev.connect_tls(
        l.local_addr().as_inet().unwrap(),
        "localhost",
        &client,
        Alpn(seen_client.clone(), done.clone()),
    );
    let t = ev.run_until(c.connected()).unwrap();
    run_until(&ev, T, || seen_server.borrow().is_some());
    assert_eq!(done.borrow().len(), 2, "connection_made ran on both sides");
    for &d in done.borrow().iter() {
        assert!(d);
    }
    assert_eq!(*seen_client.borrow(), Some(Some(b"echo/1".to_vec())));
    assert_eq!(*seen_server.borrow(), Some(Some(b"echo/1".to_vec())));
    assert!(t.tls_protocol_version().is_some());
    assert!(t.tls_peer_certificates().is_some_and(|c| !c.is_empty()));
}

#[test]
fn a_plain_connection_says_it_is_not_tls() {
    let ev = EventLoop::new().unwrap();
    let (t, _peer) = deferloop::net::memory::open(&ev, Rec::new().0).unwrap();
    assert!(!t.is_tls());
    assert!(!t.is_tls_handshake_done());
    assert_eq!(t.tls_alpn_protocol(), None);
}
