//! Graceful shutdown: a listener that drains its connections (with a
//! deadline) or closes them now, and the loop's before/during/after sequence,
//! forced by a second signal.

use deferloop::net::{Protocol, Transport};
use deferloop::shutdown::{Phase, Shutdown};
use deferloop::{succeed, Deferred, EventLoop, Failure, Signal};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Server side: records how its connection ended.
struct Server(Rc<RefCell<Vec<Option<String>>>>);
impl Protocol for Server {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        self.0.borrow_mut().push(reason.map(|f| f.to_string()));
    }
}

/// Client side: closes itself after `after`, or never.
struct Client(Option<Duration>);
impl Protocol for Client {
    fn connection_made(&mut self, t: &Transport) {
        if let (Some(after), Some(lp)) = (self.0, t.event_loop()) {
            let t = t.clone();
            lp.call_later(after, move |_| t.close()).unwrap();
        }
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

fn server(
    ev: &EventLoop,
) -> (
    deferloop::net::Listener,
    SocketAddr,
    Rc<RefCell<Vec<Option<String>>>>,
) {
    let lost = Rc::new(RefCell::new(Vec::new()));
    let l2 = lost.clone();
    let listener = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Server(l2.clone()))
        .unwrap();
    let addr = listener.local_addr().as_inet().unwrap();
    (listener, addr, lost)
}

fn settle(ev: &EventLoop, listener: &deferloop::net::Listener, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while listener.connection_count() < n {
        assert!(Instant::now() < deadline);
        ev.call_later(Duration::from_millis(5), |_| {}).unwrap();
        ev.run_once().unwrap();
    }
}

#[test]
fn a_listener_stops_accepting_and_waits_for_its_connections() {
    let ev = EventLoop::new().unwrap();
    let (listener, addr, lost) = server(&ev);
    for _ in 0..3 {
        let _ = ev.connect_tcp(addr, Client(Some(Duration::from_millis(150))));
    }
    settle(&ev, &listener, 3);
    // A deadline of 60 s: a shutdown that did not end with its last
    // connection would take that long, which 10 s tells apart on a loaded
    // machine too (a 5 s deadline and a 3 s bound were closer).
    let t0 = Instant::now();
    ev.run_until(listener.shutdown(Duration::from_secs(60)))
        .unwrap();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(100), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(*lost.borrow(), vec![None, None, None], "clean ends");
    assert!(!listener.is_listening());
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no longer accepting"
    );
}

#[test]
fn connections_still_open_at_the_deadline_are_aborted() {
    let ev = EventLoop::new().unwrap();
    let (listener, addr, lost) = server(&ev);
    let _ = ev.connect_tcp(addr, Client(None));
    let _ = ev.connect_tcp(addr, Client(Some(Duration::from_millis(20))));
    settle(&ev, &listener, 2);
    let t0 = Instant::now();
    ev.run_until(listener.shutdown(Duration::from_millis(300)))
        .unwrap();
    let took = t0.elapsed();
    // The one that never closes would hold it for good: 10 s tells that
    // apart from the 300 ms deadline, whatever the load.
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let lost = lost.borrow();
    assert_eq!(lost.len(), 2);
    assert_eq!(lost[0], None, "the polite one ended by itself");
    assert!(lost[1].as_deref().unwrap().contains("deadline"), "{lost:?}");
    assert_eq!(listener.connection_count(), 0);
}

#[test]
fn shutdown_now_closes_every_connection_at_once() {
    let ev = EventLoop::new().unwrap();
    let (listener, addr, lost) = server(&ev);
    for _ in 0..4 {
        let _ = ev.connect_tcp(addr, Client(None));
    }
    settle(&ev, &listener, 4);
    let t0 = Instant::now();
    ev.run_until(listener.shutdown_now()).unwrap();
    // Their clients never close: 10 s tells "now" from "never".
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(*lost.borrow(), vec![None; 4]);
    // With nothing open it fires at once.
    assert!(listener.shutdown(Duration::from_secs(60)).is_called());
}

