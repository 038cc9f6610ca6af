//! Connections you can hold: `connect_tcp` hands out the transport and a typed
//! protocol handle at once; writes made before the connection is up are sent
//! once it is; a failed or abandoned connect never calls the protocol; a
//! listener's factory learns the peer; a transport kept in its own protocol
//! keeps nothing alive.

mod util;

use deferloop::net::{Protocol, SockAddr, Transport};
use deferloop::{Error, EventLoop};
use std::cell::{Cell, RefCell};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::time::Duration;
use util::net::{Ev, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(10);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn writes_before_the_connection_is_up_are_sent_once_it_is() {
    let ev = EventLoop::new().unwrap();
    let peer = TcpListener::bind(local()).unwrap();
    let addr = peer.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = peer.accept().unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all
    });
    let (rec, seen) = Rec::new();
    let conn = ev.connect_tcp(addr, rec);
    let t = conn.transport().clone();
    assert!(t.is_connecting());
    assert!(!t.is_closing());
    t.write(b"hello ");
    t.write(b"world");
    t.close(); // closes once up and flushed
    assert!(t.write_buffer_size() > 0, "held until the connection is up");
    ev.run_until(conn.connected()).unwrap();
    run_until(&ev, T, || util::net::lost_count(&seen) == 1);
    assert_eq!(reader.join().unwrap(), b"hello world");
    assert_eq!(seen.borrow().events, [Ev::Made, Ev::Lost(None)]);
}

#[test]
fn a_refused_connect_fails_its_deferred_and_never_calls_the_protocol() {
    let ev = EventLoop::new().unwrap();
    // A port nobody listens on: bind, note it, close.
    let addr = TcpListener::bind(local()).unwrap().local_addr().unwrap();
    let (rec, seen) = Rec::new();
    let conn = ev.connect_tcp(addr, rec);
    let (t, proto, connected) = conn.into_parts();
    t.write(b"lost");
    let f = ev.run_until(connected).unwrap_err().into_failure().unwrap();
    assert!(f.to_string().contains(&addr.to_string()), "{f}");
    assert!(
        seen.borrow().events.is_empty(),
        "no protocol method was called"
    );
    assert!(t.is_closing());
    assert!(matches!(proto.with(|_| ()), Err(Error::Gone)));
}

#[test]
fn aborting_a_connect_in_progress_abandons_it() {
    let ev = EventLoop::new().unwrap();
    let l = ev.listen_tcp(local(), || Rec::new().0).unwrap();
    let (rec, seen) = Rec::new();
    let conn = ev.connect_tcp(l.local_addr().as_inet().unwrap(), rec);
    conn.transport().abort();
    let f = ev.run_until(conn.connected()).unwrap_err();
    assert!(
        f.check::<std::io::Error>(),
        "an io error (ConnectionAborted): {f}"
    );
    assert!(seen.borrow().events.is_empty());
}

/// The abort may come from inside `ProtocolRef::with`, while the protocol is
/// lent out: the connect is abandoned all the same, and the protocol is
/// dropped once nothing holds the connection.
#[test]
fn aborting_a_connect_from_inside_protocol_ref_with_abandons_it() {
    let ev = EventLoop::new().unwrap();
    let l = ev.listen_tcp(local(), || Rec::new().0).unwrap();
    let (rec, seen) = Rec::new();
    let conn = ev.connect_tcp(l.local_addr().as_inet().unwrap(), rec);
    let t = conn.transport().clone();
    let proto = conn.protocol().clone();
    proto.with(|_| t.abort()).unwrap();
    assert!(ev.run_until(conn.connected()).is_err());
    assert!(seen.borrow().events.is_empty(), "no protocol method ran");
    drop(t);
    assert!(matches!(proto.with(|_| ()), Err(Error::Gone)));
}

/// Counts its data; `in_use` records what reaching itself through its own
/// `ProtocolRef` returned from inside one of its methods.
#[derive(Default)]
struct Counter {
    bytes: usize,
    me: Option<deferloop::net::ProtocolRef<Counter>>,
    in_use: Rc<Cell<Option<bool>>>,
}

