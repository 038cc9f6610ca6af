//! Signal handlers: any loop, any thread, several at once, coalesced bursts,
//! and the old disposition restored. Signals are process-wide, so each test
//! in this binary uses a signal no other test here (or elsewhere in this
//! process) uses: USR1, USR2, WINCH, HUP, URG, CONT, PROF.

use deferloop::{Error, EventLoop, Signal};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn kill_self(sig: i32) {
    // SAFETY: kill(2) on our own pid with a signal a handler of this test watches.
    assert_eq!(unsafe { libc::kill(libc::getpid(), sig) }, 0);
}

fn disposition(sig: i32) -> libc::sighandler_t {
    // SAFETY: queries only (a null new action), into a zeroed local.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

fn run_until_or_timeout(ev: &EventLoop, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        ev.call_later(Duration::from_millis(20), |_| {}).unwrap();
        ev.run_once().unwrap();
    }
}

#[test]
fn two_loops_on_two_threads_both_hear_sigusr1() {
    let ready = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let ready = ready.clone();
            std::thread::spawn(move || {
                let ev = EventLoop::new().unwrap();
                let heard = Rc::new(Cell::new(0));
                let h2 = heard.clone();
                let h = ev
                    .add_signal_handler(Signal::USR1, move |lp, sig| {
                        assert_eq!(sig, Signal::USR1);
                        h2.set(h2.get() + 1);
                        lp.stop();
                    })
                    .unwrap();
                ev.call_later(Duration::from_secs(10), |lp| lp.stop())
                    .unwrap();
                ready.wait();
                ev.run().unwrap();
                h.remove();
                heard.get()
            })
        })
        .collect();
    ready.wait();
    // Both loops are about to run; the signal may land on any thread.
    std::thread::sleep(Duration::from_millis(50));
    kill_self(libc::SIGUSR1);
    for t in threads {
        assert_eq!(t.join().unwrap(), 1, "each loop heard SIGUSR1 once");
    }
}

#[test]
fn a_signal_raised_mid_turn_runs_its_handler_in_a_later_turn() {
    let ev = EventLoop::new().unwrap();
    // Recorded, not asserted, in the callbacks: the loop contains their
    // panics.
    let in_callback = Rc::new(Cell::new(false));
    let ran_inside = Rc::new(Cell::new(false));
    let heard = Rc::new(Cell::new(0u32));
    let heard_mid_callback = Rc::new(Cell::new(None));
    let (ic, inside, h2) = (in_callback.clone(), ran_inside.clone(), heard.clone());
    let h = ev
        .add_signal_handler(Signal::USR2, move |_, _| {
            inside.set(inside.get() || ic.get());
            h2.set(h2.get() + 1);
        })
        .unwrap();
    let (ic, h3, mid) = (
        in_callback.clone(),
        heard.clone(),
        heard_mid_callback.clone(),
    );
    ev.call_soon(move |_| {
        ic.set(true);
        // SAFETY: raise(3) on this thread: the C handler runs now, mid-callback.
        unsafe { libc::raise(libc::SIGUSR2) };
        mid.set(Some(h3.get()));
        ic.set(false);
    })
    .unwrap();
    ev.run_once().unwrap();
    assert_eq!(
        heard_mid_callback.get(),
        Some(0),
        "not delivered inside the callback"
    );
    assert_eq!(heard.get(), 0, "not in the turn it was raised in");
    run_until_or_timeout(&ev, || heard.get() == 1);
    assert!(
        !ran_inside.get(),
        "a handler never runs inside another callback"
    );
    assert!(h.remove());
    assert!(!h.remove(), "removing twice says it was gone");
}

#[test]
fn a_burst_of_ten_thousand_signals_coalesces_and_loses_no_wake_up() {
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0u32));
    let h2 = heard.clone();
    let h = ev
        .add_signal_handler(Signal::WINCH, move |_, _| h2.set(h2.get() + 1))
        .unwrap();
    for _ in 0..10_000 {
        kill_self(libc::SIGWINCH);
    }
    run_until_or_timeout(&ev, || heard.get() >= 1);
    for _ in 0..5 {
        ev.call_later(Duration::from_millis(10), |_| {}).unwrap();
        ev.run_once().unwrap();
    }
    let after_burst = heard.get();
    assert!(
        (1..100).contains(&after_burst),
        "a burst is a few calls, not 10,000: {after_burst}"
    );
    // The pipe is drained and the flag clear: the next signal is heard.
    kill_self(libc::SIGWINCH);
    run_until_or_timeout(&ev, || heard.get() > after_burst);
    h.remove();
}

