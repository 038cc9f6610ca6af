//! The turn's ordering rules: snapshot semantics, queued → I/O → timers,
//! stop and close.

use deferloop::{Error, EventLoop, HandleState, Loop};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

type Log = Rc<RefCell<Vec<&'static str>>>;

fn log() -> Log {
    Rc::new(RefCell::new(Vec::new()))
}

fn push(log: &Log, s: &'static str) -> impl FnOnce(&Loop) + 'static {
    let log = log.clone();
    move |_| log.borrow_mut().push(s)
}

/// A callback queued during step 6 waits for the next turn (the snapshot rule).
#[test]
fn callback_queued_during_a_turn_runs_in_the_next_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    let l2 = l.clone();
    ev.call_soon(move |lp| {
        l2.borrow_mut().push("A");
        lp.call_soon(push(&l2, "C")).unwrap();
    })?;
    ev.call_soon(push(&l, "B"))?;
    ev.run_once()?;
    assert_eq!(*l.borrow(), ["A", "B"]);
    ev.run_once()?;
    assert_eq!(*l.borrow(), ["A", "B", "C"]);
    Ok(())
}

/// A callback that keeps rescheduling itself cannot starve timers.
#[test]
fn a_self_rescheduling_callback_does_not_starve_timers() -> Result<(), Error> {
    fn spin(lp: &Loop) {
        lp.call_soon(spin).unwrap();
    }
    let ev = EventLoop::new()?;
    ev.call_soon(spin)?;
    ev.call_later(Duration::from_millis(5), |lp| lp.stop())?;
    let t0 = Instant::now();
    ev.run()?;
    assert!(t0.elapsed() < Duration::from_secs(10));
    Ok(())
}

/// Within one turn: callbacks queued before it, then I/O callbacks, then due timers.
#[test]
fn turn_runs_queued_then_io_then_timers() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.write_all(b"x").unwrap();
    let l = log();
    // Scheduled first, but a timer: runs last.
    ev.call_later(Duration::ZERO, push(&l, "timer"))?;
    let l2 = l.clone();
    ev.add_reader(a.as_raw_fd(), move |lp| {
        l2.borrow_mut().push("io");
        lp.remove_reader(a.as_raw_fd());
    })?;
    ev.call_soon(push(&l, "queued"))?;
    std::thread::sleep(Duration::from_millis(2));
    ev.run_once()?;
    assert_eq!(*l.borrow(), ["queued", "io", "timer"]);
    Ok(())
}

/// Cancelled handles are skipped, and cancel is idempotent.
#[test]
fn cancelled_handles_are_skipped() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    ev.call_soon(push(&l, "a"))?;
    let h = ev.call_soon(push(&l, "b"))?;
    let t = ev.call_later(Duration::ZERO, push(&l, "t"))?;
    ev.call_soon(push(&l, "c"))?;
    assert_eq!(h.state(), HandleState::Pending);
    assert!(h.cancel());
    assert!(!h.cancel());
    assert!(t.cancel());
    assert_eq!(h.state(), HandleState::Cancelled);
    assert_eq!(ev.timer_count(), 0);
    ev.run_once()?;
    assert_eq!(*l.borrow(), ["a", "c"]);
    Ok(())
}

/// A due timer can still be cancelled by a callback that runs before it in
/// the same turn (the response-beats-timeout case).
#[test]
fn a_due_timer_cancelled_earlier_in_its_turn_does_not_run() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    let now = Instant::now();
    let slot: Rc<RefCell<Option<deferloop::Handle>>> = Rc::new(RefCell::new(None));
    let (l2, s2) = (l.clone(), slot.clone());
    // Recorded, not asserted, in the callback: the loop contains its panics.
    let seen = Rc::new(Cell::new(None));
    let seen2 = seen.clone();
    // Both are due in the same step 5; the earlier deadline runs first.
    ev.call_at(now - Duration::from_millis(1), move |_| {
        l2.borrow_mut().push("response");
        let t = s2.borrow();
        let t = t.as_ref().unwrap();
        let state = t.state();
        seen2.set(Some((state, t.cancel())));
    })?;
    *slot.borrow_mut() = Some(ev.call_at(now, push(&l, "timeout"))?);
    ev.run_once()?;
    let (state, cancelled) = seen.get().expect("the response ran");
    assert_eq!(state, HandleState::Pending, "due but not yet run");
    assert!(cancelled);
    assert_eq!(*l.borrow(), ["response"]);
    assert_eq!(
        slot.borrow().as_ref().unwrap().state(),
        HandleState::Cancelled
    );
    assert_eq!(ev.ready_len(), 0);
    Ok(())
}

/// Timers with equal deadlines run in the order they were scheduled.
#[test]
fn equal_deadlines_run_fifo() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let order = Rc::new(RefCell::new(Vec::new()));
    let when = Instant::now() + Duration::from_millis(2);
    for i in 0..50 {
        let o = order.clone();
        ev.call_at(when, move |_| o.borrow_mut().push(i))?;
    }
    ev.call_at(when, |lp| lp.stop())?;
    ev.run()?;
    assert_eq!(*order.borrow(), (0..50).collect::<Vec<_>>());
    Ok(())
}

/// Past and zero deadlines run on the next turn, earliest deadline first.
#[test]
fn past_and_zero_deadlines_run_next_turn_in_deadline_order() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    let now = Instant::now();
    ev.call_later(Duration::ZERO, push(&l, "zero"))?;
    ev.call_at(now - Duration::from_millis(5), push(&l, "past-5ms"))?;
    ev.call_at(now - Duration::from_millis(10), push(&l, "past-10ms"))?;
    ev.run_once()?;
    assert_eq!(*l.borrow(), ["past-10ms", "past-5ms", "zero"]);
    Ok(())
}

