//! Bounded concurrency over an iterator: [`map_limit`] (results in input
//! order, the first failure cancels what is in flight),
//! [`map_limit_settled`] (every outcome, in input order) and
//! [`for_each_limit`]. async.js's `mapLimit`, futures' `buffered(n)`,
//! Twisted's `Cooperator` used to "limit parallelism".
//!
//! Where users of those were bitten, this does otherwise:
//! - a limit of 0 is an error at once, never a hang (futures' `buffered(0)`);
//! - after a failure nothing new starts, what is in flight is cancelled, and
//!   the result fires only once all of it has ended (async.js ran on after an
//!   error, and could not cancel or wait for running tasks);
//! - items that finish at once are taken in a loop, not by recursion.

// Tests: tests/deferred_map_limit.rs.

use super::node::WeakNode;
use super::steps::Step;
use super::{cancel_weak, fail, Cancelled, Deferred, FirstError, IntoStep, Resolver};
use crate::Failure;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};

/// Applies `f` to every item, with at most `limit` of the Deferreds it
/// returns pending at once, and fires with the values in input order.
///
/// The first failure stops it: no further item is started, every item in
/// flight is cancelled, and once they have all ended the result fails with
/// [`FirstError`] (index and failure of the first one; the failures of the
/// cancelled ones are consumed). Cancelling the result does the same and
/// fails it with [`Cancelled`]. A panic in `f` is that
/// item's failure. A `limit` of 0 fails at once with
/// [`Error::InvalidInput`](crate::Error::InvalidInput), taking no item.
///
/// # Examples
/// Fetch five pages, two at a time:
/// ```
/// use deferloop::deferred::{defer_later, map_limit};
/// use deferloop::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let c = clock.clone();
/// let pages = map_limit(1..=5u64, 2, move |n| {
///     defer_later(&c, Duration::from_secs(n), move || Ok(n * 10))
/// });
/// clock.pump(&[Duration::from_secs(1); 9]); // done at 1, 2, 4, 6 and 9 s
/// assert_eq!(pages.result().unwrap().unwrap(), [10, 20, 30, 40, 50]);
/// ```
#[track_caller]
pub fn map_limit<I, R, F>(items: I, limit: usize, f: F) -> Deferred<Vec<R::Output>>
where
    I: IntoIterator,
    I::IntoIter: 'static,
    R: IntoStep,
    F: FnMut(I::Item) -> R + 'static,
{
    run(items, limit, f, Mode::FailFast, Location::caller()).add_callback(
        |out: Vec<Result<R::Output, Failure>>| out.into_iter().collect::<Result<Vec<_>, _>>(),
    )
}

/// Like [`map_limit`], but every item runs whatever the others do: the
/// outcomes, in input order (JavaScript's `Promise.allSettled` with a
/// limit). Fails only when cancelled or given a `limit` of 0.
#[track_caller]
pub fn map_limit_settled<I, R, F>(
    items: I,
    limit: usize,
    f: F,
) -> Deferred<Vec<Result<R::Output, Failure>>>
where
    I: IntoIterator,
    I::IntoIter: 'static,
    R: IntoStep,
    F: FnMut(I::Item) -> R + 'static,
{
    run(items, limit, f, Mode::Settled, Location::caller())
}

/// [`map_limit`] for effects: at most `limit` pending at once, the first
/// failure cancels the rest; fires with `()` once every item is done.
#[track_caller]
pub fn for_each_limit<I, R, F>(items: I, limit: usize, f: F) -> Deferred<()>
where
    I: IntoIterator,
    I::IntoIter: 'static,
    R: IntoStep<Output = ()>,
    F: FnMut(I::Item) -> R + 'static,
{
    // `Vec<()>` never allocates.
    map_limit(items, limit, f).map(drop)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    FailFast,
    Settled,
}

struct Mapping<It, F, U> {
    state: RefCell<State<It, U>>,
    /// Taken out while it runs: a nested `fill` (an item firing inside `f`)
    /// then leaves the starting to the outer one.
    f: RefCell<Option<F>>,
}

struct State<It, U> {
    items: Option<It>,
    limit: usize,
    mode: Mode,
    /// Outcomes by input index; `None` while pending.
    out: Vec<Option<Result<U, Failure>>>,
    /// The pending ones: (index, node).
    flying: Vec<(usize, WeakNode)>,
    first: Option<FirstError>,
    stopped: bool,
    /// The map itself was cancelled.
    cancelled: bool,
    resolver: Option<Resolver<Vec<Result<U, Failure>>>>,
    at: &'static Location<'static>,
}

type Shared<It, F, U> = Rc<Mapping<It, F, U>>;

