//! Connecting: success order, refusal, timeout and cancellation. A connection
//! that never came up calls no protocol method.

mod util;

use deferloop::deferred::{Cancelled, TimedOut};
use deferloop::net::{Protocol, Transport};
use deferloop::EventLoop;
use std::cell::RefCell;
use std::net::SocketAddr;

use std::rc::Rc;
use std::time::{Duration, Instant};
use util::net::Rec;

#[test]
fn the_deferred_fires_after_connection_made() {
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || Rec::new().0)
        .unwrap();
    let order = Rc::new(RefCell::new(Vec::new()));
    struct Mark(Rc<RefCell<Vec<&'static str>>>);
    impl Protocol for Mark {
        fn connection_made(&mut self, _: &Transport) {
            self.0.borrow_mut().push("connection_made");
        }
        fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    }
    let o = order.clone();
    let d = ev
        .connect_tcp(l.local_addr().as_inet().unwrap(), Mark(order.clone()))
        .connected()
        .map(move |t| {
            o.borrow_mut().push("deferred");
            t
        });
    let t = ev.run_until(d).unwrap();
    assert_eq!(*order.borrow(), ["connection_made", "deferred"]);
    assert_eq!(
        t.peer_addr().unwrap(),
        *l.local_addr(),
        "connected to the listener"
    );
}

#[test]
fn a_refused_connect_fails_with_connection_refused_naming_the_address() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: nothing listens there now
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let f = ev
        .run_until(ev.connect_tcp(addr, rec).connected())
        .unwrap_err()
        .into_failure()
        .unwrap();
    let e = f.downcast_ref::<std::io::Error>().expect("an io::Error");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(f.to_string().contains(&addr.to_string()), "{f}");
    assert!(
        seen.borrow().events.is_empty(),
        "no protocol method was called"
    );
    assert_eq!(ev.io_source_count(), 0, "the socket is gone");
}

/// A listener whose accept queue is full: further SYNs are dropped, so a
/// connect to it stays pending (loopback only, no outside address needed).
#[test]
fn a_connect_that_hangs_fails_with_timed_out_after_add_timeout() {
    let (_listener, _filler, addr) = util::net::full_listener();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let t0 = Instant::now();
    let d = ev
        .connect_tcp(addr, rec)
        .connected()
        .add_timeout(Duration::from_millis(200), &ev.to_loop());
    let f = ev.run_until(d).unwrap_err();
    let waited = t0.elapsed();
    assert!(f.check::<TimedOut>(), "{f}");
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(seen.borrow().events.is_empty());
    assert_eq!(ev.io_source_count(), 0, "the abandoned socket is closed");
}

#[test]
fn cancelling_a_connect_abandons_it() {
    let (_listener, _filler, addr) = util::net::full_listener();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let d = ev.connect_tcp(addr, rec).connected();
    assert_eq!(ev.io_source_count(), 1);
    assert_eq!(ev.timer_count(), 1, "the connect's deadline");
    d.cancel();
    assert_eq!(ev.io_source_count(), 0);
    assert_eq!(ev.timer_count(), 0, "the deadline went with the connect");
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<Cancelled>());
    assert!(seen.borrow().events.is_empty());
}

#[test]
fn connecting_on_a_closed_loop_is_an_error_not_a_panic() {
    let ev = EventLoop::new().unwrap();
    ev.close().unwrap();
    let f = ev
        .connect_tcp("127.0.0.1:9".parse().unwrap(), Rec::new().0)
        .connected()
        .result()
        .unwrap()
        .unwrap_err();
    assert!(f.check::<deferloop::deferred::LoopClosed>(), "{f}");
    assert!(matches!(
        ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Rec::new().0),
        Err(deferloop::Error::Closed)
    ));
}

#[test]
fn closing_the_loop_fails_a_pending_connect() {
    let (_listener, _filler, addr) = util::net::full_listener();
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let d = ev.connect_tcp(addr, rec).connected();
    ev.close().unwrap();
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<deferloop::deferred::LoopClosed>(), "{f}");
    assert!(seen.borrow().events.is_empty());
}

/// A connect that never completes (the listener's backlog is full, so its
/// SYNs go unanswered) fails after the default connect timeout, 30 s, and
/// never calls its protocol — tested on manual time.
#[test]
fn a_connect_that_never_completes_fails_after_the_default_timeout() {
    let (_listener, _filler, addr) = util::net::full_listener();
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let (rec, seen) = Rec::new();
    let d = ev.connect_tcp(addr, rec).connected();
    clock.advance(Duration::from_secs(29));
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
    let d = d.result().expect_err("still connecting after 29 s");
    clock.advance(Duration::from_secs(1));
    let f = ev.run_until(d).unwrap_err().into_failure().unwrap();
    let e = f.downcast_ref::<std::io::Error>().expect("an io error");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(f.to_string().contains(&addr.to_string()), "{f}");
    assert!(seen.borrow().events.is_empty());
}

#[test]
fn the_connect_timeout_can_be_changed_or_turned_off() {
    let (_listener, _filler, addr) = util::net::full_listener();
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let short = ev
        .connect_tcp(addr, Rec::new().0)
        .connect_timeout(Some(Duration::from_secs(2)))
        .connected();
    let never = ev.connect_tcp(addr, Rec::new().0).connect_timeout(None);
    clock.advance(Duration::from_secs(2));
    assert!(ev.run_until(short).is_err());
    clock.advance(Duration::from_secs(3600));
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
    assert!(
        never.transport().is_connecting(),
        "no limit but the system's"
    );
    never.transport().abort();
}
