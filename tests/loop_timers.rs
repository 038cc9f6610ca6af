//! Timers: never early, no busy spin, cancellation frees memory at once.

use deferloop::{Error, EventLoop, HandleState};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Inside a timer callback, `time() >= deadline`, for a spread of delays.
#[test]
fn timers_never_run_before_their_deadline() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let early = Rc::new(Cell::new(0));
    let fired = Rc::new(Cell::new(0));
    for us in [0u64, 50, 100, 300, 999, 1000, 1001, 1500, 2500, 5000] {
        let deadline = ev.time() + Duration::from_micros(us);
        let (e, f) = (early.clone(), fired.clone());
        let h = ev.call_at(deadline, move |lp| {
            if lp.time() < deadline {
                e.set(e.get() + 1);
            }
            f.set(f.get() + 1);
        })?;
        assert_eq!(h.deadline(), Some(deadline));
    }
    ev.call_later(Duration::from_millis(8), |lp| lp.stop())?;
    ev.run()?;
    assert_eq!(fired.get(), 10);
    assert_eq!(early.get(), 0);
    Ok(())
}

/// Waiting for a 0.1 ms timer takes a couple of turns, not a busy loop.
#[test]
fn a_sub_millisecond_timer_does_not_spin_the_loop() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.call_later(Duration::from_micros(100), |lp| lp.stop())?;
    ev.run()?;
    assert!(ev.turn_count() <= 3, "{} turns", ev.turn_count());
    Ok(())
}

/// 1,000,000 timers set and 999,000 cancelled leave exactly 1,000 in the heap,
/// and only those run.
#[test]
fn cancelling_999k_of_1m_timers_leaves_1000_in_the_heap() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let ran = Rc::new(Cell::new(0u32));
    let mut handles = Vec::with_capacity(1_000_000);
    for i in 0..1_000_000u64 {
        let r = ran.clone();
        handles.push(ev.call_later(Duration::from_micros(i % 5000), move |_| r.set(r.get() + 1))?);
    }
    assert_eq!(ev.timer_count(), 1_000_000);
    for (i, h) in handles.iter().enumerate() {
        if i % 1000 != 0 {
            assert!(h.cancel());
        }
    }
    assert_eq!(ev.timer_count(), 1_000);
    assert_eq!(handles[1].state(), HandleState::Cancelled);
    assert_eq!(handles[0].state(), HandleState::Pending);
    ev.call_later(Duration::from_millis(10), |lp| lp.stop())?;
    ev.run()?;
    assert_eq!(ran.get(), 1_000);
    assert_eq!(ev.timer_count(), 0);
    assert_eq!(handles[0].state(), HandleState::Done);
    Ok(())
}

/// A cancelled timer's callback (and what it captured) is dropped at once.
#[test]
fn cancel_drops_the_callback_immediately() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let token = Rc::new(());
    let t = token.clone();
    let h = ev.call_later(Duration::from_secs(60), move |_| drop(t))?;
    assert_eq!(Rc::strong_count(&token), 2);
    h.cancel();
    assert_eq!(Rc::strong_count(&token), 1);
    Ok(())
}

/// A timer armed from a timer callback waits at least for the next turn.
#[test]
fn a_timer_armed_during_a_turn_waits_for_the_next_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    ev.call_later(Duration::ZERO, move |lp| {
        l.borrow_mut().push("a");
        let l2 = l.clone();
        lp.call_later(Duration::ZERO, move |_| l2.borrow_mut().push("b"))
            .unwrap();
    })?;
    let t0 = Instant::now();
    ev.run_once()?;
    assert_eq!(*log.borrow(), ["a"]);
    ev.run_once()?;
    assert_eq!(*log.borrow(), ["a", "b"]);
    assert!(t0.elapsed() < Duration::from_secs(10));
    Ok(())
}
