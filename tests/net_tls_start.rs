//! `start_tls` on a connection that began in the clear (STARTTLS): what was
//! buffered before the upgrade goes out first, in the clear; handshake bytes
//! that arrived with the last plaintext are handed back; writes made during
//! the handshake wait for it; the handshake has a deadline.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{rustls, ServerConfig, StartTls, TlsError};
use deferloop::net::{memory, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use util::net::{Ev, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A line server: on `STARTTLS` it answers `GO` (in two writes, so the
/// second is still buffered) and upgrades, handing back what followed the
/// line; after that it echoes.
struct Server {
    rec: Rec,
    config: ServerConfig,
    buf: Vec<u8>,
    upgraded: bool,
    upgrade: Upgrade,
}

/// What the server saw at the STARTTLS line (checked by the test, not in the
/// protocol: the loop contains its panics): the line, what `start_tls`
/// returned, and whether the transport was then TLS with the handshake not done.
type Upgrade = Rc<RefCell<Option<(Vec<u8>, Result<(), deferloop::Error>, bool)>>>;

/// Asserts what the server saw at the STARTTLS line.
fn assert_upgrade(upgrade: &Upgrade) {
    let (line, started, state) = upgrade
        .borrow_mut()
        .take()
        .expect("the STARTTLS line arrived");
    assert_eq!(&line[..], b"STARTTLS");
    started.unwrap();
    assert!(state);
}

impl Protocol for Server {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if self.upgraded {
            return self.rec.data_received(t, data);
        }
        self.buf.extend_from_slice(data);
        let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") else {
            return;
        };
        let line = self.buf[..end].to_vec();
        t.write(b"GO");
        t.write(b"\r\n"); // the same turn: still buffered at the upgrade
        let rest = self.buf.split_off(end + 2);
        let started = t.start_tls(StartTls::server(&self.config).with_received(&rest));
        self.upgraded = started.is_ok();
        let state = t.is_tls() && !t.is_tls_handshake_done();
        *self.upgrade.borrow_mut() = Some((line, started, state));
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        self.rec.eof_received(t)
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason)
    }
}

fn server(config: ServerConfig, upgrade: &Upgrade) -> (Server, util::net::Shared) {
    let (mut rec, seen) = Rec::new();
    rec.echo = true;
    let s = Server {
        rec,
        config,
        buf: Vec::new(),
        upgraded: false,
        upgrade: upgrade.clone(),
    };
    (s, seen)
}

/// Asks for STARTTLS, upgrades on `GO`, sends a secret, closes on its echo.
struct Client {
    config: deferloop::net::tls::ClientConfig,
    clear: Vec<u8>,
    rec: Rec,
}

impl Protocol for Client {
    fn connection_made(&mut self, t: &Transport) {
        t.write(b"STARTTLS\r\n");
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if !t.is_tls() {
            self.clear.extend_from_slice(data);
            if self.clear.ends_with(b"GO\r\n") {
                t.start_tls(StartTls::client(&self.config, "localhost"))
                    .unwrap();
                t.write(b"secret"); // held until the handshake is done
            }
            return;
        }
        self.rec.data_received(t, data);
        if self.rec.seen.borrow().bytes == b"secret" {
            t.close();
        }
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason)
    }
}

#[test]
fn start_tls_mid_stream_sends_what_was_buffered_in_the_clear_first() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let seen_server = Rc::new(RefCell::new(None));
    let s2 = seen_server.clone();
    let upgrade: Upgrade = Rc::default();
    let u2 = upgrade.clone();
    let config = tls::server(&pki);
    let l = ev
        .listen_tcp(local(), move || {
            let (s, seen) = server(config.clone(), &u2);
            *s2.borrow_mut() = Some(seen);
            s
        })
        .unwrap();
    let (rec, seen_client) = Rec::new();
    let client = Client {
        config: tls::client(&pki),
        clear: Vec::new(),
        rec,
    };
    let c = ev.connect_tcp(l.local_addr().as_inet().unwrap(), client);
    let t = c.transport().clone();
    run_until(&ev, T, || {
        matches!(seen_client.borrow().events.last(), Some(Ev::Lost(_)))
            && seen_server
                .borrow()
                .as_ref()
                .is_some_and(|s| matches!(s.borrow().events.last(), Some(Ev::Lost(_))))
    });
    assert_upgrade(&upgrade);
    assert_eq!(seen_client.borrow().bytes, b"secret");
    assert_eq!(seen_client.borrow().events.last(), Some(&Ev::Lost(None)));
    let server_seen = seen_server.borrow().clone().unwrap();
    assert_eq!(server_seen.borrow().bytes, b"secret");
    assert!(server_seen.borrow().events.contains(&Ev::Eof));
    assert_eq!(server_seen.borrow().events.last(), Some(&Ev::Lost(None)));
    assert!(!t.is_tls()); // gone
}

/// Runs the loop until nothing is left to do this turn.
fn turn(ev: &EventLoop) {
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
}

