//! Operation sequences over the Deferred combinators, each against a model
//! written from its documentation, after every operation:
//! - `DeferredLock`/`DeferredSemaphore`: acquire (some release from their own
//!   callback), release, cancel: tokens, waiting count, the order of grants
//!   (FIFO), cancelled waiters skipped;
//! - `DeferredQueue` (sizes and backlogs bounded or not): put (some getters
//!   put again from their callback), get, cancel: every value goes to the
//!   getter the model says or stays stored, none lost or doubled, overflow
//!   and underflow exactly when the model says;
//! - `DeferredList` (every switch), `gather_results`, `race`: inputs fired
//!   before and after, failures, dropped resolvers, a cancel: the result,
//!   and how many failures were reported unhandled (a hook counts them);
//! - `map_limit`: items that answer at once, fail at once or wait, fired in
//!   any order, a cancel: at most `limit` in flight, items started in order
//!   and none after a failure, values in input order, `FirstError`;
//! - `loop_fn`: steps that continue, break, fail or wait, a cancel: the
//!   steps run and the result;
//! - `scope`: children that succeed, fail or wait, a cancel: the first
//!   failure cancels the rest, the result only once every child has ended.
//!
//! Every failure is handled or reported exactly once: the count of
//! unhandled reports equals the model's.
#![no_main]

use deferloop::deferred::{
    fail, gather_results, loop_fn, map_limit, race, scope, set_unhandled_failure_hook, succeed,
    Abandoned, Cancelled, DeferredList, DeferredLock, DeferredQueue, DeferredSemaphore,
    FailureGroup, FirstError, ListResult, LockGuard, ScopeFailed,
};
use deferloop::{Deferred, Failure, Resolver};
use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::ops::ControlFlow;
use std::rc::Rc;

// The targets' parts, each with `use super::*`.
#[path = "deferred_lists/lists.rs"]
mod lists;
#[path = "deferred_lists/steps.rs"]
mod steps;
#[path = "deferred_lists/sync.rs"]
mod sync;

use lists::*;
use steps::*;
use sync::*;

/// The one place a queue is made (its constructor's signature may change).
pub(crate) fn new_queue<T: 'static>(
    size: Option<usize>,
    backlog: Option<usize>,
) -> DeferredQueue<T> {
    let q = match size {
        Some(n) => DeferredQueue::bounded(n),
        None => DeferredQueue::unbounded(),
    };
    match backlog {
        Some(b) => q.with_backlog(b),
        None => q,
    }
}

pub(crate) fn small_limit(b: u8) -> Option<usize> {
    (b % 4 != 3).then_some(b as usize % 4)
}

/// A failure's identity, for comparing outcomes.
pub(crate) fn name(f: &Failure) -> String {
    if f.check::<Cancelled>() {
        "Cancelled".into()
    } else if f.check::<Abandoned>() {
        "Abandoned".into()
    } else if let Some(e) = f.downcast_ref::<FirstError>() {
        format!("FirstError({}, {})", e.index, name(&e.failure))
    } else if let Some(g) = f.downcast_ref::<FailureGroup>() {
        format!("Group({:?})", g.0.iter().map(name).collect::<Vec<_>>())
    } else if let Some(s) = f.downcast_ref::<ScopeFailed>() {
        format!(
            "Scope({:?})",
            s.failures.iter().map(name).collect::<Vec<_>>()
        )
    } else {
        f.to_string()
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    match input.byte() % 6 {
        0 => locks(&mut input),
        1 => queue(&mut input),
        2 => lists(&mut input),
        3 => mapping(&mut input),
        4 => looping(&mut input),
        _ => scoping(&mut input),
    }
});
