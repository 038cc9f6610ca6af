//! `retry`: attempts, back-off with seeded jitter, deadline, which failures
//! are retried, and cancellation — all on the manual clock.

use deferloop::deferred::{defer_later, retry, Backoff, GaveUp, GiveUpReason, Jitter, RetryPolicy};
use deferloop::{Cancelled, Deferred, Error, Failure, ManualClock, TimedOut};
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `op` under `policy` and records when each attempt started, in ms
/// since the start.
fn attempts_at(
    policy: RetryPolicy,
    fails: u32,
) -> (Deferred<u32>, Rc<RefCell<Vec<u64>>>, ManualClock) {
    let clock = ManualClock::new();
    let start = clock.now_instant();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (s, c) = (seen.clone(), clock.clone());
    let d = retry(&clock, policy, move |n| {
        s.borrow_mut()
            .push((c.now_instant() - start).as_millis() as u64);
        if n < fails {
            Err(Failure::new(io::Error::other(format!(
                "attempt {n} failed"
            ))))
        } else {
            Ok(n)
        }
    });
    (d, seen, clock)
}

trait Now {
    fn now_instant(&self) -> Instant;
}
impl Now for ManualClock {
    fn now_instant(&self) -> Instant {
        deferloop::Clock::now(self)
    }
}

fn run_for(clock: &ManualClock, total: u64) {
    for _ in 0..total {
        clock.advance(ms(1));
    }
}

#[test]
fn waits_grow_exponentially_up_to_the_cap() {
    let policy = RetryPolicy::new().attempts(6).backoff(
        Backoff::exponential(ms(100))
            .max(ms(300))
            .jitter(Jitter::None),
    );
    let (d, seen, clock) = attempts_at(policy, 5);
    run_for(&clock, 2_000);
    assert_eq!(d.result().unwrap().unwrap(), 5);
    // waits 100, 200, 300 (cap), 300, 300
    assert_eq!(*seen.borrow(), [0, 100, 300, 600, 900, 1200]);
}

#[test]
fn the_same_seed_gives_the_same_waits_and_jitter_stays_within_the_wait() {
    let waits =
        |seed| -> Vec<Duration> { Backoff::exponential(ms(100)).seed(seed).take(8).collect() };
    assert_eq!(waits(42), waits(42));
    assert_ne!(waits(42), waits(43));
    let mut cap = ms(100);
    for w in waits(42) {
        assert!(w <= cap, "{w:?} over {cap:?}");
        cap = (cap * 2).min(Duration::from_secs(10));
    }
    let equal: Vec<_> = Backoff::exponential(ms(100))
        .jitter(Jitter::Equal)
        .seed(1)
        .take(3)
        .collect();
    assert!(equal[0] >= ms(50) && equal[0] <= ms(100));
    assert!(equal[2] >= ms(200) && equal[2] <= ms(400));
}

#[test]
fn giving_up_keeps_every_attempt_and_the_last_error_is_reachable() {
    let policy = RetryPolicy::new()
        .attempts(3)
        .backoff(Backoff::constant(ms(10)));
    let (d, seen, clock) = attempts_at(policy, 10);
    run_for(&clock, 100);
    assert_eq!(seen.borrow().len(), 3);
    let f = d.result().unwrap().unwrap_err();
    let gave_up = f.downcast_ref::<GaveUp>().expect("a GaveUp");
    assert_eq!(gave_up.reason, GiveUpReason::Attempts);
    assert_eq!(gave_up.attempts.len(), 3);
    assert_eq!(gave_up.last().to_string(), "attempt 2 failed");
    // The last attempt's own error is the source: a chain walk finds it.
    let source = std::error::Error::source(gave_up).unwrap();
    assert!(source.downcast_ref::<io::Error>().is_some());
    assert_eq!(
        f.to_string(),
        "gave up after 3 attempts (no attempts left): attempt 2 failed"
    );
}

#[test]
fn reraise_fails_with_the_last_attempt_itself() {
    let policy = RetryPolicy::new()
        .attempts(2)
        .backoff(Backoff::constant(ms(1)))
        .reraise();
    let (d, _, clock) = attempts_at(policy, 10);
    run_for(&clock, 10);
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(
        f.trap::<io::Error>().unwrap().to_string(),
        "attempt 1 failed"
    );
}

#[test]
fn a_failure_the_predicate_refuses_is_not_retried() {
    let policy = RetryPolicy::new()
        .attempts(5)
        .backoff(Backoff::constant(ms(1)))
        .retry_if(|f| !f.to_string().contains("attempt 1"));
    let (d, seen, clock) = attempts_at(policy, 10);
    run_for(&clock, 10);
    assert_eq!(seen.borrow().len(), 2);
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(
        f.downcast_ref::<GaveUp>().unwrap().reason,
        GiveUpReason::NotRetried
    );
}