#[test]
fn handshake_bytes_that_came_with_the_starttls_line_are_handed_back() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let upgrade: Upgrade = Rc::default();
    let (s, seen) = server(tls::server(&pki), &upgrade);
    let (_t, peer) = memory::open(&ev, s).unwrap();
    // A client that pipelines: its ClientHello right behind the line.
    let name = "localhost".try_into().unwrap();
    let mut client = rustls::ClientConnection::new(tls::raw_client(&pki), name).unwrap();
    let mut first = b"STARTTLS\r\n".to_vec();
    client.write_tls(&mut first).unwrap();
    peer.send(&first);
    let mut clear = Vec::new();
    let mut echoed = Vec::new();
    let mut sent = false;
    for _ in 0..100 {
        turn(&ev);
        let mut out = peer.take_written();
        if clear.len() < 4 {
            let k = (4 - clear.len()).min(out.len());
            clear.extend(out.drain(..k));
        }
        let mut from = &out[..];
        while !from.is_empty() {
            client.read_tls(&mut from).unwrap();
            client.process_new_packets().unwrap();
        }
        if !client.is_handshaking() && !sent {
            client.writer().write_all(b"secret").unwrap();
            sent = true;
        }
        let mut to = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut to).unwrap();
        }
        if !to.is_empty() {
            peer.send(&to);
        }
        let mut buf = [0; 64];
        if let Ok(n) = client.reader().read(&mut buf) {
            echoed.extend_from_slice(&buf[..n]);
        }
        if echoed == b"secret" {
            break;
        }
    }
    assert_upgrade(&upgrade);
    assert_eq!(clear, b"GO\r\n");
    assert_eq!(echoed, b"secret");
    assert_eq!(seen.borrow().bytes, b"secret");
}

#[test]
fn start_tls_twice_or_on_a_closing_connection_is_refused() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let (t, _peer) = memory::open(&ev, Rec::new().0).unwrap();
    t.start_tls(StartTls::server(&tls::server(&pki))).unwrap();
    assert!(t.start_tls(StartTls::server(&tls::server(&pki))).is_err());
    let (t2, _peer2) = memory::open(&ev, Rec::new().0).unwrap();
    t2.close();
    assert!(t2.start_tls(StartTls::server(&tls::server(&pki))).is_err());
}

#[test]
fn a_start_tls_handshake_that_never_finishes_aborts_at_the_deadline() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let config = tls::server(&pki).with_handshake_timeout(Duration::from_millis(100));
    t.start_tls(StartTls::server(&config)).unwrap();
    run_until(&ev, T, || {
        matches!(seen.borrow().events.last(), Some(Ev::Lost(_)))
    });
    let f = seen.borrow().reason.clone().expect("a reason");
    assert!(
        matches!(TlsError::of(&f), Some(TlsError::HandshakeTimeout(_))),
        "{f}"
    );
    assert!(peer.is_closed());
}

/// A line server over the `Lines` framer that upgrades on `STARTTLS`, and
/// records every line it is given.
struct FramedStartTls {
    config: ServerConfig,
    lines: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl deferloop::net::framing::FrameProtocol for FramedStartTls {
    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        self.lines.borrow_mut().push(line.to_vec());
        if line == b"STARTTLS" {
            t.write(b"GO\r\n");
            let _ = t.start_tls(StartTls::server(&self.config));
        }
    }
}

/// CVE-2011-0411's injection: commands that came in the clear behind
/// `STARTTLS`, in the same read (or queued behind it for a later turn),
/// are never handed to the protocol as if they had come over TLS.
#[test]
fn a_framer_drops_clear_text_that_followed_starttls_in_the_same_read() {
    use deferloop::net::framing::Lines;
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    for per_turn in [64, 1] {
        let lines = Rc::new(RefCell::new(Vec::new()));
        let mut framer = Lines::new(FramedStartTls {
            config: tls::server(&pki),
            lines: lines.clone(),
        });
        framer.set_frames_per_turn(std::num::NonZeroUsize::new(per_turn).unwrap());
        let (t, peer) = memory::open(&ev, framer).unwrap();
        peer.send(b"HELO\r\nSTARTTLS\r\nRSET\r\nMAIL FROM:<evil>\r\n");
        for _ in 0..5 {
            turn(&ev);
        }
        assert!(t.is_tls(), "upgrading");
        let got: Vec<String> = lines
            .borrow()
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        assert_eq!(got, ["HELO", "STARTTLS"], "{per_turn} per turn");
    }
}

/// Records each line, and whether the connection was TLS when it came;
/// pauses reading at `STARTTLS`, leaving the upgrade to the test.
struct PausesAtStartTls {
    lines: Rc<RefCell<Vec<(String, bool)>>>,
}

impl deferloop::net::framing::FrameProtocol for PausesAtStartTls {
    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line).into_owned();
        if line == "STARTTLS" {
            t.pause_reading();
        }
        self.lines.borrow_mut().push((line, t.is_tls()));
    }
}

/// The same injection when the upgrade comes later than `frame_received`
/// (a protocol that pauses, answers from a callback, starts TLS, then
/// resumes; or one whose lines wait for the next turns): lines that came
/// in the clear are never delivered once the connection is TLS.
#[test]
fn clear_text_held_back_is_dropped_when_tls_starts_later() {
    use deferloop::net::framing::Lines;
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    // Paused at STARTTLS; or a line a turn, upgraded after the first.
    for per_turn in [64, 1] {
        let lines = Rc::new(RefCell::new(Vec::new()));
        let mut framer = Lines::new(PausesAtStartTls {
            lines: lines.clone(),
        });
        framer.set_frames_per_turn(std::num::NonZeroUsize::new(per_turn).unwrap());
        let (t, peer) = memory::open(&ev, framer).unwrap();
        peer.send(b"HELO\r\nSTARTTLS\r\nRSET\r\nMAIL FROM:<evil>\r\n");
        turn(&ev);
        t.write(b"GO\r\n");
        t.start_tls(StartTls::server(&tls::server(&pki))).unwrap();
        t.resume_reading();
        for _ in 0..5 {
            turn(&ev);
        }
        let lines = lines.borrow();
        assert!(
            lines.iter().all(|(_, tls)| !tls),
            "{per_turn} per turn: {lines:?}"
        );
        let want: &[&str] = if per_turn == 1 {
            &["HELO"]
        } else {
            &["HELO", "STARTTLS"]
        };
        let got: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(got, want, "{per_turn} per turn");
    }
}
