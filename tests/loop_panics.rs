//! Panics in callbacks are contained and reported; the loop goes on.

mod util;

use deferloop::{Error, EventLoop, Panicked};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// A panicking callback does not stop the turn; the handler gets the location.
#[test]
fn a_panicking_callback_does_not_stop_the_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    ev.set_exception_handler(
        move |_: &deferloop::Loop, ctx: &deferloop::ExceptionContext<'_>| {
            let f = ctx.failure.unwrap();
            l.borrow_mut().push(format!(
                "{}|{}|{}",
                ctx.message,
                f.downcast_ref::<Panicked>().unwrap().message,
                ctx.location.unwrap().line()
            ));
        },
    );
    let l = log.clone();
    ev.call_soon(move |_| l.borrow_mut().push("a".into()))?;
    let line = line!() + 1;
    ev.call_soon(|_| panic!("boom"))?;
    let l = log.clone();
    ev.call_soon(move |_| l.borrow_mut().push("b".into()))?;
    // Two timers due in the same turn: the first panics, the second still runs.
    ev.call_later(Duration::ZERO, |_| panic!("timer boom"))?;
    let l = log.clone();
    ev.call_later(Duration::ZERO, move |_| l.borrow_mut().push("t".into()))?;
    ev.run_once()?;
    let got = log.borrow().clone();
    assert_eq!(got[0], "a");
    assert_eq!(got[1], format!("Exception in callback|boom|{line}"));
    assert_eq!(got[2], "b");
    assert!(got[3].starts_with("Exception in callback|timer boom|"));
    assert_eq!(got[4], "t");
    Ok(())
}

/// Without a handler, the panic is logged with the callback's scheduling location.
#[test]
fn the_default_handler_logs_the_scheduling_location() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    let line = line!() + 1;
    ev.call_soon(|_| panic!("default-handler-test"))?;
    ev.run_once()?;
    let recs: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| r.message.contains("default-handler-test"))
        .collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].level, log::Level::Error);
    assert!(
        recs[0]
            .message
            .contains(&format!("tests/loop_panics.rs:{line}")),
        "{}",
        recs[0].message
    );
    Ok(())
}

/// A panic inside the exception handler is logged and does not kill the loop.
#[test]
fn a_panicking_exception_handler_is_logged_and_the_loop_goes_on() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    ev.set_exception_handler(|_: &deferloop::Loop, _: &deferloop::ExceptionContext<'_>| {
        panic!("handler-panic")
    });
    ev.call_soon(|_| panic!("original-panic-xyz"))?;
    let ran = Rc::new(RefCell::new(false));
    let r = ran.clone();
    ev.call_soon(move |_| *r.borrow_mut() = true)?;
    ev.run_once()?;
    assert!(*ran.borrow());
    let mine = logs.mine();
    assert!(mine
        .iter()
        .any(|r| r.message.contains("exception handler panicked")
            && r.message.contains("handler-panic")));
    assert!(mine
        .iter()
        .any(|r| r.message.contains("original-panic-xyz")));
    Ok(())
}

/// Fifty timers due in the same turn, every third one panicking and one of
/// them cancelling a later timer before it panics: every other timer runs,
/// in deadline order, in that one turn; each panic is reported once; no
/// timer is left behind.
#[test]
fn panicking_timers_lose_none_of_the_timers_due_in_their_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let reported = Rc::new(RefCell::new(0));
    let r = reported.clone();
    ev.set_exception_handler(
        move |_: &deferloop::Loop, ctx: &deferloop::ExceptionContext<'_>| {
            assert!(ctx.failure.unwrap().is_panic());
            *r.borrow_mut() += 1;
        },
    );
    let ran = Rc::new(RefCell::new(Vec::new()));
    let base = ev.time();
    let handles: Rc<RefCell<Vec<deferloop::Handle>>> = Rc::default();
    // Recorded, not asserted, in timer 3: the loop contains its panics.
    let cancelled_10 = Rc::new(Cell::new(None));
    for i in 0..50u32 {
        let (ran, hs, c10) = (ran.clone(), handles.clone(), cancelled_10.clone());
        // Deadlines in the past, out of order: the turn sorts them.
        let when = base - Duration::from_micros(u64::from((i * 7) % 50));
        let h = ev.call_at(when, move |_| {
            if i == 3 {
                // Timer 10 is due later in this same turn.
                c10.set(Some(hs.borrow()[10].cancel()));
            }
            if i % 3 == 0 {
                panic!("timer {i}");
            }
            ran.borrow_mut().push(i);
        })?;
        handles.borrow_mut().push(h);
    }
    ev.run_once()?;
    let cancelled_10 = cancelled_10.get().expect("timer 3 ran");
    assert!(cancelled_10, "10 is still pending");
    // Earliest deadline first; (i * 7) % 50 is distinct for i < 50.
    let mut want: Vec<u32> = (0..50).filter(|i| i % 3 != 0 && *i != 10).collect();
    want.sort_by_key(|&i| std::cmp::Reverse((i * 7) % 50));
    assert_eq!(*ran.borrow(), want);
    assert_eq!(*reported.borrow(), 17);
    assert_eq!(ev.timer_count(), 0);
    assert_eq!(ev.ready_len(), 0);
    assert!(handles.borrow()[10].is_cancelled());
    Ok(())
}
