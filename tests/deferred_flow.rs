//! `loop_fn`, `Deferred::finally` and `race_either`: control flow as values.

use deferloop::deferred::{defer_later, loop_fn, race_either, set_unhandled_failure_hook, Either};
use deferloop::{fail, succeed, Cancelled, Deferred, Failure, FailureGroup, ManualClock};
use std::cell::{Cell, RefCell};
use std::ops::ControlFlow::{self, Break, Continue};
use std::rc::Rc;
use std::time::Duration;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_million_steps_that_fire_at_once_take_no_stack() {
    let d = loop_fn(0u64, |n| {
        Ok(if n == 1_000_000 {
            Break(n)
        } else {
            Continue(n + 1)
        })
    });
    assert_eq!(d.result().unwrap().unwrap(), 1_000_000);
}

#[test]
fn a_million_steps_that_fire_later_take_no_stack() {
    // Each step waits on a Deferred that a queue of resolvers fires one by one.
    type Steps = Vec<deferloop::Resolver<ControlFlow<u64, u64>>>;
    let pending: Rc<RefCell<Steps>> = Rc::default();
    let p = pending.clone();
    let d = loop_fn(0u64, move |n| {
        let (d, r) = Deferred::new();
        p.borrow_mut().push(r);
        d.map(move |_: ControlFlow<u64, u64>| {
            if n == 1_000_000 {
                Break(n)
            } else {
                Continue(n + 1)
            }
        })
    });
    let mut fired = 0;
    loop {
        let r = pending.borrow_mut().pop();
        let Some(r) = r else { break };
        r.callback(Continue(0)).unwrap();
        fired += 1;
    }
    assert_eq!(fired, 1_000_001);
    assert_eq!(d.result().unwrap().unwrap(), 1_000_000);
}

#[test]
fn the_state_moves_through_the_steps_and_a_failure_ends_the_loop() {
    let d = loop_fn(vec![1u8], |mut v| {
        if v.len() == 3 {
            return Err(Failure::msg("three is enough"));
        }
        v.push(v.len() as u8 + 1);
        Ok(Continue(v))
    });
    let d: Deferred<()> = d;
    assert_eq!(
        d.result().unwrap().unwrap_err().to_string(),
        "three is enough"
    );
}

#[test]
fn steps_that_wait_on_a_clock_resume_the_loop() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let d = loop_fn(0u32, move |n| {
        defer_later(&c, secs(1), move || {
            Ok(if n == 4 {
                Break(n * 10)
            } else {
                Continue(n + 1)
            })
        })
    });
    // Each advance runs the step that came due; the next is a second later.
    clock.pump(&[secs(1); 4]);
    let d = d.result().unwrap_err();
    clock.advance(secs(1));
    assert_eq!(d.result().unwrap().unwrap(), 40);
}

#[test]
fn cancelling_the_loop_cancels_the_waiting_step_and_stops() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let runs = Rc::new(Cell::new(0));
    let r = runs.clone();
    let d = loop_fn(0u32, move |n| {
        r.set(r.get() + 1);
        defer_later(&c, secs(1), move || Ok(Continue::<(), u32>(n + 1)))
    });
    clock.pump(&[secs(1); 2]);
    assert_eq!(runs.get(), 3);
    assert_eq!(clock.pending(), 1);
    d.cancel();
    assert_eq!(clock.pending(), 0, "the waiting step's timer is gone");
    clock.pump(&[secs(1); 10]);
    assert_eq!(runs.get(), 3, "no step after the cancel");
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
}

#[test]
fn a_step_that_cancels_its_own_loop_ends_it() {
    let own: Rc<RefCell<Option<Deferred<u8>>>> = Rc::default();
    let o = own.clone();
    let runs = Rc::new(Cell::new(0));
    let r = runs.clone();
    let (gate, open) = Deferred::<()>::new();
    let gate = RefCell::new(Some(gate));
    let d = loop_fn(0u8, move |n| {
        r.set(r.get() + 1);
        if n == 1 {
            if let Some(d) = o.borrow().as_ref() {
                d.cancel();
            }
        }
        match gate.borrow_mut().take() {
            Some(g) => g.map(move |()| Continue(n + 1)),
            None => succeed(Continue(n + 1)),
        }
    });
    *own.borrow_mut() = Some(d);
    open.callback(()).unwrap();
    assert_eq!(
        runs.get(),
        2,
        "the loop stopped in the step that cancelled it"
    );
    let d = own.borrow_mut().take().unwrap();
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
}

