//! What a callback may return (`IntoStep`, sealed) and the steps that
//! `add_callback`, `map`, `add_errback`, `add_callbacks` and `add_both` add
//! to a chain; `maybe_deferred`, a function's outcome as a Deferred. Tests:
//! through tests/deferred_chain.rs.

use super::node::{overwrite, run_moved, Outcome, Res, StepFn, Value};
use super::Deferred;
use crate::Failure;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

mod sealed {
    /// What a callback may return, as the chain runs it: implemented only
    /// here, so the set of [`IntoStep`](super::IntoStep) types stays closed.
    #[derive(Debug)]
    pub enum Step<U> {
        /// A plain result.
        Ready(Result<U, crate::Failure>),
        /// A Deferred to chain.
        Chain(super::Deferred<U>),
    }

    pub trait Sealed {}
    impl<U> Sealed for Result<U, crate::Failure> {}
    impl<U> Sealed for super::Deferred<U> {}
}
pub(super) use sealed::Step;

/// What a callback may return: `Result<U, Failure>` (use `?` on any error, since
/// every `std::error::Error` converts into a [`Failure`]) or a `Deferred<U>`
/// (chaining). The associated type lets the compiler infer `U`.
///
/// The trait is sealed: those two are the only implementations.
///
/// ```compile_fail
/// struct Mine;
/// impl deferloop::IntoStep for Mine {
///     type Output = ();
/// }
/// ```
pub trait IntoStep: sealed::Sealed {
    /// The value type the chain continues with.
    type Output: 'static;
    /// Converts into a step.
    #[doc(hidden)]
    fn into_step(self) -> Step<Self::Output>;
}

impl<U: 'static> IntoStep for Result<U, Failure> {
    type Output = U;
    #[inline]
    fn into_step(self) -> Step<U> {
        Step::Ready(self)
    }
}

impl<U: 'static> IntoStep for Deferred<U> {
    type Output = U;
    #[inline]
    fn into_step(self) -> Step<U> {
        Step::Chain(self)
    }
}

#[inline]
fn outcome<R: IntoStep>(r: R) -> Outcome {
    outcome_of(r.into_step())
}

#[inline]
fn outcome_of<U: 'static>(s: Step<U>) -> Outcome {
    match s {
        Step::Ready(Ok(v)) => Outcome::Done(Ok(Value::new(v))),
        Step::Ready(Err(f)) => Outcome::Done(Err(f)),
        Step::Chain(d) => d.into_outcome(),
    }
}

// The steps of `add_callback` (and `map`), `add_errback`, `add_callbacks`
// and `add_both`: types rather than closures, so that `run` can be always
// inlined (see `node::StepFn`).

pub(super) struct OnValue<T, F>(pub(super) F, pub(super) PhantomData<fn(T)>);

impl<T: 'static, R: IntoStep, F: FnOnce(T) -> R> StepFn for OnValue<T, F> {
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        match r {
            Ok(v) => outcome((self.0)(v.take::<T>())),
            Err(e) => Outcome::Done(Err(e)),
        }
    }

    #[inline(always)]
    fn run_in(self, slot: &mut Outcome) {
        if let Outcome::Done(Ok(v)) = slot {
            if let Some(t) = v.take_in_place::<T>() {
                match (self.0)(t).into_step() {
                    Step::Ready(Ok(u)) => v.put_in_place(u),
                    other => overwrite(slot, outcome_of(other)),
                }
                return;
            }
        }
        run_moved(self, slot);
    }
}

pub(super) struct Map<T, F>(pub(super) F, pub(super) PhantomData<fn(T)>);

impl<T: 'static, U: 'static, F: FnOnce(T) -> U> StepFn for Map<T, F> {
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        match r {
            Ok(v) => Outcome::Done(Ok(Value::new((self.0)(v.take::<T>())))),
            Err(e) => Outcome::Done(Err(e)),
        }
    }

    #[inline(always)]
    fn run_in(self, slot: &mut Outcome) {
        if let Outcome::Done(Ok(v)) = slot {
            if let Some(t) = v.take_in_place::<T>() {
                v.put_in_place((self.0)(t));
                return;
            }
        }
        run_moved(self, slot);
    }
}

pub(super) struct OnFailure<F>(pub(super) F);

impl<R: IntoStep, F: FnOnce(Failure) -> R> StepFn for OnFailure<F> {
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        match r {
            Ok(v) => Outcome::Done(Ok(v)),
            Err(e) => outcome((self.0)(e)),
        }
    }
}

pub(super) struct OnEither<T, F, G>(pub(super) F, pub(super) G, pub(super) PhantomData<fn(T)>);

impl<T, R, E, F, G> StepFn for OnEither<T, F, G>
where
    T: 'static,
    R: IntoStep,
    E: IntoStep<Output = R::Output>,
    F: FnOnce(T) -> R,
    G: FnOnce(Failure) -> E,
{
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        match r {
            Ok(v) => outcome((self.0)(v.take::<T>())),
            Err(e) => outcome((self.1)(e)),
        }
    }
}

pub(super) struct OnBoth<T, F>(pub(super) F, pub(super) PhantomData<fn(T)>);

impl<T: 'static, R: IntoStep, F: FnOnce(Result<T, Failure>) -> R> StepFn for OnBoth<T, F> {
    #[inline(always)]
    fn run(self, r: Res) -> Outcome {
        outcome((self.0)(r.map(Value::take::<T>)))
    }
}

/// Calls `f` now and makes its outcome a Deferred (Twisted's `maybeDeferred`):
/// `Ok(v)` → `succeed(v)`, `Err(f)` → `fail(f)` (the same failure), a returned
/// `Deferred` → that same Deferred, a panic → a failed Deferred whose failure
/// origin is the caller.
#[track_caller]
pub fn maybe_deferred<R: IntoStep>(f: impl FnOnce() -> R) -> Deferred<R::Output> {
    let at = Location::caller();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => match r.into_step() {
            Step::Ready(r) => Deferred::ready(r.map(Value::new), at),
            Step::Chain(d) => d,
        },
        Err(p) => Deferred::ready(Err(Failure::from_panic(p, at)), at),
    }
}
