//! Control flow as values: [`loop_fn`] (a loop that carries state),
//! [`Deferred::finally`] (cleanup on every outcome) and [`race_either`] (the
//! first of two Deferreds of different types). Retries are in
//! [`retry`](mod@super::retry), bounded concurrency in [`map`](super::map),
//! scopes in [`scope`](mod@super::scope).
//!
//! Each step a loop runs is a Deferred of [`ControlFlow`]: `Continue(state)`
//! runs the step again with the new state, `Break(value)` ends the loop with
//! that value. Steps that fire at once are run in a loop, not by recursion,
//! so a million of them take no stack (async.js's known overflow, and its
//! `setImmediate` workaround, are avoided); a step that waits resumes the
//! loop from its own callback.

// Tests: tests/deferred_flow.rs, and the unit tests below.

use super::node::WeakNode;
use super::steps::Step;
use super::{cancel_weak, fail, succeed, Deferred, IntoStep, Resolver};
use crate::Failure;
use std::cell::{Cell, RefCell};
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};

/// Runs `step` on `init`, then on each state it continues with, until a step
/// breaks with a value: the loop that coroutine code writes by awaiting each
/// step, without coroutines.
///
/// `step` returns anything a callback may return ([`IntoStep`]): a
/// `Result<ControlFlow<T, S>, Failure>` when it can answer at once, or a
/// `Deferred<ControlFlow<T, S>>` when it has to wait. The state moves
/// through the step (no shared `RefCell` needed), so a step can own a
/// connection, a buffer or a counter and hand it on.
///
/// - A step's failure ends the loop with that failure; a panic in `step` is
///   caught and ends it with a [`Panicked`](crate::Panicked) failure.
/// - Steps that fire at once run in a loop: any number of them is stack-safe,
///   and no iteration allocates beyond the step's own Deferred.
/// - Cancelling the returned Deferred cancels the step that is waiting and
///   runs no further step; the loop fails with
///   [`Cancelled`](super::Cancelled).
///
/// # Examples
/// Sum 1..=1,000,000, one step at a time, and a loop that waits on a timer
/// between steps:
/// ```
/// use deferloop::deferred::{defer_later, loop_fn};
/// use deferloop::ManualClock;
/// use std::ops::ControlFlow::{Break, Continue};
/// use std::time::Duration;
///
/// let sum = loop_fn((1u64, 0u64), |(i, acc)| {
///     Ok(if i > 1_000_000 { Break(acc) } else { Continue((i + 1, acc + i)) })
/// });
/// assert_eq!(sum.result().unwrap().unwrap(), 500_000_500_000);
///
/// let clock = ManualClock::new();
/// let c = clock.clone();
/// let ticks = loop_fn(0u32, move |n| {
///     defer_later(&c, Duration::from_secs(1), move || {
///         Ok(if n == 2 { Break(n) } else { Continue(n + 1) })
///     })
/// });
/// clock.pump(&[Duration::from_secs(1); 3]); // three steps, a second apart
/// assert_eq!(ticks.result().unwrap().unwrap(), 2);
/// ```
#[track_caller]
pub fn loop_fn<S, T, R, F>(init: S, step: F) -> Deferred<T>
where
    S: 'static,
    T: 'static,
    R: IntoStep<Output = ControlFlow<T, S>>,
    F: FnMut(S) -> R + 'static,
{
    let at = Location::caller();
    let looping = Rc::new(Looping {
        step: RefCell::new(Some(step)),
        resolver: RefCell::new(None),
        waiting: RefCell::new(None),
        ended: Cell::new(false),
        at,
    });
    let weak: Weak<Looping<F, T>> = Rc::downgrade(&looping);
    let (d, r) = Deferred::with_canceller(move |_| {
        let Some(l) = weak.upgrade() else { return };
        // No further step; the one waiting, if any, is cancelled. The
        // Resolver stays: the cancellation fires the Deferred.
        l.ended.set(true);
        drop(l.step.borrow_mut().take());
        let waiting = l.waiting.borrow_mut().take();
        if let Some(w) = waiting {
            cancel_weak(&w);
        }
    });
    *looping.resolver.borrow_mut() = Some(r);
    drive(&looping, init);
    d
}

