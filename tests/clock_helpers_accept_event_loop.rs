//! The helpers that need time accept the owning `EventLoop` where they accept
//! its `Loop` handle: `d.add_timeout(t, &ev)` compiles and runs, and the old
//! spellings (`&ev.to_loop()`, the `&Loop` of a callback, a `ManualClock` by
//! value or by reference) keep working.

use deferloop::{defer_later, Deferred, EventLoop, LoopingCall, ManualClock, TimedOut};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn add_timeout_accepts_the_event_loop() {
    let ev = EventLoop::new().unwrap();
    let (d, _r) = Deferred::<u8>::new();
    let f = ev.run_until(d.add_timeout(ms(5), &ev)).unwrap_err();
    assert_eq!(
        f.downcast_ref::<TimedOut>(),
        Some(&TimedOut { after: ms(5) })
    );

    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout_with(ms(5), &ev, |_, _| Ok(7));
    assert_eq!(ev.run_until(d).unwrap(), 7);
}

#[test]
fn defer_later_and_looping_call_accept_the_event_loop() {
    let ev = EventLoop::new().unwrap();
    assert_eq!(ev.run_until(defer_later(&ev, ms(1), || Ok(3))).unwrap(), 3);

    let lc = LoopingCall::new(&ev, || Ok(()));
    let done = lc.start(ms(1)).unwrap();
    let stopper = lc.clone();
    ev.call_later(ms(5), move |_| stopper.stop().unwrap())
        .unwrap();
    ev.run_until(done).unwrap();

    let ticks = Rc::new(Cell::new(0));
    let t = ticks.clone();
    let lc = LoopingCall::with_count(&ev, move |n| {
        t.set(t.get() + n);
        Ok(())
    });
    let done = lc.start_later(ms(1)).unwrap();
    let stopper = lc.clone();
    ev.call_later(ms(5), move |_| stopper.stop().unwrap())
        .unwrap();
    ev.run_until(done).unwrap();
    assert!(ticks.get() > 0);
}

#[test]
fn the_old_spellings_still_work() {
    let ev = EventLoop::new().unwrap();
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(ms(1), &ev.to_loop());
    assert!(ev.run_until(d).unwrap_err().check::<TimedOut>());

    // The `&Loop` a callback gets.
    let (d, r) = Deferred::<u8>::new();
    ev.call_soon(move |lp| {
        let _lc = LoopingCall::new(lp, || Ok(()));
        defer_later(lp, ms(1), || Ok(9))
            .add_timeout(ms(500), lp)
            .add_callback(move |n| {
                r.callback(n).unwrap();
                Ok(())
            })
            .detach();
    })
    .unwrap();
    assert_eq!(ev.run_until(d).unwrap(), 9);

    let clock = ManualClock::new();
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(ms(1), &clock);
    let lc = LoopingCall::new(clock.clone(), || Ok(()));
    let by_ref = LoopingCall::new(&clock, || Ok(()));
    let done = (
        lc.start_later(ms(1)).unwrap(),
        by_ref.start_later(ms(1)).unwrap(),
    );
    clock.advance(ms(1));
    assert!(d.result().unwrap().unwrap_err().check::<TimedOut>());
    lc.stop().unwrap();
    by_ref.stop().unwrap();
    assert!(done.0.result().unwrap().is_ok() && done.1.result().unwrap().is_ok());
}
