//! A relay whose upstream refuses the connection fails with the refusal, as
//! its rustdoc promises, and closes the client side.

use deferloop::net::{relay, Stream};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::io;
use std::net::TcpListener;
use std::rc::Rc;

/// A 127.0.0.1 port nobody listens on: bound, then released.
fn refused_port() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn assert_refused(f: &Failure) {
    let e = f
        .downcast_ref::<io::Error>()
        .unwrap_or_else(|| panic!("not an io::Error: {f:?}"));
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{f:?}");
}

#[test]
fn a_relay_to_a_refusing_upstream_fails_with_the_refusal() {
    let ev = EventLoop::new().unwrap();
    let (client, peer) = Stream::open_memory(&ev).unwrap();
    let upstream = Stream::connect(&ev, refused_port());
    let relayed = relay(&client, &upstream);
    let f: Failure = match ev.run_until(relayed) {
        Err(deferloop::Error::Failed(f)) => f,
        other => panic!("expected the relay to fail, got {other:?}"),
    };
    assert_refused(&f);
    // The client side is closed as well.
    for _ in 0..10 {
        if peer.is_closed() {
            break;
        }
        ev.run_once_timeout(std::time::Duration::ZERO).unwrap();
    }
    assert!(peer.is_closed());
}

type Outcome = Result<(u64, u64), Failure>;

/// The rustdoc's proxy: a relay started in a listener's callback, for a
/// TCP client, to an upstream that refuses.
#[test]
fn a_proxy_s_relay_to_a_refusing_upstream_fails_with_the_refusal() {
    let ev = EventLoop::new().unwrap();
    let target = refused_port();
    let lp = ev.to_loop();
    let outcome: Rc<RefCell<Option<Outcome>>> = Rc::default();
    let o = outcome.clone();
    let l = Stream::listen_tcp(&ev, "127.0.0.1:0".parse().unwrap(), move |client| {
        let o = o.clone();
        let _ = relay(&client, &Stream::connect(&lp, target)).add_both(move |r| {
            *o.borrow_mut() = Some(r);
            Ok::<(), Failure>(())
        });
    })
    .unwrap();
    let to = l.local_addr().as_inet().unwrap();
    let mut c = std::net::TcpStream::connect(to).unwrap();
    for _ in 0..1000 {
        if outcome.borrow().is_some() {
            break;
        }
        let _ = ev.call_later(std::time::Duration::from_millis(5), |_| {});
        ev.run_once().unwrap();
    }
    match outcome.borrow_mut().take() {
        Some(Err(f)) => assert_refused(&f),
        other => panic!("expected the relay to fail, got {other:?}"),
    }
    // The client is closed: it reads its end of file.
    c.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 8];
    let mut ended = false;
    for _ in 0..1000 {
        match std::io::Read::read(&mut c, &mut buf) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => panic!("{n} unexpected bytes"),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        let _ = ev.call_later(std::time::Duration::from_millis(5), |_| {});
        ev.run_once().unwrap();
    }
    assert!(ended, "the client was not closed");
}