#[test]
fn the_deadline_cuts_a_running_attempt_and_stops_further_ones() {
    let clock = ManualClock::new();
    let c = clock.clone();
    let runs = Rc::new(RefCell::new(0));
    let r = runs.clone();
    let policy = RetryPolicy::new()
        .attempts(100)
        .backoff(Backoff::constant(ms(100)))
        .deadline(ms(250));
    // Each attempt takes 60 ms, then fails.
    let d = retry(&clock, policy, move |_| {
        *r.borrow_mut() += 1;
        defer_later(&c, ms(60), || -> Result<(), Failure> {
            Err(Failure::msg("busy"))
        })
    });
    run_for(&clock, 1_000);
    // 0–60 fail, wait to 160; 160–220 fail; a 100 ms wait would end past 250.
    assert_eq!(*runs.borrow(), 2);
    let f = d.result().unwrap().unwrap_err();
    assert_eq!(
        f.downcast_ref::<GaveUp>().unwrap().reason,
        GiveUpReason::Deadline
    );
    assert_eq!(clock.pending(), 0);

    // An attempt still running at the deadline is cancelled: TimedOut.
    let c = clock.clone();
    let policy = RetryPolicy::new().attempts(3).deadline(ms(50));
    let d = retry(&clock, policy, move |_| defer_later(&c, ms(500), || Ok(())));
    run_for(&clock, 60);
    let f = d.result().unwrap().unwrap_err();
    let gave_up = f.downcast_ref::<GaveUp>().unwrap();
    assert_eq!(gave_up.reason, GiveUpReason::Deadline);
    assert!(gave_up.last().check::<TimedOut>());
    assert_eq!(clock.pending(), 0);
}

#[test]
fn a_delay_hint_replaces_the_back_off() {
    let policy = RetryPolicy::new()
        .attempts(3)
        .backoff(Backoff::constant(ms(1)))
        .delay_hint(|_| Some(ms(500)));
    let (d, seen, clock) = attempts_at(policy, 2);
    run_for(&clock, 1_100);
    assert_eq!(d.result().unwrap().unwrap(), 2);
    assert_eq!(*seen.borrow(), [0, 500, 1000]);
}

#[test]
fn cancel_stops_the_pending_wait_or_attempt_and_nothing_follows() {
    // Cancelled while waiting between attempts.
    let policy = RetryPolicy::new()
        .attempts(5)
        .backoff(Backoff::constant(ms(100)));
    let (d, seen, clock) = attempts_at(policy, 10);
    run_for(&clock, 50);
    assert_eq!(clock.pending(), 1);
    d.cancel();
    assert_eq!(clock.pending(), 0, "the wait's timer is gone");
    run_for(&clock, 500);
    assert_eq!(seen.borrow().len(), 1);
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());

    // Cancelled during an attempt: the attempt is cancelled, not retried.
    let clock = ManualClock::new();
    let c = clock.clone();
    let runs = Rc::new(RefCell::new(0));
    let r = runs.clone();
    let d = retry(&clock, RetryPolicy::new().attempts(5), move |_| {
        *r.borrow_mut() += 1;
        defer_later(&c, ms(100), || Ok(()))
    });
    run_for(&clock, 10);
    d.cancel();
    assert_eq!(clock.pending(), 0);
    run_for(&clock, 500);
    assert_eq!(*runs.borrow(), 1);
}

#[test]
fn a_policy_without_attempts_is_refused_and_runs_nothing() {
    let clock = ManualClock::new();
    let ran = Rc::new(RefCell::new(false));
    let r = ran.clone();
    let d = retry(&clock, RetryPolicy::new().attempts(0), move |_| {
        *r.borrow_mut() = true;
        Ok(())
    });
    let f = d.result().unwrap().unwrap_err();
    assert!(matches!(
        f.downcast_ref::<Error>(),
        Some(Error::InvalidInput(_))
    ));
    assert!(!*ran.borrow());
}

#[test]
fn a_panicking_attempt_is_a_failure_and_is_retried() {
    let clock = ManualClock::new();
    let d = retry(
        &clock,
        RetryPolicy::new()
            .attempts(2)
            .backoff(Backoff::constant(ms(1))),
        |n| {
            if n == 0 {
                panic!("first attempt broke");
            }
            Ok(n)
        },
    );
    run_for(&clock, 5);
    assert_eq!(d.result().unwrap().unwrap(), 1);
}

#[test]
fn the_default_policy_is_bounded() {
    let (d, seen, clock) = attempts_at(RetryPolicy::new(), 100);
    run_for(&clock, 5_000);
    assert_eq!(seen.borrow().len(), 3);
    assert!(d.result().unwrap().is_err());
}