#[test]
fn the_sequence_runs_its_phases_in_order_each_waiting_for_the_last() {
    let ev = EventLoop::new().unwrap();
    let (listener, addr, _lost) = server(&ev);
    let _ = ev.connect_tcp(addr, Client(Some(Duration::from_millis(100))));
    settle(&ev, &listener, 1);
    let log = Rc::new(RefCell::new(Vec::<String>::new()));
    let s = Shutdown::new(&ev);
    s.add_listener(&listener);
    let (l1, l2, l3, l4) = (log.clone(), log.clone(), log.clone(), log.clone());
    // Recorded, not unwrapped, in the timer: the loop contains its panics.
    let fired = Rc::new(RefCell::new(None));
    let f1 = fired.clone();
    s.add_trigger(Phase::Before, move |lp| {
        l1.borrow_mut().push("before".into());
        let (d, r) = Deferred::new();
        let (l, f) = (l1.clone(), f1.clone());
        lp.call_later(Duration::from_millis(50), move |_| {
            l.borrow_mut().push("before done".into());
            *f.borrow_mut() = Some(r.callback(()));
        })
        .unwrap();
        d
    });
    s.add_trigger(Phase::Before, move |_| {
        // Never fires: cut at the phase's deadline.
        let (d, r) = Deferred::<()>::new();
        std::mem::forget(r);
        d
    });
    s.set_deadline(Phase::Before, Duration::from_millis(200));
    let listener2 = listener.clone();
    s.add_trigger(Phase::During, move |_| {
        l2.borrow_mut()
            .push(format!("during, listening={}", listener2.is_listening()));
        succeed(())
    });
    let pool_job = ev.defer_to_thread(|| std::thread::sleep(Duration::from_millis(100)));
    let l5 = log.clone();
    let _ = pool_job.add_callback(move |_| {
        l5.borrow_mut().push("pool job".into());
        Ok(())
    });
    s.add_trigger(Phase::After, move |_| {
        l3.borrow_mut().push("after".to_string());
        succeed(())
    });
    let _ = s.done().add_callback(move |_| {
        l4.borrow_mut().push("done".into());
        Ok(())
    });
    ev.set_exception_handler(|_, _| {}); // the cut trigger is reported
    let t0 = Instant::now();
    ev.call_soon({
        let s = s.clone();
        move |_| s.start()
    })
    .unwrap();
    ev.run().unwrap();
    let took = t0.elapsed();
    let fired = fired.borrow_mut().take();
    fired.expect("before done ran").unwrap();
    assert!(s.is_done() && !s.was_forced());
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(listener.connection_count(), 0);
    let log = log.borrow();
    let pos = |s: &str| {
        log.iter()
            .position(|e| e.starts_with(s))
            .unwrap_or_else(|| panic!("{s} in {log:?}"))
    };
    assert!(pos("before") < pos("before done"));
    assert!(pos("before done") < pos("during"));
    assert!(
        log.contains(&"during, listening=false".to_string()),
        "{log:?}"
    );
    assert!(pos("during") < pos("after"));
    assert!(
        pos("pool job") < pos("done"),
        "the pool was waited for: {log:?}"
    );
    assert_eq!(log.last().unwrap(), "done");
}

#[test]
fn a_second_signal_forces_the_shutdown() {
    let ev = EventLoop::new().unwrap();
    let (listener, addr, lost) = server(&ev);
    let _ = ev.connect_tcp(addr, Client(None));
    settle(&ev, &listener, 1);
    let s = Shutdown::new(&ev);
    s.add_listener(&listener);
    s.set_deadline(Phase::Before, Duration::from_secs(60));
    let kill = || {
        // SAFETY: kill(2) to ourselves; the handler below catches SIGUSR2.
        unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) };
    };
    // The second signal is sent once the first has started the shutdown
    // (from its first trigger), never in the same turn as the first, where
    // the two would be one (two timers 180 ms apart could share a turn on a
    // loaded machine).
    s.add_trigger(Phase::Before, move |lp| {
        lp.call_soon(move |_| kill()).unwrap();
        let (d, r) = Deferred::<()>::new();
        std::mem::forget(r);
        d
    });
    // USR2 here: a signal whose default would not matter to other binaries.
    s.handle_signals(&[Signal::USR2]).unwrap();
    ev.call_later(Duration::from_millis(20), move |_| kill())
        .unwrap();
    let t0 = Instant::now();
    ev.run().unwrap();
    // The Before phase's deadline is 60 s: 10 s tells forced from not.
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(s.is_done() && s.was_forced());
    ev.run_once().unwrap();
    assert_eq!(lost.borrow().len(), 1, "the connection was aborted");
    assert!(!listener.is_listening());
}
