//! Accept under file-descriptor exhaustion: the listener reports EMFILE, stops
//! accepting for the retry delay (no busy loop), and accepts again after.
//! Alone in its binary: it lowers the process's RLIMIT_NOFILE. The retry
//! delay runs on the manual clock, so no stall of a loaded machine can end
//! it early or late; only "no busy loop" is counted in real time, as a
//! number of turns that load can only lower.

mod util;

use deferloop::net::Listener;
use deferloop::EventLoop;
use std::cell::RefCell;
use std::fs::File;
use std::rc::Rc;
use std::time::{Duration, Instant};
use util::net::Rec;

fn set_soft_fd_limit(n: libc::rlim_t) -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        let old = lim.rlim_cur;
        lim.rlim_cur = n.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        old
    }
}

/// Turns the loop for at least `d` of real time; returns how many turns.
fn turns_for(ev: &EventLoop, d: Duration) -> u64 {
    let before = ev.turn_count();
    let t0 = Instant::now();
    while t0.elapsed() < d {
        ev.run_once_timeout(d).unwrap();
    }
    ev.turn_count() - before
}

/// Turns the loop (never sleeping) until `done`, at most 1,000 turns.
fn turn_until(ev: &EventLoop, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert!(done(), "not within 1,000 turns");
}

#[test]
fn emfile_backs_off_without_spinning_and_accept_resumes() {
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let errors = Rc::new(RefCell::new(Vec::new()));
    let e2 = errors.clone();
    ev.set_exception_handler(
        move |_: &deferloop::Loop, cx: &deferloop::ExceptionContext<'_>| {
            e2.borrow_mut().push(format!(
                "{}: {}",
                cx.message,
                cx.failure.map(|f| f.to_string()).unwrap_or_default()
            ));
        },
    );
    let made = Rc::new(RefCell::new(Vec::new()));
    let m2 = made.clone();
    let l: Listener = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            let (r, seen) = Rec::new();
            m2.borrow_mut().push(seen);
            r
        })
        .unwrap();
    let delay = Duration::from_millis(300);
    l.set_accept_retry_delay(delay);
    let addr = l.local_addr().as_inet().unwrap();
    // The client connects before descriptors run out (its own fd is made now);
    // the connection then waits in the kernel's accept queue.
    let client = std::net::TcpStream::connect(addr).unwrap();

    // Use up every descriptor the (lowered) limit allows.
    let old = set_soft_fd_limit(256);
    let mut hog = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => hog.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                break;
            }
        }
    }

    // The first turn finds the waiting connection and runs out; then 150 ms
    // of real time pass with the listener backing off.
    turn_until(&ev, || !errors.borrow().is_empty());
    let turns = turns_for(&ev, Duration::from_millis(150));
    assert!(l.is_backing_off(), "accepting is suspended");
    assert!(made.borrow().is_empty());
    assert_eq!(errors.borrow().len(), 1, "{:?}", errors.borrow());
    assert!(
        errors.borrow()[0].contains("out of file descriptors"),
        "{:?}",
        errors.borrow()
    );
    assert!(turns < 10, "no busy loop while backing off: {turns} turns");

    // Descriptors come back; not before the delay, but once it has passed,
    // the waiting connection is accepted.
    drop(hog);
    clock.advance(delay - Duration::from_millis(1));
    for _ in 0..10 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert!(
        l.is_backing_off(),
        "still backing off 1 ms before the delay"
    );
    assert!(made.borrow().is_empty());
    clock.advance(Duration::from_millis(1));
    turn_until(&ev, || made.borrow().len() == 1);
    assert!(!l.is_backing_off());
    assert_eq!(l.accepted(), 1);
    assert_eq!(made.borrow()[0].borrow().events, [util::net::Ev::Made]);
    assert_eq!(errors.borrow().len(), 1, "nothing else went wrong");
    drop(client);
    set_soft_fd_limit(old);
}
