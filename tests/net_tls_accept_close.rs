//! A TLS listener's life around accept and close: the protocol is built at
//! accept, before the handshake (asyncio's and Twisted's order); a one-shot
//! client that closes right after writing ends cleanly on the server; a
//! failed connect keeps its TLS error reachable through the source chain.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::TlsError;
use deferloop::net::SockAddr;
use deferloop::EventLoop;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use util::net::{Ev, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(20);

fn inet(a: &SockAddr) -> std::net::SocketAddr {
    a.as_inet().expect("an inet address")
}

/// The factory runs when the TCP connection is accepted, before any byte of
/// the handshake; `connection_made` waits for the handshake. A client that
/// never handshakes gets a protocol built but never called.
#[test]
fn a_tls_listener_builds_its_protocol_at_accept_and_calls_it_after_the_handshake() {
    let ev = EventLoop::new().unwrap();
    let pki = tls::localhost();
    let built = Rc::new(Cell::new(0));
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (b, s) = (built.clone(), seen.clone());
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || {
                b.set(b.get() + 1);
                let (rec, shared) = Rec::echo();
                s.borrow_mut().push(shared);
                rec
            },
        )
        .unwrap();
    let to = inet(l.local_addr());
    // A plain TCP client that sends nothing: no handshake.
    let silent = std::net::TcpStream::connect(to).unwrap();
    run_until(&ev, T, || built.get() == 1);
    assert!(
        seen.borrow()[0].borrow().events.is_empty(),
        "connection_made before the handshake"
    );
    drop(silent);
    // A TLS client: the handshake, then connection_made on the second protocol.
    let c = ev.connect_tls(to, "localhost", &tls::client(&pki), Rec::new().0);
    ev.run_until(c.connected().add_timeout(T, &ev)).unwrap();
    run_until(&ev, T, || {
        seen.borrow().len() == 2 && !seen.borrow()[1].borrow().events.is_empty()
    });
    assert_eq!(built.get(), 2);
    assert!(matches!(seen.borrow()[1].borrow().events[0], Ev::Made));
    assert!(
        seen.borrow()[0].borrow().events.is_empty(),
        "the silent client's protocol was called"
    );
}

/// A TLS 1.3 client that writes, sends its close_notify and closes at once,
/// with the server's session tickets unread (so its close resets the
/// connection): the server gets the data, the end, and a clean
/// `connection_lost(None)` — its own close_notify, which can no longer be
/// sent, is not an error once the peer's has arrived.
#[test]
fn a_one_shot_tls_client_ends_cleanly_on_the_server() {
    use std::io::Write;
    let ev = EventLoop::new().unwrap();
    let pki = tls::localhost();
    let seen = Rc::new(std::cell::RefCell::new(Vec::new()));
    let s = seen.clone();
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || {
                let (rec, shared) = Rec::new();
                s.borrow_mut().push(shared);
                rec
            },
        )
        .unwrap();
    let to = inet(l.local_addr());
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, to);
        // Wait until the server's session tickets are in the socket, unread:
        // closing then sends a reset instead of a FIN.
        let mut one = [0u8; 1];
        assert_eq!(sock.peek(&mut one).unwrap(), 1);
        c.writer().write_all(b"one request").unwrap();
        c.send_close_notify();
        while c.wants_write() {
            c.write_tls(&mut sock).unwrap();
        }
        drop(sock);
    });
    run_until(&ev, T, || {
        seen.borrow()
            .first()
            .is_some_and(|s| s.borrow().events.iter().any(|e| matches!(e, Ev::Lost(_))))
    });
    client.join().unwrap();
    let s = seen.borrow()[0].clone();
    let s = s.borrow();
    assert_eq!(s.bytes, b"one request");
    assert!(
        s.events.iter().any(|e| matches!(e, Ev::Eof)),
        "{:?}",
        s.events
    );
    assert!(s.reason.is_none(), "a clean end reported as {:?}", s.reason);
}

/// A failed TLS connect: the `TlsError` is found by walking the source chain
/// of the failure, and of the `deferloop::Error` it reaches `main` as; the
/// chain's text names the address once and the reason once.
#[test]
fn a_failed_tls_connect_keeps_its_tls_error_in_the_source_chain() {
    let ev = EventLoop::new().unwrap();
    let pki = tls::localhost();
    let l = ev
        .listen_tls("127.0.0.1:0".parse().unwrap(), &tls::server(&pki), || {
            Rec::echo().0
        })
        .unwrap();
    let to = inet(l.local_addr());
    let c = ev.connect_tls(
        to,
        "not-localhost.example",
        &tls::client(&pki),
        Rec::new().0,
    );
    let e = ev
        .run_until(c.connected().add_timeout(T, &ev))
        .expect_err("a wrong name fails");
    let f = e.failure().expect("a failure").clone();
    let mut chain: Option<&(dyn std::error::Error + 'static)> = Some(f.error());
    let mut found = false;
    while let Some(err) = chain {
        found |= err.downcast_ref::<TlsError>().is_some();
        chain = err.source();
    }
    assert!(found, "no TlsError in the chain of {f}");
    let mut chain: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut found = false;
    while let Some(err) = chain {
        found |= matches!(err.downcast_ref::<TlsError>(), Some(TlsError::Rustls(_)));
        chain = err.source();
    }
    assert!(found, "no TlsError in the chain of {e:#}");
    assert!(TlsError::of(&f).is_some(), "TlsError::of finds it");
    let text = format!("{e:#}");
    assert_eq!(text.matches("connect to").count(), 1, "{text}");
    assert_eq!(text.matches("not valid for name").count(), 1, "{text}");
}