impl Protocol for Counter {
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.bytes += data.len();
        if let Some(me) = &self.me {
            self.in_use
                .set(Some(matches!(me.with(|_| ()), Err(Error::InUse))));
        }
    }
}

#[test]
fn a_protocol_ref_reaches_the_protocol_the_loop_owns() {
    let ev = EventLoop::new().unwrap();
    let l = ev.listen_tcp(local(), || Rec::echo().0).unwrap();
    let in_use = Rc::new(Cell::new(None));
    let conn = ev.connect_tcp(
        l.local_addr().as_inet().unwrap(),
        Counter {
            in_use: in_use.clone(),
            ..Counter::default()
        },
    );
    let proto = conn.protocol().clone();
    proto.with(|c| c.me = Some(proto.clone())).unwrap();
    let t = ev.run_until(conn.connected()).unwrap();
    t.write(b"12345");
    run_until(&ev, T, || proto.with(|c| c.bytes).unwrap() == 5);
    assert_eq!(in_use.get(), Some(true), "InUse from inside its own method");
    assert_eq!(proto.transport(), t);
    // The protocol holds its own ProtocolRef: no cycle keeps it after loss.
    t.abort();
    run_until(&ev, T, || matches!(proto.with(|_| ()), Err(Error::Gone)));
}

#[test]
fn a_listener_factory_learns_the_peer_address() {
    let ev = EventLoop::new().unwrap();
    let peers = Rc::new(RefCell::new(Vec::new()));
    let p = peers.clone();
    let l = ev
        .listen_tcp(local(), move |peer: &SockAddr| {
            p.borrow_mut().push(peer.clone());
            Rec::new().0
        })
        .unwrap();
    let t = ev
        .run_until(ev.connect_tcp(l.local_addr().as_inet().unwrap(), Rec::new().0))
        .unwrap();
    run_until(&ev, T, || peers.borrow().len() == 1);
    assert_eq!(peers.borrow()[0], t.local_addr().unwrap());
}

/// Keeps its own transport, and says when it is dropped.
struct KeepsItself {
    me: Option<Transport>,
    dropped: Rc<Cell<bool>>,
}

impl Protocol for KeepsItself {
    fn connection_made(&mut self, t: &Transport) {
        self.me = Some(t.clone());
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

impl Drop for KeepsItself {
    fn drop(&mut self) {
        self.dropped.set(true);
    }
}

/// A connection whose protocol keeps its own transport; the flag says when
/// the protocol is dropped.
fn connected_keeping_itself(ev: &EventLoop) -> (Transport, Rc<Cell<bool>>) {
    let dropped = Rc::new(Cell::new(false));
    let l = ev.listen_tcp(local(), || Rec::new().0).unwrap();
    let proto = KeepsItself {
        me: None,
        dropped: dropped.clone(),
    };
    let t = ev
        .run_until(ev.connect_tcp(l.local_addr().as_inet().unwrap(), proto))
        .unwrap();
    (t, dropped) // the listener goes on listening until the loop closes
}

#[test]
fn a_transport_kept_in_its_own_protocol_keeps_nothing_alive() {
    let ev = EventLoop::new().unwrap();
    let (t, dropped) = connected_keeping_itself(&ev);
    assert!(t.event_loop().is_some());
    t.abort();
    run_until(&ev, T, || dropped.get());
    // A transport the user kept outlives the loop and says so.
    let kept = t.clone();
    drop(ev);
    assert!(kept.event_loop().is_none());
    assert!(kept.is_closing());
    kept.write(b"ignored");
}

#[test]
fn the_loop_is_freed_while_a_protocol_holds_its_transport() {
    let ev = EventLoop::new().unwrap();
    let (t, dropped) = connected_keeping_itself(&ev);
    let lp = t.event_loop().unwrap();
    let weak_probe = lp.remote(); // a Send handle: says whether the loop is gone
    drop(lp);
    drop(ev); // closes: connection_lost, then the protocol is dropped
    assert!(dropped.get(), "the open connection's protocol was dropped");
    assert!(t.event_loop().is_none(), "nothing kept the loop alive");
    assert!(weak_probe.is_closed());
}
