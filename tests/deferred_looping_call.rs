//! LoopingCall on a ManualClock: Twisted's test vectors (§3 of the reference),
//! computed on integer Durations.

use deferloop::deferred::{Deferred, LoopingCall};
use deferloop::{Failure, ManualClock};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

type Times = Rc<RefCell<Vec<u128>>>;

/// Stops a loop still running at the end of a test: it leaves no call on the
/// clock. (A call left pending holds the loop, which holds the clock: that
/// cycle would never be freed — valgrind reports it, scripts/valgrind.sh.)
fn stop_and_check_nothing_is_left(lc: &LoopingCall<ManualClock>, clock: &ManualClock) {
    lc.stop().unwrap();
    assert!(!lc.is_running());
    assert_eq!(clock.pending(), 0);
}

/// A loop that records the clock's elapsed milliseconds at each call.
fn recording(clock: &ManualClock) -> (LoopingCall<ManualClock>, Times) {
    let times: Times = Rc::default();
    let (t, c) = (times.clone(), clock.clone());
    let lc = LoopingCall::new(clock.clone(), move || {
        t.borrow_mut().push(c.elapsed().as_millis());
        Ok(())
    });
    (lc, times)
}

/// testBasicFunction: start(0.1), pump [0.05, 0.1, 0.1] → runs at 0, 0.15, 0.25;
/// stop() fires the Deferred and leaves no calls.
#[test]
fn basic_function() {
    let clock = ManualClock::new();
    let (lc, times) = recording(&clock);
    let d = lc.start(ms(100)).unwrap();
    clock.pump(&[ms(50), ms(100), ms(100)]);
    assert_eq!(*times.borrow(), [0, 150, 250]);
    lc.stop().unwrap();
    assert!(d.result().unwrap().is_ok());
    assert_eq!(clock.pending(), 0);
}