struct Looping<F, T> {
    /// Taken out while it runs, and for good once the loop ends.
    step: RefCell<Option<F>>,
    resolver: RefCell<Option<Resolver<T>>>,
    /// The step being waited on.
    waiting: RefCell<Option<WeakNode>>,
    /// Finished or cancelled: no step runs any more.
    ended: Cell<bool>,
    at: &'static Location<'static>,
}

impl<F, T: 'static> Looping<F, T> {
    fn finish(&self, r: Result<T, Failure>) {
        self.ended.set(true);
        drop(self.step.borrow_mut().take());
        let resolver = self.resolver.borrow_mut().take();
        if let Some(resolver) = resolver {
            resolver.resolve_if_pending(r);
        }
    }
}

fn drive<S, T, R, F>(l: &Rc<Looping<F, T>>, mut state: S)
where
    S: 'static,
    T: 'static,
    R: IntoStep<Output = ControlFlow<T, S>>,
    F: FnMut(S) -> R + 'static,
{
    if l.ended.get() {
        return;
    }
    // Out of its cell while the loop runs; back in only while a step waits.
    let Some(mut step) = l.step.borrow_mut().take() else {
        return;
    };
    loop {
        let out = catch_unwind(AssertUnwindSafe(|| step(state)));
        if l.ended.get() {
            // Cancelled from inside the step: what it returned is dropped
            // (a Deferred it started is cancelled with it).
            if let Ok(r) = out {
                if let Step::Chain(d) = r.into_step() {
                    d.cancel();
                    d.detach();
                }
            }
            return l.finish(Err(Failure::new(super::Cancelled)));
        }
        let r = match out {
            Ok(r) => r.into_step(),
            Err(p) => Step::Ready(Err(Failure::from_panic(p, l.at))),
        };
        let r = match r {
            Step::Ready(r) => r,
            Step::Chain(d) => match d.result() {
                Ok(r) => r,
                Err(pending) => {
                    *l.step.borrow_mut() = Some(step);
                    *l.waiting.borrow_mut() = Some(pending.weak_node());
                    let me = l.clone();
                    pending
                        .add_both(move |r: Result<ControlFlow<T, S>, Failure>| {
                            me.waiting.borrow_mut().take();
                            match r {
                                Ok(ControlFlow::Continue(s)) => drive(&me, s),
                                Ok(ControlFlow::Break(v)) => me.finish(Ok(v)),
                                Err(f) => me.finish(Err(f)),
                            }
                            Ok(())
                        })
                        .detach();
                    return;
                }
            },
        };
        match r {
            Ok(ControlFlow::Continue(s)) => state = s,
            Ok(ControlFlow::Break(v)) => return l.finish(Ok(v)),
            Err(f) => return l.finish(Err(f)),
        }
    }
}