/// `stop()` inside a callback lets the turn finish; work queued during it
/// stays queued for the next `run()`.
#[test]
fn stop_inside_a_callback_finishes_the_turn_and_keeps_new_work() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    let l2 = l.clone();
    ev.call_soon(move |lp| {
        l2.borrow_mut().push("stopper");
        lp.stop();
        lp.call_soon(push(&l2, "next-run")).unwrap();
    })?;
    ev.call_soon(push(&l, "same-turn"))?;
    ev.run()?;
    assert_eq!(*l.borrow(), ["stopper", "same-turn"]);
    assert_eq!(ev.turn_count(), 1);
    assert_eq!(ev.ready_len(), 1);
    ev.call_soon(|lp| lp.stop())?;
    ev.run()?;
    assert_eq!(*l.borrow(), ["stopper", "same-turn", "next-run"]);
    Ok(())
}

/// `stop()` before `run()` makes `run()` do exactly one turn, without sleeping.
#[test]
fn stop_before_run_runs_exactly_one_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let l = log();
    ev.call_later(Duration::from_secs(60), push(&l, "far"))?;
    ev.call_soon(push(&l, "soon"))?;
    ev.stop();
    let t0 = Instant::now();
    ev.run()?;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(ev.turn_count(), 1);
    assert_eq!(*l.borrow(), ["soon"]);
    // And the stop request does not outlive that run.
    ev.call_soon(|lp| lp.stop())?;
    ev.run()?;
    assert_eq!(ev.turn_count(), 2);
    Ok(())
}

struct DropFlag(Rc<RefCell<Vec<&'static str>>>, &'static str);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.borrow_mut().push(self.1);
    }
}

/// `close()` drops queued work without running it; afterwards scheduling is an error.
#[test]
fn close_drops_queued_work_and_refuses_more() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let ran = log();
    let dropped = log();
    let (r, d) = (ran.clone(), DropFlag(dropped.clone(), "soon"));
    ev.call_soon(move |_| {
        let _keep = &d;
        r.borrow_mut().push("soon");
    })?;
    let (r, d) = (ran.clone(), DropFlag(dropped.clone(), "timer"));
    let h = ev.call_later(Duration::from_secs(1), move |_| {
        let _keep = &d;
        r.borrow_mut().push("timer");
    })?;
    let remote = ev.remote();
    ev.close()?;
    assert!(ran.borrow().is_empty());
    assert_eq!(*dropped.borrow(), ["soon", "timer"]);
    assert_eq!(h.state(), HandleState::Done);
    assert!(!h.cancel());
    assert!(matches!(ev.call_soon(|_| {}), Err(Error::Closed)));
    assert!(matches!(
        ev.call_later(Duration::ZERO, |_| {}),
        Err(Error::Closed)
    ));
    assert!(matches!(
        ev.call_at(Instant::now(), |_| {}),
        Err(Error::Closed)
    ));
    assert!(matches!(ev.run(), Err(Error::Closed)));
    assert!(matches!(ev.run_once(), Err(Error::Closed)));
    assert!(matches!(
        remote.call_soon_threadsafe(|_| {}),
        Err(Error::Closed)
    ));
    assert!(remote.is_closed());
    ev.close()?; // idempotent
    Ok(())
}

/// The loop cannot be closed or re-entered while it runs.
#[test]
fn close_and_run_inside_a_callback_are_errors() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    ev.call_soon(move |lp| {
        s.borrow_mut()
            .push(matches!(lp.close(), Err(Error::Running)));
        s.borrow_mut().push(matches!(lp.run(), Err(Error::Running)));
        s.borrow_mut()
            .push(matches!(lp.run_once(), Err(Error::Running)));
        s.borrow_mut().push(lp.is_running());
        lp.stop();
    })?;
    ev.run()?;
    assert_eq!(*seen.borrow(), [true, true, true, true]);
    assert!(!ev.is_running());
    Ok(())
}

/// Callbacks reach the loop they run on without capturing it.
#[test]
fn current_loop_is_only_available_while_running() -> Result<(), Error> {
    assert!(matches!(Loop::current(), Err(Error::NoRunningLoop)));
    let ev = EventLoop::new()?;
    let ok = Rc::new(RefCell::new(false));
    let o = ok.clone();
    ev.call_soon(move |_| {
        let lp = Loop::current().unwrap();
        *o.borrow_mut() = lp.is_running();
        lp.stop();
    })?;
    ev.run()?;
    assert!(*ok.borrow());
    assert!(matches!(Loop::current(), Err(Error::NoRunningLoop)));
    Ok(())
}

/// Dropping the owner from inside a callback closes the loop once `run` returns.
#[test]
fn dropping_the_event_loop_inside_run_closes_it_afterwards() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let lp = ev.to_loop();
    let slot = Rc::new(RefCell::new(Some(ev)));
    let s = slot.clone();
    // Recorded, not asserted, in the callback: the loop contains its panics.
    let closed = Rc::new(Cell::new(None));
    let c = closed.clone();
    lp.call_soon(move |lp| {
        drop(s.borrow_mut().take());
        c.set(Some(lp.is_closed()));
        lp.stop();
    })?;
    lp.run()?;
    let closed = closed.get().expect("the callback ran");
    assert!(!closed, "not while running");
    assert!(lp.is_closed());
    Ok(())
}
