//! A caller's `Duration::MAX` (the usual way to say "no limit") is a deadline
//! too far to come, never an overflow panic: in clocks, idle timeouts, line
//! limits, blocking calls, shutdown deadlines and the cores' grace period.

mod util;

use deferloop::cores::Cores;
use deferloop::net::framing::LineDecoder;
use deferloop::net::{Protocol, Transport};
use deferloop::shutdown::{Phase, Shutdown};
use deferloop::{succeed, Clock, EventLoop, ManualClock};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[test]
fn a_manual_clock_advanced_by_max_runs_everything_pending() {
    let clock = ManualClock::new();
    let ran = Rc::new(Cell::new(0));
    for d in [Duration::from_secs(3600), Duration::MAX] {
        let r = ran.clone();
        clock.call_later(d, move || r.set(r.get() + 1)).unwrap();
    }
    clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(ran.get(), 1, "a MAX delay is not due after a day");
    clock.advance(Duration::MAX);
    assert_eq!((ran.get(), clock.pending()), (2, 0));
    clock.advance(Duration::MAX); // and again: time keeps moving, no panic
}

#[test]
fn a_line_limit_of_usize_max_takes_lines_split_across_reads() {
    let mut d = LineDecoder::new(b"\r\n", usize::MAX).unwrap();
    let mut lines = Vec::new();
    for part in [&b"hel"[..], b"lo\r", b"\nworld\r\n"] {
        d.feed(part, |l| {
            lines.push(l.to_vec());
            true
        })
        .unwrap();
    }
    assert_eq!(lines, [b"hello".to_vec(), b"world".to_vec()]);
}

#[test]
fn a_blocking_call_without_limit_waits_for_its_answer() {
    let ev = EventLoop::new().unwrap();
    let remote = ev.remote();
    // Driven turn by turn, the loop counts as running from its first turn
    // (before it, `call_blocking` says `NotRunning` at once).
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let caller = std::thread::spawn(move || remote.call_blocking(Duration::MAX, |_| succeed(7u8)));
    let until = Instant::now() + Duration::from_secs(20);
    while !caller.is_finished() {
        assert!(Instant::now() < until, "no answer");
        ev.run_once_timeout(Duration::from_millis(10)).unwrap();
    }
    let r = caller.join().unwrap();
    assert_eq!(r.as_ref().ok(), Some(&7), "{r:?}");
}

/// Says "hi" once connected, with its own idle timeout set to no limit.
struct Hi;
impl Protocol for Hi {
    fn connection_made(&mut self, t: &Transport) {
        t.set_idle_timeout(Some(Duration::MAX));
        t.write(b"hi");
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn idle_timeouts_without_limit_keep_connections_and_accepting() {
    let ev = EventLoop::new().unwrap();
    let made = Rc::new(Cell::new(0));
    let m = made.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            m.set(m.get() + 1);
            Hi
        })
        .unwrap();
    l.set_idle_timeout(Some(Duration::MAX));
    let addr = l.local_addr().as_inet().unwrap();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let seen = made.get();
        util::run_until(&ev, Duration::from_secs(20), || made.get() > seen);
        // connection_made ran (it wrote), and the connection stays.
        util::run_until(&ev, Duration::from_secs(20), || {
            c.set_nonblocking(true).unwrap();
            let mut b = [0; 2];
            let r = c.read(&mut b);
            c.set_nonblocking(false).unwrap();
            matches!(r, Ok(2))
        });
        c.write_all(b"x").unwrap();
        ev.run_once_timeout(Duration::from_millis(20)).unwrap();
        clients.push(c);
    }
    assert_eq!(made.get(), 2, "the listener still accepts");
    assert_eq!(l.connection_count(), 2);
}

#[test]
fn shutdown_deadlines_without_limit_still_end_the_sequence() {
    let ev = EventLoop::new().unwrap();
    let s = Shutdown::new(&ev);
    for phase in [Phase::Before, Phase::During, Phase::After] {
        s.set_deadline(phase, Duration::MAX);
    }
    let guard = ev
        .call_later(Duration::from_secs(20), |lp| lp.stop())
        .unwrap();
    s.start();
    ev.run().unwrap();
    assert!(s.is_done(), "the sequence ended on its own");
    guard.cancel();
}

#[test]
fn a_grace_period_without_limit_still_lets_idle_cores_stop() {
    let cores = Cores::builder()
        .loops(1)
        .grace(Duration::MAX)
        .start(|_, _| Ok(()))
        .unwrap();
    cores.shutdown();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(cores.wait()).unwrap());
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the loops stopped");
    r.unwrap();
}
