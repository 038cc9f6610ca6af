//! Moving a scheduled call (Twisted's `IDelayedCall.reset`/`delay`):
//! `Handle::reset`, `reset_at` and `delay`, on the manual clock. A moved
//! timer runs at its new deadline and never at the old one, counts as
//! scheduled anew among equal deadlines, can be moved while due but not yet
//! run, and a call that ran or was cancelled is an error, not a panic.

use deferloop::{Error, EventLoop, Handle, HandleState, ManualClock};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

const S: Duration = Duration::from_secs(1);

fn manual() -> (EventLoop, ManualClock) {
    let clock = ManualClock::new();
    (EventLoop::with_manual_clock(clock.clone()).unwrap(), clock)
}

/// Runs a turn that must not wait: something is queued to end it.
fn turn(ev: &EventLoop) {
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
}

/// A call that counts its runs.
fn counted(ev: &EventLoop, after: Duration) -> (Handle, Rc<Cell<u32>>) {
    let ran = Rc::new(Cell::new(0));
    let r = ran.clone();
    let h = ev.call_later(after, move |_| r.set(r.get() + 1)).unwrap();
    (h, ran)
}

#[test]
fn reset_moves_a_timer_later_and_it_runs_only_then() {
    let (ev, clock) = manual();
    let t0 = ev.time();
    let (h, ran) = counted(&ev, 10 * S);
    clock.advance(8 * S);
    h.reset(10 * S).unwrap();
    assert_eq!(h.deadline(), Some(t0 + 18 * S));
    clock.advance(2 * S); // the old deadline
    turn(&ev);
    assert_eq!(ran.get(), 0, "not at the old deadline");
    assert_eq!(h.state(), HandleState::Pending);
    clock.advance(8 * S);
    turn(&ev);
    assert_eq!(ran.get(), 1);
    assert_eq!(h.state(), HandleState::Done);
    assert_eq!(ev.timer_count(), 0);
}

#[test]
fn reset_moves_a_far_timer_earlier() {
    let (ev, clock) = manual();
    let (h, ran) = counted(&ev, 3600 * S);
    h.reset(S).unwrap();
    clock.advance(S);
    turn(&ev);
    assert_eq!(ran.get(), 1);
    assert_eq!(ev.timer_count(), 0, "nothing left at the old place");
}

#[test]
fn delay_pushes_back_from_the_current_deadline_and_reset_at_sets_it() {
    let (ev, clock) = manual();
    let t0 = ev.time();
    let (h, ran) = counted(&ev, 5 * S);
    clock.advance(S);
    h.delay(3 * S).unwrap();
    assert_eq!(
        h.deadline(),
        Some(t0 + 8 * S),
        "from the deadline, not from now"
    );
    h.delay(S).unwrap();
    assert_eq!(h.deadline(), Some(t0 + 9 * S));
    clock.advance(7 * S);
    turn(&ev);
    assert_eq!(ran.get(), 0);
    h.reset_at(t0 + 20 * S).unwrap();
    clock.advance(10 * S);
    turn(&ev);
    assert_eq!(ran.get(), 0);
    clock.advance(2 * S);
    turn(&ev);
    assert_eq!(ran.get(), 1);
    // A delay too long for an Instant is "never", not a panic.
    let (h, _) = counted(&ev, S);
    h.delay(Duration::MAX).unwrap();
    assert!(h.deadline().unwrap() > ev.time() + 3600 * 24 * 365 * S);
}

#[test]
fn a_reset_timer_runs_after_those_already_set_for_its_deadline() {
    let (ev, clock) = manual();
    let order = Rc::new(RefCell::new(Vec::new()));
    let mut handles = Vec::new();
    for name in ["a", "b", "c"] {
        let o = order.clone();
        handles.push(
            ev.call_later(5 * S, move |_| o.borrow_mut().push(name))
                .unwrap(),
        );
    }
    handles[0].reset(5 * S).unwrap(); // same deadline, scheduled anew
    clock.advance(5 * S);
    turn(&ev);
    assert_eq!(*order.borrow(), ["b", "c", "a"]);
}

