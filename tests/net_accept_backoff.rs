//! Accept under file-descriptor exhaustion: the listener reports EMFILE, stops
//! accepting for the retry delay (no busy loop), and accepts again after.
//! Alone in its binary: it lowers the process's RLIMIT_NOFILE.

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

fn run_for(ev: &EventLoop, d: Duration) {
    ev.call_later(d, |lp| lp.stop()).unwrap();
    ev.run().unwrap();
}

#[test]
fn emfile_backs_off_without_spinning_and_accept_resumes() {
    let ev = EventLoop::new().unwrap();
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

    let turns_before = ev.turn_count();
    run_for(&ev, Duration::from_millis(150));
    let turns = ev.turn_count() - turns_before;
    assert!(l.is_backing_off(), "accepting is suspended");
    assert!(made.borrow().is_empty());
    assert_eq!(errors.borrow().len(), 1, "{:?}", errors.borrow());
    assert!(
        errors.borrow()[0].contains("out of file descriptors"),
        "{:?}",
        errors.borrow()
    );
    assert!(turns < 10, "no busy loop while backing off: {turns} turns");

    // Descriptors come back; after the delay the waiting connection is accepted.
    drop(hog);
    let t0 = Instant::now();
    util::run_until(&ev, Duration::from_secs(10), || made.borrow().len() == 1);
    assert!(t0.elapsed() + Duration::from_millis(150) >= delay - Duration::from_millis(20));
    assert!(!l.is_backing_off());
    assert_eq!(l.accepted(), 1);
    assert_eq!(made.borrow()[0].borrow().events, [util::net::Ev::Made]);
    assert_eq!(errors.borrow().len(), 1, "nothing else went wrong");
    drop(client);
    set_soft_fd_limit(old);
}
