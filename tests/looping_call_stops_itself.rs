//! A LoopingCall's function can stop it: `LoopingCall::with_handle` lends the
//! function its own handle (Twisted's `f` calling `lc.stop()`), with no
//! hand-made self-reference and no reference cycle left behind.

use deferloop::{EventLoop, LoopingCall, ManualClock};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// On a real loop: the function stops the looping call on its fifth tick, and
/// the Deferred from `start` fires with `()` after exactly five calls.
#[test]
fn looping_call_stopped_by_its_function_fires_its_start_deferred() {
    let ev = EventLoop::new().unwrap();
    let calls = Rc::new(Cell::new(0u32));
    let c = calls.clone();
    let lc = LoopingCall::with_handle(&ev, move |lc| {
        c.set(c.get() + 1);
        if c.get() == 5 {
            lc.stop()?;
        }
        Ok(())
    });
    let done = lc.start(Duration::from_millis(1)).unwrap();
    let done = done.add_callback({
        let calls = calls.clone();
        move |()| Ok(calls.get())
    });
    assert_eq!(ev.run_until(done).unwrap(), 5);
    assert!(!lc.is_running());
    assert_eq!(ev.timer_count(), 0, "no call is left scheduled");
}

/// What the function captures is freed once the stopped looping call is
/// dropped: lending the handle made no cycle.
#[test]
fn looping_call_stopped_by_its_function_leaves_no_cycle() {
    let clock = ManualClock::new();
    let sentinel = Rc::new(());
    let weak = Rc::downgrade(&sentinel);
    let mut n = 0;
    let lc = LoopingCall::with_handle(&clock, move |lc| {
        let _keep = &sentinel;
        n += 1;
        if n == 3 {
            lc.stop()?;
        }
        Ok(())
    });
    let done = lc.start_later(Duration::from_secs(1)).unwrap();
    clock.pump(&[Duration::from_secs(1); 5]);
    assert!(done.result().unwrap().is_ok());
    assert_eq!(clock.pending(), 0);
    drop(lc);
    assert!(
        weak.upgrade().is_none(),
        "the function and what it holds are freed"
    );
}

/// The lent handle also resets: a function that resets on each call keeps the
/// looping call running, and `stop` from outside still ends it.
#[test]
fn looping_call_function_can_reset_itself() {
    let clock = ManualClock::new();
    let calls = Rc::new(Cell::new(0u32));
    let c = calls.clone();
    let lc = LoopingCall::with_handle(clock.clone(), move |lc| {
        c.set(c.get() + 1);
        // No call is scheduled while the function runs: reset changes nothing.
        lc.reset()?;
        Ok(())
    });
    let done = lc.start_later(Duration::from_secs(1)).unwrap();
    clock.pump(&[Duration::from_secs(1); 3]);
    assert_eq!(calls.get(), 3);
    lc.stop().unwrap();
    assert!(done.result().unwrap().is_ok());
}