#[test]
fn a_timer_due_but_not_yet_run_can_still_be_moved() {
    let (ev, clock) = manual();
    let ran = Rc::new(Cell::new(0));
    let slot: Rc<RefCell<Option<Handle>>> = Rc::new(RefCell::new(None));
    // Both are due in the same turn; the first moves the second on.
    let s = slot.clone();
    ev.call_later(S, move |_| {
        let h = s.borrow();
        h.as_ref().unwrap().reset(10 * S).unwrap();
    })
    .unwrap();
    let r = ran.clone();
    let second = ev.call_later(S, move |_| r.set(r.get() + 1)).unwrap();
    let deadline = second.deadline().unwrap();
    *slot.borrow_mut() = Some(second);
    clock.advance(S);
    turn(&ev);
    assert_eq!(ran.get(), 0, "moved out of this turn");
    let h = slot.borrow_mut().take().unwrap();
    assert_eq!(h.state(), HandleState::Pending);
    assert_eq!(h.deadline(), Some(deadline + 10 * S));
    assert_eq!(ev.timer_count(), 1);
    clock.advance(10 * S);
    turn(&ev);
    assert_eq!(ran.get(), 1);
}

#[test]
fn a_moved_timer_can_still_be_cancelled() {
    let (ev, clock) = manual();
    let (h, ran) = counted(&ev, S);
    h.reset(2 * S).unwrap();
    h.delay(S).unwrap();
    assert!(h.cancel());
    assert_eq!(h.state(), HandleState::Cancelled);
    assert_eq!(ev.timer_count(), 0);
    clock.advance(10 * S);
    turn(&ev);
    assert_eq!(ran.get(), 0);
}

#[test]
fn a_call_that_ran_or_was_cancelled_is_gone() {
    let (ev, clock) = manual();
    let (h, _) = counted(&ev, S);
    clock.advance(S);
    turn(&ev);
    assert!(matches!(h.reset(S), Err(Error::Gone)));
    assert!(matches!(h.delay(S), Err(Error::Gone)));
    assert_eq!(h.state(), HandleState::Done, "which one: it ran");

    let (h, _) = counted(&ev, S);
    h.cancel();
    assert!(matches!(h.reset_at(ev.time()), Err(Error::Gone)));
    assert_eq!(h.state(), HandleState::Cancelled);
    assert_eq!(ev.timer_count(), 0, "a refused reset schedules nothing");

    // From inside its own run: it is running, so it cannot be moved.
    let seen = Rc::new(RefCell::new(None));
    let slot: Rc<RefCell<Option<Handle>>> = Rc::new(RefCell::new(None));
    let (s, sl) = (seen.clone(), slot.clone());
    let h = ev
        .call_later(S, move |_| {
            *s.borrow_mut() = Some(sl.borrow().as_ref().unwrap().reset(S));
        })
        .unwrap();
    *slot.borrow_mut() = Some(h);
    clock.advance(S);
    turn(&ev);
    assert!(matches!(seen.borrow_mut().take(), Some(Err(Error::Gone))));
    assert_eq!(ev.timer_count(), 0);
}

#[test]
fn a_call_soon_handle_or_a_closed_loop_is_refused() {
    let (ev, _clock) = manual();
    let soon = ev.call_soon(|_| {}).unwrap();
    assert!(matches!(soon.reset(S), Err(Error::InvalidInput(_))));
    assert!(matches!(soon.delay(S), Err(Error::InvalidInput(_))));

    let (h, _) = counted(&ev, S);
    ev.close().unwrap();
    assert!(matches!(h.reset(S), Err(Error::Closed)));
    drop(ev);
    assert!(matches!(h.delay(S), Err(Error::Closed)));
}

#[test]
fn many_timers_keep_moving_and_run_once_each_at_their_last_deadline() {
    let (ev, clock) = manual();
    let t0 = ev.time();
    let runs = Rc::new(RefCell::new(Vec::new()));
    let handles: Vec<Handle> = (0..200u64)
        .map(|i| {
            let r = runs.clone();
            ev.call_later(Duration::from_millis(i), move |lp| {
                r.borrow_mut().push((i, lp.time()))
            })
            .unwrap()
        })
        .collect();
    // Each is moved a few times, earlier and later, near and far.
    for round in 0..5u64 {
        for (i, h) in handles.iter().enumerate() {
            let i = i as u64;
            let ms = 10 + (i * 7919 + round * 104_729) % 100_000;
            h.reset(Duration::from_millis(ms)).unwrap();
        }
        clock.advance(Duration::from_millis(1));
        turn(&ev);
        assert!(runs.borrow().is_empty(), "nothing due yet ({round})");
    }
    let last: Vec<_> = handles.iter().map(|h| h.deadline().unwrap()).collect();
    clock.advance(200 * S);
    turn(&ev);
    let runs = runs.borrow();
    assert_eq!(runs.len(), 200, "each ran once");
    let deadlines: Vec<_> = runs.iter().map(|&(i, _)| last[i as usize]).collect();
    assert!(
        deadlines.windows(2).all(|w| w[0] <= w[1]),
        "in order of their last deadlines"
    );
    assert!(deadlines[0] > t0 + 5 * Duration::from_millis(1));
}
