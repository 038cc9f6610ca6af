//! Embedding (src/reactor/embed.rs): the poll fd, the timeout, and the turn
//! that never waits longer than asked — everything a host needs reaches it
//! through the fd or the timeout.

mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::{Error, EventLoop, Loop};
use std::cell::Cell;
use std::cell::RefCell;
use std::io::Write;
use std::os::unix::io::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Whether `fd` is readable within `ms` milliseconds (as a host's poll sees it).
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`, and its count.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Turns with a zero timeout until the fd goes quiet and nothing is queued.
fn settle(ev: &EventLoop) {
    for _ in 0..10 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
}

#[test]
fn a_fresh_loop_has_nothing_to_do_and_a_quiet_fd() {
    let ev = EventLoop::new().unwrap();
    let fd = ev.as_raw_fd();
    assert_eq!(fd, ev.as_fd().as_raw_fd());
    assert_eq!(fd, ev.to_loop().as_raw_fd());
    assert_eq!(ev.timeout(), None);
    assert!(!readable(fd, 0));
    assert!(!ev.run_once_timeout(Duration::ZERO).unwrap());
}

#[test]
fn io_makes_the_fd_readable() {
    let ev = EventLoop::new().unwrap();
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let got = Rc::new(Cell::new(0));
    let g = got.clone();
    let afd = a.as_raw_fd();
    ev.add_reader(afd, move |_| {
        let mut buf = [0u8; 16];
        let n = (&a).read_some(&mut buf);
        g.set(g.get() + n);
    })
    .unwrap();
    let fd = ev.as_raw_fd();
    settle(&ev);
    assert!(!readable(fd, 0));
    b.write_all(b"hello").unwrap();
    assert!(readable(fd, 1000), "I/O shows on the fd");
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert_eq!(got.get(), 5);
    settle(&ev);
    assert!(!readable(fd, 0), "quiet again once read");
}

trait ReadSome {
    fn read_some(self, buf: &mut [u8]) -> usize;
}
impl ReadSome for &UnixStream {
    fn read_some(mut self, buf: &mut [u8]) -> usize {
        std::io::Read::read(&mut self, buf).unwrap_or(0)
    }
}

#[test]
fn a_remote_call_from_another_thread_makes_the_fd_readable() {
    let ev = EventLoop::new().unwrap();
    let fd = ev.as_raw_fd();
    let remote = ev.remote();
    let ran = Rc::new(Cell::new(false));
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
    });
    assert_eq!(ev.timeout(), None);
    assert!(readable(fd, 5000), "the remote call shows on the fd");
    let r = ran.clone();
    ev.call_soon(move |_| r.set(true)).unwrap();
    assert!(ev.run_once_timeout(Duration::ZERO).unwrap(), "it stopped");
    t.join().unwrap();
    assert!(ran.get());
}

#[test]
fn callbacks_scheduled_between_turns_reach_the_host() {
    let ev = EventLoop::new().unwrap();
    let fd = ev.as_raw_fd();
    settle(&ev);
    let ran = Rc::new(Cell::new(0));
    let r = ran.clone();
    ev.call_soon(move |_| r.set(r.get() + 1)).unwrap();
    assert_eq!(ev.timeout(), Some(Duration::ZERO), "queued: zero");
    assert!(
        readable(fd, 0),
        "and the fd says so to a host already asleep"
    );
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert_eq!(ran.get(), 1);
    assert_eq!(ev.timeout(), None);
    settle(&ev);
    assert!(!readable(fd, 0));

    // A timer set between turns wakes a host sleeping on an older timeout,
    // and the host's deadline is the timer's: 30 s less the time since,
    // which a loaded machine does not stretch by 10 s (a 30 ms timer and a
    // 10 ms margin could be missed).
    let long = ev.call_later(Duration::from_secs(30), |_| {}).unwrap();
    assert!(readable(fd, 0), "a new timer shows on the fd");
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let t = ev.timeout().expect("a timer: a deadline");
    assert!(t > Duration::from_secs(20) && t <= Duration::from_secs(30));
    assert!(!readable(fd, 0), "nothing else to do");
    long.cancel();
    // Once its deadline has passed (a sleep is at least as long as asked),
    // a turn runs it.
    ev.call_later(Duration::from_millis(30), |lp| lp.stop())
        .unwrap();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let t = ev.timeout().expect("a timer: a deadline");
    assert!(t <= Duration::from_millis(30));
    std::thread::sleep(t);
    assert!(
        ev.run_once_timeout(Duration::ZERO).unwrap(),
        "the timer ran and stopped the loop"
    );

    // A stop between turns: zero timeout, and the fd.
    settle(&ev);
    ev.stop();
    assert_eq!(ev.timeout(), Some(Duration::ZERO));
    assert!(readable(fd, 0));
    assert!(ev.run_once_timeout(Duration::ZERO).unwrap());
}

#[test]
fn a_loop_run_by_itself_makes_no_wake_ups() {
    let ev = EventLoop::new().unwrap();
    ev.call_soon(|_| {}).unwrap();
    ev.call_later(Duration::ZERO, |lp| lp.stop()).unwrap();
    ev.run().unwrap();
    assert_eq!(ev.remote().wake_stats(), (0, 0), "no host: no fd writes");
}

#[test]
fn the_turn_waits_no_longer_than_asked() {
    let ev = EventLoop::new().unwrap();
    // The upper bounds are 10 s, not the few hundred ms a loaded machine can
    // miss: with no timer, a turn that did not honour its cap would sleep
    // for good, and the timer's wait below is capped at 60 s, so 10 s still
    // tells each right answer from the wrong one.
    let bound = Duration::from_secs(10);
    let t0 = Instant::now();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert!(t0.elapsed() < bound, "zero: never waits");
    let t0 = Instant::now();
    ev.run_once_timeout(Duration::from_millis(40)).unwrap();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(39), "waited {took:?}");
    assert!(took < bound, "waited {took:?}");
    // A timer sooner than the cap ends the wait, and runs.
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    ev.call_later(Duration::from_millis(20), move |_| r.set(true))
        .unwrap();
    let t0 = Instant::now();
    while !ran.get() {
        ev.run_once_timeout(Duration::from_secs(60)).unwrap();
    }
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(19), "waited {took:?}");
    assert!(took < bound, "waited {took:?}");
}

#[test]
fn a_blocking_call_between_embedded_turns_is_answered() {
    let ev = EventLoop::new().unwrap();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let remote = ev.remote();
    let t = std::thread::spawn(move || {
        remote.call_blocking(Duration::from_secs(10), |_| deferloop::succeed(7))
    });
    let fd = ev.as_raw_fd();
    let t0 = Instant::now();
    while !t.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        readable(fd, 100);
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert_eq!(t.join().unwrap().unwrap(), 7);
}

#[test]
fn a_loop_may_run_a_turn_inside_another_loops_callback() {
    let host = EventLoop::new().unwrap();
    let guest = EventLoop::new().unwrap();
    let g = guest.to_loop();
    let seen: Rc<Cell<Option<bool>>> = Rc::default();
    let s = seen.clone();
    guest
        .call_soon(move |lp| {
            let cur = Loop::current().unwrap();
            s.set(Some(cur.turn_count() == lp.turn_count()));
        })
        .unwrap();
    // Recorded, not asserted, in the host's callback: the loop contains its panics.
    let host_saw = Rc::new(RefCell::new(None));
    let h = host_saw.clone();
    host.call_soon(move |host_lp| {
        let turn = g.run_once_timeout(Duration::ZERO);
        // The host is current again.
        let current = Loop::current().map(|cur| cur.turn_count());
        let refused = matches!(g.run(), Err(Error::Running));
        *h.borrow_mut() = Some((turn, current, host_lp.turn_count(), refused));
        host_lp.stop();
    })
    .unwrap();
    host.run().unwrap();
    let (turn, current, host_turns, refused) = host_saw.borrow_mut().take().expect("the host ran");
    turn.unwrap();
    assert_eq!(current.unwrap(), host_turns);
    assert!(refused, "run() still refuses");
    assert_eq!(seen.get(), Some(true));
}

#[test]
fn a_turn_inside_its_own_callback_is_refused_and_a_closed_loop_says_closed() {
    let ev = EventLoop::new().unwrap();
    // Recorded, not asserted, in the callback: the loop contains its panics.
    let refused = Rc::new(Cell::new(None));
    let r = refused.clone();
    ev.call_soon(move |lp| {
        r.set(Some(matches!(
            lp.run_once_timeout(Duration::ZERO),
            Err(Error::Running)
        )));
    })
    .unwrap();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert_eq!(refused.get(), Some(true));
    ev.close().unwrap();
    assert_eq!(ev.timeout(), Some(Duration::ZERO));
    assert!(matches!(
        ev.run_once_timeout(Duration::ZERO),
        Err(Error::Closed)
    ));
}

/// Waits as a host does: on the fd, for at most the loop's timeout.
fn host_wait(ev: &EventLoop) {
    let ms = match ev.timeout() {
        None => 1000, // bounded here only so that a failing test ends
        Some(t) => i32::try_from(t.as_millis()).unwrap_or(1000) + 1,
    };
    readable(ev.as_raw_fd(), ms);
}

struct Keep(Rc<RefCell<Option<Transport>>>);
impl Protocol for Keep {
    fn connection_made(&mut self, t: &Transport) {
        *self.0.borrow_mut() = Some(t.clone());
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn writes_made_by_the_host_between_turns_are_sent() {
    let ev = EventLoop::new().unwrap();
    let kept: Rc<RefCell<Option<Transport>>> = Rc::default();
    let k = kept.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Keep(k.clone()))
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = [0u8; 3];
        std::io::Read::read_exact(&mut s, &mut got).unwrap();
        got
    });
    let t0 = Instant::now();
    while kept.borrow().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(10));
        host_wait(&ev);
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    settle(&ev);
    // Host code, outside any turn: the first write goes out at once, the
    // next two are coalesced for the loop to send — and the host hears of it.
    let t = kept.borrow().clone().unwrap();
    t.write(b"a");
    t.write(b"b");
    t.write(b"c");
    assert!(
        readable(ev.as_raw_fd(), 0),
        "a host asleep on the fd hears of the queued flush"
    );
    while !client.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the coalesced writes never went"
        );
        host_wait(&ev);
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert_eq!(&client.join().unwrap(), b"abc");
}

#[test]
fn more_ready_sources_than_one_poll_returns_keep_the_timeout_at_zero() {
    util::raise_fd_limit(4096);
    let ev = EventLoop::new().unwrap();
    let n = 1100; // more than the 1024 events one poll returns
    let calls = Rc::new(Cell::new(0usize));
    let mut pairs = Vec::new();
    for _ in 0..n {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"x").unwrap();
        let c = calls.clone();
        let fd = a.as_raw_fd();
        ev.add_reader(fd, move |lp| {
            c.set(c.get() + 1);
            lp.remove_reader(fd);
        })
        .unwrap();
        pairs.push((a, b));
    }
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert_eq!(calls.get(), 1024, "one poll's worth");
    assert_eq!(
        ev.timeout(),
        Some(Duration::ZERO),
        "the selector holds more: a host must not sleep on an edge it already took"
    );
    ev.run_once_timeout(Duration::ZERO).unwrap();
    assert_eq!(calls.get(), n);
    assert_eq!(ev.timeout(), None);
}