/// testDelayedStart: now=false → 2 runs for the same pump.
#[test]
fn delayed_start() {
    let clock = ManualClock::new();
    let (lc, times) = recording(&clock);
    let _d = lc.start_later(ms(100)).unwrap();
    clock.pump(&[ms(50), ms(100), ms(100)]);
    assert_eq!(*times.borrow(), [150, 250]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// test_reactorTimeSkips (interval 0.5): advance(2) → [0,2]; advance(1) → [0,2,3];
/// advance(0) → unchanged.
#[test]
fn reactor_time_skips() {
    let clock = ManualClock::new();
    let (lc, times) = recording(&clock);
    let _d = lc.start(ms(500)).unwrap();
    clock.advance(ms(2000));
    assert_eq!(*times.borrow(), [0, 2000]);
    clock.advance(ms(1000));
    assert_eq!(*times.borrow(), [0, 2000, 3000]);
    clock.advance(ms(0));
    assert_eq!(*times.borrow(), [0, 2000, 3000]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// test_callbackTimeSkips: f advances the clock itself → [0, 2.5, 4].
#[test]
fn callback_time_skips() {
    let clock = ManualClock::new();
    let times2: Times = Rc::default();
    let (t2, c2) = (times2.clone(), clock.clone());
    let first = Rc::new(RefCell::new(true));
    let lc = LoopingCall::new(clock.clone(), move || {
        t2.borrow_mut().push(c2.elapsed().as_millis());
        if std::mem::replace(&mut *first.borrow_mut(), false) {
            c2.advance(ms(2000));
        }
        Ok(())
    });
    let _d = lc.start(ms(500)).unwrap();
    assert_eq!(*times2.borrow(), [0]);
    clock.advance(ms(500)); // 2.5: the next grid point after 2.0
    assert_eq!(*times2.borrow(), [0, 2500]);
    clock.advance(ms(1500)); // 4.0
    assert_eq!(*times2.borrow(), [0, 2500, 4000]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// V: start at t=0.3 with now=false, interval 1, pump [1, 2.5, 0.7] → [1.3, 3.8, 4.5].
#[test]
fn pump_from_offset_start() {
    let clock = ManualClock::new();
    clock.advance(ms(300));
    let (lc, times) = recording(&clock);
    let _d = lc.start_later(ms(1000)).unwrap();
    clock.pump(&[ms(1000), ms(2500), ms(700)]);
    assert_eq!(*times.borrow(), [1300, 3800, 4500]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// V: stop() inside the third run (interval 1, pump [1,1,1,1]) → runs at [0,1,2];
/// the Deferred fires; no calls are left.
#[test]
fn stop_inside_the_third_run() {
    let clock = ManualClock::new();
    let times: Times = Rc::default();
    let slot: Rc<RefCell<Option<LoopingCall<ManualClock>>>> = Rc::default();
    let (t, c, s) = (times.clone(), clock.clone(), slot.clone());
    let lc = LoopingCall::new(clock.clone(), move || {
        t.borrow_mut().push(c.elapsed().as_millis());
        if t.borrow().len() == 3 {
            s.borrow().as_ref().unwrap().stop().unwrap();
        }
        Ok(())
    });
    *slot.borrow_mut() = Some(lc.clone());
    let d = lc.start(ms(1000)).unwrap();
    clock.pump(&[ms(1000); 4]);
    assert_eq!(*times.borrow(), [0, 1000, 2000]);
    assert!(d.result().unwrap().is_ok());
    assert_eq!(clock.pending(), 0);
    slot.borrow_mut().take();
}

/// testStopAtOnce: start(now=false); stop() → f never runs, no calls left.
#[test]
fn stop_at_once() {
    let clock = ManualClock::new();
    let (lc, times) = recording(&clock);
    let d = lc.start_later(ms(1000)).unwrap();
    lc.stop().unwrap();
    assert!(d.result().unwrap().is_ok());
    assert_eq!(clock.pending(), 0);
    clock.advance(ms(5000));
    assert!(times.borrow().is_empty());
    assert!(lc.stop().is_err());
}

/// test_reset: start(2, now=false), advance(1), reset(), advance(1) → not run;
/// advance(1) → ran once; V: advance(2) → runs again at 5.
#[test]
fn reset_restarts_the_grid() {
    let clock = ManualClock::new();
    let (lc, times) = recording(&clock);
    let _d = lc.start_later(ms(2000)).unwrap();
    clock.advance(ms(1000));
    lc.reset().unwrap();
    clock.advance(ms(1000));
    assert!(times.borrow().is_empty());
    clock.advance(ms(1000));
    assert_eq!(*times.borrow(), [3000]);
    clock.advance(ms(2000));
    assert_eq!(*times.borrow(), [3000, 5000]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// testWaitDeferred / testFailAndStop: no rescheduling while f's Deferred is
/// pending; stop() while pending fires the start Deferred when it completes.
#[test]
fn waits_for_a_returned_deferred_and_stop_fires_on_completion() {
    let clock = ManualClock::new();
    let pending: Rc<RefCell<Vec<deferloop::deferred::Resolver<()>>>> = Rc::default();
    let p = pending.clone();
    let lc = LoopingCall::new(clock.clone(), move || {
        let (d, r) = Deferred::<()>::new();
        p.borrow_mut().push(r);
        d
    });
    let d = lc.start(ms(1000)).unwrap();
    clock.pump(&[ms(1000); 3]);
    assert_eq!(pending.borrow().len(), 1);
    assert_eq!(clock.pending(), 0);
    pending.borrow()[0].callback(()).unwrap();
    assert_eq!(clock.pending(), 1);
    clock.advance(ms(1000));
    assert_eq!(pending.borrow().len(), 2);
    lc.stop().unwrap();
    assert!(!d.is_called());
    pending.borrow()[1].callback(()).unwrap();
    assert!(d.result().unwrap().is_ok());
}

/// testFailure: a failing call stops the loop and errbacks the start Deferred;
/// on the first run under now=true, start() returns an already-failed Deferred.
#[test]
fn failure_stops_the_loop() {
    let clock = ManualClock::new();
    let n = Rc::new(RefCell::new(0));
    let n2 = n.clone();
    let lc = LoopingCall::new(clock.clone(), move || {
        *n2.borrow_mut() += 1;
        if *n2.borrow() == 2 {
            Err(Failure::msg("lc-failed"))
        } else {
            Ok(())
        }
    });
    let d = lc.start(ms(1000)).unwrap();
    clock.pump(&[ms(1000); 3]);
    assert_eq!(*n.borrow(), 2);
    assert!(!lc.is_running());
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "lc-failed");

    let lc = LoopingCall::new(clock.clone(), || -> Result<(), Failure> {
        panic!("first-run")
    });
    let d = lc.start(ms(1000)).unwrap();
    assert!(d.result().unwrap().unwrap_err().is_panic());
}

/// Starting twice is an error.
#[test]
fn start_twice_is_an_error() {
    let clock = ManualClock::new();
    let (lc, _t) = recording(&clock);
    let _d = lc.start_later(ms(1000)).unwrap();
    assert!(lc.start_later(ms(1000)).is_err());
    assert_eq!(lc.interval(), ms(1000));
    stop_and_check_nothing_is_left(&lc, &clock);
}

type Counts = Rc<RefCell<Vec<(u128, u64)>>>;

fn counting(clock: &ManualClock) -> (LoopingCall<ManualClock>, Counts) {
    let out: Counts = Rc::default();
    let (o, c) = (out.clone(), clock.clone());
    let lc = LoopingCall::with_count(clock.clone(), move |n| {
        o.borrow_mut().push((c.elapsed().as_millis(), n));
        Ok(())
    });
    (lc, out)
}

/// test_reactorTimeCountSkips (0.5, +0.01 slack) → [(0,1),(0.51,1),(2.02,3)].
#[test]
fn with_count_counts_skipped_intervals() {
    let clock = ManualClock::new();
    let (lc, out) = counting(&clock);
    let _d = lc.start(ms(500)).unwrap();
    clock.advance(ms(510));
    clock.advance(ms(1510));
    assert_eq!(*out.borrow(), [(0, 1), (510, 1), (2020, 3)]);
    clock.advance(ms(0));
    assert_eq!(out.borrow().len(), 3);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// test_countLengthyIntervalCounts: invoked at T, 2.75T, 3T (+0.01 delay) the
/// count stays 1 → [(0,1),(0.51,1),(1.385,1),(1.51,1)].
#[test]
fn with_count_lengthy_interval_counts() {
    let clock = ManualClock::new();
    let (lc, out) = counting(&clock);
    let _d = lc.start(ms(500)).unwrap();
    clock.pump(&[ms(510), ms(875), ms(125)]);
    assert_eq!(*out.borrow(), [(0, 1), (510, 1), (1385, 1), (1510, 1)]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// V: interval 1, now=true, advance 1, 3.5, 0.5 → [(0,1),(1,1),(4.5,3),(5,1)].
#[test]
fn with_count_vector_from_probe() {
    let clock = ManualClock::new();
    let (lc, out) = counting(&clock);
    let _d = lc.start(ms(1000)).unwrap();
    clock.pump(&[ms(1000), ms(3500), ms(500)]);
    assert_eq!(*out.borrow(), [(0, 1), (1000, 1), (4500, 3), (5000, 1)]);
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// test_withCountFloatingPointBoundary (0.1, 10 advances) → counts sum to 10, no 0.
#[test]
fn with_count_boundary_sums_to_ten() {
    let clock = ManualClock::new();
    let (lc, out) = counting(&clock);
    let _d = lc.start_later(ms(100)).unwrap();
    for _ in 0..10 {
        clock.advance(ms(100));
    }
    let v: Vec<u64> = out.borrow().iter().map(|x| x.1).collect();
    assert_eq!(v.iter().sum::<u64>(), 10);
    assert!(!v.contains(&0));
    stop_and_check_nothing_is_left(&lc, &clock);
}

/// test_withCountIntervalZero: pump [0]*5 with f stopping after 5 → [1]*5.
#[test]
fn with_count_interval_zero_counts_one() {
    let clock = ManualClock::new();
    let out: Rc<RefCell<Vec<u64>>> = Rc::default();
    let slot: Rc<RefCell<Option<LoopingCall<ManualClock>>>> = Rc::default();
    let (o, s) = (out.clone(), slot.clone());
    let lc = LoopingCall::with_count(clock.clone(), move |n| {
        o.borrow_mut().push(n);
        if o.borrow().len() > 4 {
            s.borrow().as_ref().unwrap().stop().unwrap();
        }
        Ok(())
    });
    *slot.borrow_mut() = Some(lc.clone());
    let d = lc.start_later(Duration::ZERO).unwrap();
    clock.pump(&[Duration::ZERO; 5]);
    assert!(d.result().unwrap().is_ok());
    assert_eq!(*out.borrow(), [1; 5]);
    slot.borrow_mut().take();
}

/// test_deferredWithCount (0.2, now=false; 1st run returns a pending Deferred;
/// pump [0.2, 0.4] → 1 run; fire it; pump [0.2]) → [1, 3].
#[test]
fn with_count_waits_for_a_deferred() {
    let clock = ManualClock::new();
    let out: Rc<RefCell<Vec<u64>>> = Rc::default();
    let gate: Rc<RefCell<Option<deferloop::deferred::Resolver<()>>>> = Rc::default();
    let (o, g) = (out.clone(), gate.clone());
    let lc = LoopingCall::with_count(clock.clone(), move |n| {
        o.borrow_mut().push(n);
        let (d, r) = Deferred::<()>::new();
        if o.borrow().len() == 1 {
            *g.borrow_mut() = Some(r);
        } else {
            r.callback(()).unwrap();
        }
        d
    });
    let _d = lc.start_later(ms(200)).unwrap();
    clock.pump(&[ms(200), ms(400)]);
    assert_eq!(*out.borrow(), [1]);
    gate.borrow_mut().take().unwrap().callback(()).unwrap();
    clock.pump(&[ms(200)]);
    assert_eq!(*out.borrow(), [1, 3]);
    stop_and_check_nothing_is_left(&lc, &clock);
}
