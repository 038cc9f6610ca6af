//! A loop whose time is a `ManualClock`: timers, timeouts, looping calls and
//! connection deadlines tested without sleeping.

mod util;

use deferloop::net::memory;
use deferloop::{defer_later, Deferred, EventLoop, LoopingCall, ManualClock};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use util::net::{lost_count, Rec};

const HOUR: Duration = Duration::from_secs(3600);

fn manual() -> (EventLoop, ManualClock) {
    let clock = ManualClock::new();
    (EventLoop::with_manual_clock(clock.clone()).unwrap(), clock)
}

/// Runs a turn that must not wait: something is queued to end it.
fn turn(ev: &EventLoop) {
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
}

#[test]
fn time_stands_still_until_the_clock_moves() {
    let (ev, clock) = manual();
    let t0 = ev.time();
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    ev.call_later(HOUR, move |_| r.set(true)).unwrap();
    let wall = Instant::now();
    for _ in 0..3 {
        turn(&ev);
    }
    assert!(!ran.get());
    assert_eq!(ev.time(), t0);
    clock.advance(HOUR - Duration::from_nanos(1));
    turn(&ev);
    assert!(!ran.get(), "never early");
    clock.advance(Duration::from_nanos(1));
    ev.run_once().unwrap(); // the due timer is the work: no wait
    assert!(ran.get());
    assert_eq!(ev.time() - t0, HOUR);
    assert!(wall.elapsed() < Duration::from_secs(10), "no sleeping");
}

#[test]
fn timeouts_and_delayed_calls_follow_the_manual_clock() {
    let (ev, clock) = manual();
    let lp = ev.to_loop();
    let (slow, _r) = Deferred::<u32>::new();
    let slow = slow.add_timeout(Duration::from_secs(30), &lp);
    let later = defer_later(&lp, Duration::from_secs(10), || Ok(7));
    clock.advance(Duration::from_secs(10));
    assert_eq!(ev.run_until(later).unwrap(), 7);
    clock.advance(Duration::from_secs(20));
    let f = ev.run_until(slow).unwrap_err();
    assert!(f.check::<deferloop::deferred::TimedOut>(), "{f}");
}

#[test]
fn a_looping_call_on_the_loop_ticks_as_the_clock_advances() {
    let (ev, clock) = manual();
    let ticks = Rc::new(Cell::new(0));
    let t = ticks.clone();
    let lc = LoopingCall::new(ev.to_loop(), move || {
        t.set(t.get() + 1);
        Ok(())
    });
    let done = lc.start(Duration::from_secs(60)).unwrap();
    turn(&ev);
    assert_eq!(ticks.get(), 1, "now=true ticks at once");
    for expected in 2..=5 {
        clock.advance(Duration::from_secs(60));
        turn(&ev);
        assert_eq!(ticks.get(), expected);
    }
    lc.stop().unwrap();
    assert!(ev.run_until(done).is_ok());
}

#[test]
fn idle_timeouts_and_lingering_closes_without_sleeping() {
    let (ev, clock) = manual();
    let (idle_rec, idle_seen) = Rec::new();
    let (t, peer) = memory::open(&ev, idle_rec).unwrap();
    t.set_idle_timeout(Some(Duration::from_secs(300)));
    clock.advance(Duration::from_secs(200));
    peer.send(b"still here");
    turn(&ev);
    clock.advance(Duration::from_secs(200));
    turn(&ev);
    turn(&ev);
    assert_eq!(lost_count(&idle_seen), 0, "data pushed the deadline back");
    clock.advance(Duration::from_secs(100));
    turn(&ev);
    turn(&ev);
    assert_eq!(lost_count(&idle_seen), 1);

    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    peer.set_room(Some(0));
    t.write(b"never taken");
    t.close();
    clock.advance(Duration::from_secs(29));
    turn(&ev);
    assert_eq!(lost_count(&seen), 0, "still lingering");
    clock.advance(Duration::from_secs(1));
    turn(&ev);
    turn(&ev);
    assert_eq!(
        lost_count(&seen),
        1,
        "aborted after the default 30 s linger"
    );
}