#[track_caller]
fn run<I, R, F>(
    items: I,
    limit: usize,
    f: F,
    mode: Mode,
    at: &'static Location<'static>,
) -> Deferred<Vec<Result<R::Output, Failure>>>
where
    I: IntoIterator,
    I::IntoIter: 'static,
    R: IntoStep,
    F: FnMut(I::Item) -> R + 'static,
{
    if limit == 0 {
        return fail(Failure::with_origin(
            crate::Error::InvalidInput("map_limit: the limit must be at least 1"),
            at,
        ));
    }
    let m: Shared<I::IntoIter, F, R::Output> = Rc::new(Mapping {
        state: RefCell::new(State {
            items: Some(items.into_iter()),
            limit,
            mode,
            out: Vec::new(),
            flying: Vec::new(),
            first: None,
            stopped: false,
            cancelled: false,
            resolver: None,
            at,
        }),
        f: RefCell::new(Some(f)),
    });
    let weak: Weak<Mapping<I::IntoIter, F, R::Output>> = Rc::downgrade(&m);
    let (d, r) = Deferred::with_canceller(move |_| {
        // The items are cancelled first; the map fails with `Cancelled`
        // once they have ended.
        if let Some(m) = weak.upgrade() {
            m.state.borrow_mut().cancelled = true;
            stop(&m);
            finish_if_done(&m);
        }
    });
    m.state.borrow_mut().resolver = Some(r);
    fill(&m);
    d
}

/// Starts items until `limit` are in flight or there are none left; fires
/// the result once everything has ended.
fn fill<It, F, R>(m: &Shared<It, F, R::Output>)
where
    It: Iterator + 'static,
    R: IntoStep,
    F: FnMut(It::Item) -> R + 'static,
{
    loop {
        let Some(mut f) = m.f.borrow_mut().take() else {
            return; // the outer `fill` goes on
        };
        let next = {
            let mut s = m.state.borrow_mut();
            if s.flying.len() >= s.limit {
                None
            } else if let Some(item) = s.items.as_mut().and_then(Iterator::next) {
                s.out.push(None);
                Some((s.out.len() - 1, item, s.at))
            } else {
                s.items = None;
                None
            }
        };
        let Some((index, item, at)) = next else {
            *m.f.borrow_mut() = Some(f);
            return finish_if_done(m);
        };
        // No borrow is held while `f` runs: it may cancel the whole map.
        let step = match catch_unwind(AssertUnwindSafe(|| f(item))) {
            Ok(r) => r.into_step(),
            Err(p) => Step::Ready(Err(Failure::from_panic(p, at))),
        };
        *m.f.borrow_mut() = Some(f);
        let r = match step {
            Step::Ready(r) => r,
            Step::Chain(d) => match d.result() {
                Ok(r) => r,
                Err(pending) => {
                    let stopped = {
                        let mut s = m.state.borrow_mut();
                        s.flying.push((index, pending.weak_node()));
                        if let Some(r) = s.resolver.as_ref().filter(|_| super::registry::on()) {
                            super::registry::tag_child(&Rc::downgrade(&r.node), &pending);
                        }
                        s.stopped
                    };
                    let me = m.clone();
                    pending
                        .add_both(move |r| {
                            me.state.borrow_mut().flying.retain(|(i, _)| *i != index);
                            record(&me, index, r);
                            fill(&me);
                            Ok(())
                        })
                        .detach();
                    if stopped {
                        // Stopped while `f` ran: this one is cancelled too.
                        stop(m);
                    }
                    continue;
                }
            },
        };
        record(m, index, r);
    }
}

/// Stores an item's outcome; in fail-fast mode the first failure stops the rest.
fn record<It, F, U>(m: &Shared<It, F, U>, index: usize, r: Result<U, Failure>) {
    let mut s = m.state.borrow_mut();
    let first_failure = s.mode == Mode::FailFast && !s.stopped && r.is_err();
    if let (true, Err(f)) = (first_failure, &r) {
        s.first = Some(FirstError {
            index,
            failure: f.clone(),
        });
    }
    s.out[index] = Some(r);
    drop(s);
    if first_failure {
        stop(m);
    }
}

/// Starts nothing more and cancels what is in flight; each cancelled item
/// leaves `flying` from its own callback, so the result waits for them all.
fn stop<It, F, U>(m: &Shared<It, F, U>) {
    let flying: Vec<WeakNode> = {
        let mut s = m.state.borrow_mut();
        s.items = None;
        s.stopped = true;
        s.flying.iter().map(|(_, w)| w.clone()).collect()
    };
    for w in &flying {
        cancel_weak(w);
    }
}

fn finish_if_done<It, F, U: 'static>(m: &Shared<It, F, U>) {
    let mut s = m.state.borrow_mut();
    if s.items.is_some() || !s.flying.is_empty() {
        return;
    }
    let Some(resolver) = s.resolver.take() else {
        return;
    };
    let first = s.first.take();
    let out = std::mem::take(&mut s.out);
    let at = s.at;
    let cancelled = s.cancelled;
    drop(s);
    match first {
        _ if cancelled => {
            resolver.errback_if_pending(Failure::with_origin(Cancelled, at));
        }
        Some(e) => {
            resolver.errback_if_pending(e);
        }
        None => {
            let out = out.into_iter().map(|o| o.expect("every item ended"));
            resolver.callback_if_pending(out.collect());
        }
    }
}