#[test]
fn a_panicking_step_fails_the_loop() {
    let d: Deferred<()> = loop_fn(0u8, |_| -> Result<ControlFlow<(), u8>, Failure> {
        panic!("step broke")
    });
    let f = d.result().unwrap().unwrap_err();
    assert!(f.is_panic());
    assert_eq!(f.to_string(), "panicked: step broke");
}

#[test]
fn finally_runs_on_success_failure_and_cancel_and_passes_the_outcome_on() {
    let runs = Rc::new(Cell::new(0));
    let r = runs.clone();
    let ok = succeed(5u8).finally(move || {
        r.set(r.get() + 1);
        Ok(())
    });
    assert_eq!(ok.result().unwrap().unwrap(), 5);
    let r = runs.clone();
    let failed = fail::<u8>(Failure::msg("no")).finally(move || {
        r.set(r.get() + 1);
        Ok(())
    });
    assert_eq!(failed.result().unwrap().unwrap_err().to_string(), "no");
    let r = runs.clone();
    let (d, _keep) = Deferred::<u8>::new();
    let d = d.finally(move || {
        r.set(r.get() + 1);
        Ok(())
    });
    d.cancel();
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    assert_eq!(runs.get(), 3);
}

#[test]
fn finally_waits_for_a_cleanup_that_returns_a_deferred() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let d = succeed("reply").finally(move || defer_later(&c, secs(2), || Ok(())));
    let d = d.result().unwrap_err();
    clock.advance(secs(2));
    assert_eq!(d.result().unwrap().unwrap(), "reply");
}

#[test]
fn a_failing_cleanup_replaces_a_value_but_not_a_failure_which_it_reports() {
    let d = succeed(1u8).finally(|| -> Result<(), Failure> { Err(Failure::msg("close failed")) });
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "close failed");

    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let prev = set_unhandled_failure_hook(Some(Box::new(move |u| {
        s.borrow_mut().push(u.failure.to_string())
    })));
    let d = fail::<u8>(Failure::msg("request failed"))
        .finally(|| -> Result<(), Failure> { Err(Failure::msg("close failed")) });
    assert_eq!(
        d.result().unwrap().unwrap_err().to_string(),
        "request failed"
    );
    set_unhandled_failure_hook(prev);
    assert_eq!(*seen.borrow(), ["close failed"]);
}

#[test]
fn a_panicking_cleanup_is_a_failure() {
    let d = succeed(1u8).finally(|| -> Result<(), Failure> { panic!("cleanup broke") });
    assert!(d.result().unwrap().unwrap_err().is_panic());
}

#[test]
fn race_either_takes_the_first_success_and_cancels_the_other() {
    let clock = ManualClock::new();
    let text = defer_later(&clock, secs(1), || Ok("text"));
    let number = defer_later(&clock, secs(3), || Ok(7u32));
    let d = race_either(text, number);
    clock.advance(secs(1));
    assert_eq!(d.result().unwrap().unwrap(), Either::Left("text"));
    assert_eq!(clock.pending(), 0);
}

#[test]
fn race_either_skips_a_failure_and_fails_only_when_both_do() {
    let d = race_either(fail::<u8>(Failure::msg("a")), succeed("b"));
    assert_eq!(d.result().unwrap().unwrap(), Either::Right("b"));
    let d = race_either(
        fail::<u8>(Failure::msg("a")),
        fail::<&str>(Failure::msg("b")),
    );
    let f = d.result().unwrap().unwrap_err();
    let group = f.downcast_ref::<FailureGroup>().unwrap();
    assert_eq!(group.0.len(), 2);
    assert_eq!(group.0[0].to_string(), "a");
}

#[test]
fn cancelling_race_either_cancels_both() {
    let clock = ManualClock::new();
    let d = race_either(
        defer_later(&clock, secs(1), || Ok(1u8)),
        defer_later(&clock, secs(2), || Ok(())),
    );
    d.cancel();
    assert_eq!(clock.pending(), 0);
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
}