#[test]
fn removing_the_last_handler_restores_the_old_disposition() {
    // SAFETY: sets SIGHUP to "ignore", a plain disposition, for this test.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    assert_eq!(disposition(libc::SIGHUP), libc::SIG_IGN);
    let a = EventLoop::new().unwrap();
    let b = EventLoop::new().unwrap();
    let ha = a.add_signal_handler(Signal::HUP, |_, _| {}).unwrap();
    let hb = b.add_signal_handler(Signal::HUP, |_, _| {}).unwrap();
    assert_ne!(
        disposition(libc::SIGHUP),
        libc::SIG_IGN,
        "ours is installed"
    );
    ha.remove();
    assert_ne!(
        disposition(libc::SIGHUP),
        libc::SIG_IGN,
        "another handler still watches"
    );
    hb.remove();
    assert_eq!(
        disposition(libc::SIGHUP),
        libc::SIG_IGN,
        "the old one is back"
    );

    // The loop closing removes its handlers too.
    let c = EventLoop::new().unwrap();
    let hc = c.add_signal_handler(Signal::HUP, |_, _| {}).unwrap();
    drop(c);
    assert!(!hc.is_active());
    assert_eq!(disposition(libc::SIGHUP), libc::SIG_IGN);
    // SAFETY: back to the default.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
}

#[test]
fn several_handlers_on_one_loop_each_hear_and_one_can_go() {
    let ev = EventLoop::new().unwrap();
    let a = Rc::new(Cell::new(0));
    let b = Rc::new(Cell::new(0));
    let (a2, b2) = (a.clone(), b.clone());
    let ha = ev
        .add_signal_handler(Signal::from_raw(libc::SIGURG), move |_, _| {
            a2.set(a2.get() + 1)
        })
        .unwrap();
    let hb = ev
        .add_signal_handler(Signal::from_raw(libc::SIGURG), move |_, _| {
            b2.set(b2.get() + 1)
        })
        .unwrap();
    kill_self(libc::SIGURG);
    run_until_or_timeout(&ev, || a.get() == 1 && b.get() == 1);
    ha.remove();
    kill_self(libc::SIGURG);
    run_until_or_timeout(&ev, || b.get() == 2);
    assert_eq!(a.get(), 1, "a removed handler is not called");
    hb.remove();
}

#[test]
fn a_panicking_handler_is_contained_and_stays() {
    let ev = EventLoop::new().unwrap();
    let calls = Rc::new(Cell::new(0));
    let c2 = calls.clone();
    let h = ev
        .add_signal_handler(Signal::from_raw(libc::SIGCONT), move |_, _| {
            c2.set(c2.get() + 1);
            panic!("handler fails");
        })
        .unwrap();
    let reported = Rc::new(Cell::new(0));
    let r2 = reported.clone();
    ev.set_exception_handler(move |_, _| r2.set(r2.get() + 1));
    kill_self(libc::SIGCONT);
    run_until_or_timeout(&ev, || calls.get() == 1);
    kill_self(libc::SIGCONT);
    run_until_or_timeout(&ev, || calls.get() == 2);
    assert_eq!(reported.get(), 2);
    h.remove();
}

#[test]
fn uncatchable_and_fault_signals_are_refused() {
    let ev = EventLoop::new().unwrap();
    for sig in [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, 0, 200] {
        let r = ev.add_signal_handler(Signal::from_raw(sig), |_, _| {});
        assert!(matches!(r, Err(Error::InvalidInput(_))), "{sig}");
    }
    drop(ev);
    let ev = EventLoop::new().unwrap();
    ev.close().unwrap();
    let r = ev.add_signal_handler(Signal::from_raw(libc::SIGPROF), |_, _| {});
    assert!(matches!(r, Err(Error::Closed)));
    assert_eq!(disposition(libc::SIGPROF), libc::SIG_DFL);
}
