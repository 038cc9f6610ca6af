//! Faults in user code on the network path: a protocol that panics loses its
//! own connection (with the panic as the reason) and no other; a factory that
//! panics costs one connection, not the listener.

mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, ExceptionContext, Failure, Loop, Panicked};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use util::net::{assert_lifecycle, lost_count, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(20);

/// Echoes, but panics on "boom".
struct Fragile {
    rec: Rec,
}

impl Protocol for Fragile {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
        if data == b"boom" {
            panic!("fragile protocol");
        }
        t.write(data);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

fn handler_log(ev: &EventLoop) -> Rc<RefCell<Vec<String>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    ev.set_exception_handler(Some(move |_: &Loop, cx: &ExceptionContext<'_>| {
        l2.borrow_mut().push(cx.message.to_owned());
    }));
    log
}

#[test]
fn a_panicking_protocol_aborts_its_connection_only() {
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            let (rec, seen) = Rec::new();
            s2.borrow_mut().push(seen);
            Fragile { rec }
        })
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (r1, c1) = Rec::new();
    let (r2, c2) = Rec::new();
    let t1 = ev.run_until(ev.connect_tcp(addr, r1)).unwrap();
    let t2 = ev.run_until(ev.connect_tcp(addr, r2)).unwrap();
    t1.write(b"boom");
    t2.write(b"fine");
    run_until(&ev, T, || {
        lost_count(&c1) == 1 && c2.borrow().bytes == b"fine" && servers.borrow().len() == 2
    });
    let broken = servers.borrow()[0].clone();
    run_until(&ev, T, || lost_count(&broken) == 1);
    assert_lifecycle(&broken);
    let reason = broken.borrow().reason.clone().unwrap();
    assert!(reason.is_panic());
    assert_eq!(
        reason.downcast_ref::<Panicked>().unwrap().message,
        "fragile protocol"
    );
    assert_eq!(*reported.borrow(), ["Exception in protocol callback"]);
    // The other connection is untouched and still works.
    t2.write(b"again");
    run_until(&ev, T, || c2.borrow().bytes == b"fineagain");
    assert_eq!(lost_count(&servers.borrow()[1]), 0);
    assert_eq!(lost_count(&c2), 0);
}

#[test]
fn a_panicking_factory_costs_one_connection_not_the_listener() {
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let mut n = 0;
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            n += 1;
            if n == 1 {
                panic!("factory");
            }
            Rec::echo().0
        })
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (r1, c1) = Rec::new();
    let _t1 = ev.run_until(ev.connect_tcp(addr, r1)).unwrap();
    run_until(&ev, T, || lost_count(&c1) == 1);
    assert_eq!(*reported.borrow(), ["Exception in protocol factory"]);
    let (r2, c2) = Rec::new();
    let t2 = ev.run_until(ev.connect_tcp(addr, r2)).unwrap();
    t2.write(b"served");
    run_until(&ev, T, || c2.borrow().bytes == b"served");
    assert!(l.is_listening());
}

#[test]
fn a_panicking_connection_lost_is_reported_and_the_connection_still_goes() {
    struct BadLost;
    impl Protocol for BadLost {
        fn data_received(&mut self, t: &Transport, _: &[u8]) {
            t.close();
        }
        fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
            panic!("in connection_lost");
        }
    }
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || BadLost)
        .unwrap();
    let (r, c) = Rec::new();
    let t = ev
        .run_until(ev.connect_tcp(l.local_addr().as_inet().unwrap(), r))
        .unwrap();
    t.write(b"x");
    run_until(&ev, T, || lost_count(&c) == 1);
    run_until(&ev, T, || ev.io_source_count() == 1);
    assert_eq!(
        *reported.borrow(),
        ["Exception in protocol callback (connection_lost)"]
    );
}
