//! A TLS listener's life around accept and close: the protocol is built at
//! accept, before the handshake (asyncio's and Twisted's order); a one-shot
//! client that closes right after writing ends cleanly on the server; a
//! failed connect keeps its TLS error reachable through the source chain.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

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