impl<T: 'static> Deferred<T> {
    /// Runs `cleanup` whatever the outcome — a value, a failure or a
    /// cancellation — and then passes the original outcome on: `try { … }
    /// finally { … }` for a chain.
    ///
    /// `cleanup` may return a Deferred (close a connection, release a lease);
    /// the chain waits for it. If the cleanup fails (or panics) after a
    /// success, its failure replaces the value. If it fails after a failure,
    /// the original failure passes on and the cleanup's is reported as
    /// unhandled — never lost, unlike Python's `finally`, whose exception
    /// replaces the one in flight.
    ///
    /// # Examples
    /// ```
    /// use deferloop::{fail, Failure};
    /// use std::{cell::Cell, rc::Rc};
    ///
    /// let closed = Rc::new(Cell::new(false));
    /// let c = closed.clone();
    /// let d = fail::<u8>(Failure::msg("refused")).finally(move || {
    ///     c.set(true);
    ///     Ok(())
    /// });
    /// assert!(closed.get());
    /// assert_eq!(d.result().unwrap().unwrap_err().to_string(), "refused");
    /// ```
    #[track_caller]
    pub fn finally<R: IntoStep<Output = ()>>(
        self,
        cleanup: impl FnOnce() -> R + 'static,
    ) -> Deferred<T> {
        let at = Location::caller();
        self.add_both(move |r: Result<T, Failure>| {
            let step = match catch_unwind(AssertUnwindSafe(cleanup)) {
                Ok(c) => c.into_step(),
                Err(p) => Step::Ready(Err(Failure::from_panic(p, at))),
            };
            match step {
                Step::Ready(c) => after_cleanup(r, c, at),
                Step::Chain(c) => c.add_both(move |c: Result<(), Failure>| after_cleanup(r, c, at)),
            }
        })
    }
}

/// The outcome a `finally` passes on: the original one, unless a cleanup
/// failure replaces a success.
fn after_cleanup<T: 'static>(
    r: Result<T, Failure>,
    cleanup: Result<(), Failure>,
    at: &'static Location<'static>,
) -> Deferred<T> {
    match (r, cleanup) {
        (Ok(v), Ok(())) => succeed(v),
        (Ok(_), Err(c)) => fail(c),
        (Err(f), Ok(())) => fail(f),
        (Err(f), Err(c)) => {
            super::unhandled::report(c, at);
            fail(f)
        }
    }
}

/// One of two values of different types: what [`race_either`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Either<A, B> {
    /// The first input won.
    Left(A),
    /// The second input won.
    Right(B),
}

/// The first *success* of two Deferreds of different types, as an
/// [`Either`]; the other is then cancelled (its failure consumed quietly).
/// If both fail: a [`FailureGroup`](super::FailureGroup) with both failures,
/// left first. Cancelling the result cancels both. This is
/// [`race`](super::race) for two types: tokio's `select!` over two branches,
/// except that a failure does not win the race.
///
/// # Examples
/// A reply or a timer, whichever comes first:
/// ```
/// use deferloop::deferred::{defer_later, race_either, Either};
/// use deferloop::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let reply = defer_later(&clock, Duration::from_secs(5), || Ok("pong"));
/// let tick = defer_later(&clock, Duration::from_secs(1), || Ok(1u32));
/// let first = race_either(reply, tick);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(first.result().unwrap().unwrap(), Either::Right(1));
/// assert_eq!(clock.pending(), 0); // the reply's timer was cancelled
/// ```
#[track_caller]
pub fn race_either<A: 'static, B: 'static>(
    a: Deferred<A>,
    b: Deferred<B>,
) -> Deferred<Either<A, B>> {
    super::race(vec![a.map(Either::Left), b.map(Either::Right)]).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::Cancelled;

    #[test]
    fn a_loop_of_ready_steps_runs_without_recursion() {
        let d = loop_fn(0u32, |n| {
            Ok(if n == 2_000_000 {
                ControlFlow::Break(n)
            } else {
                ControlFlow::Continue(n + 1)
            })
        });
        assert_eq!(d.result().unwrap().unwrap(), 2_000_000);
    }

    #[test]
    fn cancelling_a_loop_cancels_its_waiting_step_and_runs_no_more() {
        let (step_d, _r) = Deferred::<ControlFlow<u8, u8>>::new();
        let step_d = RefCell::new(Some(step_d));
        let runs = Rc::new(std::cell::Cell::new(0));
        let r2 = runs.clone();
        let d = loop_fn(0u8, move |_| {
            r2.set(r2.get() + 1);
            step_d.borrow_mut().take().expect("runs once")
        });
        d.cancel();
        assert_eq!(runs.get(), 1);
        assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    }
}
