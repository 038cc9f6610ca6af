//! Waiting for several Deferreds at once (Twisted's): [`DeferredList`] for
//! every result, [`gather_results`] for every value or the first failure,
//! [`race`] for the first success.
//!
//! Each helper adds one link at the end of every input's chain and keeps the
//! inputs only to cancel them: an input is kept alive by whoever can still
//! fire it.

// Tests: tests/deferred_list.rs.

use super::errors::{FailureGroup, FirstError};
use super::node::WeakNode;
use super::repr::Repr;
use super::{cancel_weak, Deferred, Resolver};
use crate::Failure;
use std::cell::RefCell;
use std::panic::Location;
use std::rc::Rc;

/// What a [`DeferredList`] fires with.
#[derive(Debug)]
#[non_exhaustive]
pub enum ListResult<T> {
    /// Every input's result, in input order.
    All(Vec<Result<T, Failure>>),
    /// With `fire_on_one_callback(true)`: the first input that succeeded.
    First {
        /// Its position among the inputs.
        index: usize,
        /// Its value.
        value: T,
    },
}

/// Twisted's `DeferredList`: one Deferred for the results of many.
///
/// Built with [`DeferredList::new`], configured with the `fire_on_*` and
/// `consume_errors` switches, turned into a `Deferred<ListResult<T>>` by
/// [`build`](Self::build). The list's result:
/// - by default, once every input has fired: [`ListResult::All`] in input order
///   (an empty list fires `All(vec![])` at once);
/// - with `fire_on_one_callback(true)`: [`ListResult::First`] for the first success
///   (an empty list cannot fire, so it fails with [`Abandoned`](super::Abandoned)
///   at once where Twisted's waits forever; if all inputs fail it fires `All` of the failures,
///   as Twisted does);
/// - with `fire_on_one_errback(true)`: an errback with [`FirstError`] for the first
///   failure.
///
/// # Examples
/// ```
/// use deferloop::deferred::{fail, succeed, Deferred, DeferredList, ListResult};
/// use deferloop::Failure;
///
/// let (late, r) = Deferred::<u32>::new();
/// let list = DeferredList::new(vec![succeed(1), fail(Failure::msg("no")), late])
///     .consume_errors(true)
///     .build();
/// r.callback(3).unwrap(); // the last input fires the list
/// let Ok(Ok(ListResult::All(results))) = list.result() else { panic!() };
/// assert_eq!(results[0].as_ref().unwrap(), &1);
/// assert_eq!(results[1].as_ref().unwrap_err().to_string(), "no");
/// assert_eq!(results[2].as_ref().unwrap(), &3);
/// ```
///
/// Inputs that have already fired report during `build`. Cancelling the list's
/// Deferred cancels every input that can still fire (a panicking canceller is
/// logged and the rest are still cancelled); if that does not fire the list, it
/// gets a `Cancelled` failure as any Deferred does.
///
/// **Unlike Twisted**, a failure delivered to the list's consumer (in `All` or as
/// `FirstError`) is consumed on its input, so it is not reported twice. A failure
/// delivered nowhere (it arrived after the list fired, or the list fired `First`
/// after storing it) is reported as unhandled: on its input when that is dropped,
/// or when the list fires `First`. `consume_errors(true)` silences those.
#[must_use = "call build() to get the list's Deferred"]
pub struct DeferredList<T> {
    inputs: Vec<Deferred<T>>,
    fire_on_one_callback: bool,
    fire_on_one_errback: bool,
    consume_errors: bool,
}

impl<T> std::fmt::Debug for DeferredList<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredList")
            .field("inputs", &self.inputs)
            .field("fire_on_one_callback", &self.fire_on_one_callback)
            .field("fire_on_one_errback", &self.fire_on_one_errback)
            .field("consume_errors", &self.consume_errors)
            .finish()
    }
}

struct ListState<T> {
    results: Vec<Option<Result<T, Failure>>>,
    /// Each input's creation site, if failures may need reporting here.
    created: Vec<&'static Location<'static>>,
    remaining: usize,
    resolver: Option<Resolver<ListResult<T>>>,
    /// The inputs that could still be cancelled when the list was built.
    inputs: Vec<WeakNode>,
    fire_on_one_callback: bool,
    fire_on_one_errback: bool,
    consume_errors: bool,
}

impl<T: 'static> DeferredList<T> {
    /// A list over `inputs` (a `Vec`, an array, or any iterator of
    /// Deferreds) with every switch off.
    pub fn new(inputs: impl IntoIterator<Item = Deferred<T>>) -> DeferredList<T> {
        DeferredList {
            inputs: inputs.into_iter().collect(),
            fire_on_one_callback: false,
            fire_on_one_errback: false,
            consume_errors: false,
        }
    }

    /// Fire with the first success ([`ListResult::First`]).
    pub fn fire_on_one_callback(mut self, on: bool) -> Self {
        self.fire_on_one_callback = on;
        self
    }

    /// Errback with the first failure, as [`FirstError`].
    pub fn fire_on_one_errback(mut self, on: bool) -> Self {
        self.fire_on_one_errback = on;
        self
    }

    /// Silence failures that the list delivers nowhere (see the type's doc).
    pub fn consume_errors(mut self, on: bool) -> Self {
        self.consume_errors = on;
        self
    }

    /// Attaches to every input and returns the list's Deferred.
    #[track_caller]
    pub fn build(self) -> Deferred<ListResult<T>> {
        let n = self.inputs.len();
        // Creation sites are only reported when a `First` result leaves
        // stored failures undelivered.
        let created = if self.fire_on_one_callback && !self.consume_errors {
            self.inputs.iter().map(Deferred::created_at).collect()
        } else {
            Vec::new()
        };
        // An input that has fired and is idle records its result at once
        // below, and then its chain is over (its handle is consumed here):
        // cancelling it could do nothing, so it is not kept for `cancel`, and
        // its node is freed as soon as it has recorded.
        let inputs = self
            .inputs
            .iter()
            .filter(|d| !d.is_ready())
            .map(Deferred::weak_node)
            .collect();
        let state = Rc::new(RefCell::new(ListState {
            results: (0..n).map(|_| None).collect(),
            created,
            remaining: n,
            resolver: None,
            inputs,
            fire_on_one_callback: self.fire_on_one_callback,
            fire_on_one_errback: self.fire_on_one_errback,
            consume_errors: self.consume_errors,
        }));
        let weak = Rc::downgrade(&state);
        let (d, r) = Deferred::with_canceller(move |_| {
            let inputs = match weak.upgrade() {
                Some(s) => s.borrow().inputs.clone(),
                None => return,
            };
            for w in &inputs {
                cancel_weak(w);
            }
        });
        d.tag_inputs(&self.inputs);
        if n == 0 && !self.fire_on_one_callback {
            r.callback_if_pending(ListResult::All(Vec::new()));
            return d;
        }
        state.borrow_mut().resolver = Some(r);
        for (i, input) in self.inputs.into_iter().enumerate() {
            let s = state.clone();
            input.add_both(move |r| record(&s, i, r)).detach();
        }
        d
    }
}

fn record<T: 'static>(
    state: &Rc<RefCell<ListState<T>>>,
    i: usize,
    r: Result<T, Failure>,
) -> Result<(), Failure> {
    let mut s = state.borrow_mut();
    let live = s.resolver.as_ref().is_some_and(|r| !r.is_called());
    if !live {
        s.resolver = None;
        s.inputs.clear();
        return match r {
            Err(f) if !s.consume_errors => Err(f),
            _ => Ok(()),
        };
    }
    let mut undelivered = Vec::new();
    let fire = match r {
        Ok(value) if s.fire_on_one_callback => {
            // Failures stored so far are delivered nowhere now.
            if !s.consume_errors {
                for (k, slot) in s.results.iter().enumerate() {
                    if let Some(Err(f)) = slot {
                        undelivered.push((f.clone(), s.created[k]));
                    }
                }
            }
            Ok(ListResult::First { index: i, value })
        }
        Err(failure) if s.fire_on_one_errback => {
            Err(Failure::new(FirstError { index: i, failure }))
        }
        r => {
            s.results[i] = Some(r);
            s.remaining -= 1;
            if s.remaining > 0 {
                return Ok(());
            }
            let all = s
                .results
                .iter_mut()
                .map(|r| r.take().expect("every input recorded"))
                .collect();
            Ok(ListResult::All(all))
        }
    };
    let resolver = s.resolver.take().expect("live list has a resolver");
    let inputs = std::mem::take(&mut s.inputs);
    let results = std::mem::take(&mut s.results);
    drop(s);
    drop((inputs, results));
    for (f, created_at) in undelivered {
        super::unhandled::report(f, created_at);
    }
    resolver.resolve_if_pending(fire);
    Ok(())
}

/// Twisted's `gatherResults`: the values of all inputs in input order, or an
/// errback with [`FirstError`] for the first failure. Empty input fires `vec![]`.
/// Cancelling the result cancels every input. (Failure reporting as for
/// [`DeferredList`]; later failures are reported, as with `consume_errors(false)`.)
///
/// # Examples
/// ```
/// use deferloop::deferred::FirstError;
/// use deferloop::{defer_later, gather_results, EventLoop, Failure};
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// let ms = Duration::from_millis;
/// let all = gather_results(vec![
///     defer_later(&ev, ms(3), || Ok(1)),
///     defer_later(&ev, ms(1), || Ok(2)),
/// ]);
/// assert_eq!(ev.run_until(all).unwrap(), [1, 2]); // input order, not arrival order
///
/// let one_fails = gather_results(vec![
///     defer_later(&ev, ms(1), || Ok(1)),
///     defer_later(&ev, ms(2), || Err::<u32, _>(Failure::msg("no route"))),
/// ]);
/// let f = ev.run_until(one_fails).unwrap_err();
/// let first = f.downcast_ref::<FirstError>().unwrap();
/// assert_eq!((first.index, first.failure.to_string().as_str()), (1, "no route"));
/// # Ok::<(), deferloop::Error>(())
/// ```
#[track_caller]
pub fn gather_results<T: 'static>(
    inputs: impl IntoIterator<Item = Deferred<T>>,
) -> Deferred<Vec<T>> {
    let inputs: Vec<Deferred<T>> = inputs.into_iter().collect();
    if inputs.iter().all(Deferred::is_ready) {
        return gather_ready(inputs);
    }
    DeferredList::new(inputs)
        .fire_on_one_errback(true)
        .build()
        .map(|r| match r {
            ListResult::All(all) => all
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|_| {
                        unreachable!("fire_on_one_errback delivers only successes in All")
                    })
                })
                .collect(),
            ListResult::First { .. } => unreachable!("fire_on_one_callback is off"),
        })
}

/// `gather_results` of inputs that all have their result: what the list
/// would do, without a list. The first failure fails the gather; later ones
/// are reported as unhandled, as their detached chains would report them.
#[track_caller]
fn gather_ready<T: 'static>(inputs: Vec<Deferred<T>>) -> Deferred<Vec<T>> {
    let mut values = Vec::with_capacity(inputs.len());
    let mut first = None;
    for (index, d) in inputs.into_iter().enumerate() {
        let (r, created_at) = match d.take_repr() {
            Repr::Ready(r, at) => (r, at),
            other => {
                let node = other.into_node();
                let at = node.borrow().created_at();
                let r = super::run::take_result(&node).expect("every input is ready");
                (r, at)
            }
        };
        match (r, &first) {
            (Ok(v), None) => values.push(v.take::<T>()),
            (Err(failure), None) => first = Some(FirstError { index, failure }),
            (Err(f), Some(_)) => super::unhandled::report(f, created_at),
            (Ok(_), Some(_)) => {}
        }
    }
    match first {
        None => super::succeed(values),
        Some(e) => super::fail(e),
    }
}

struct Race<T> {
    resolver: Option<Resolver<(usize, T)>>,
    failures: Vec<Option<Failure>>,
    remaining: usize,
    inputs: Vec<WeakNode>,
}

/// Twisted's `race`: the first success as `(index, value)`; every other input is
/// then cancelled exactly once (their failures are consumed quietly). If every
/// input fails: an errback with [`FailureGroup`] (failures in input order).
/// Cancelling the result cancels every input; results arriving after the race is
/// decided or cancelled are ignored. An empty race, which nothing can fire, fails
/// at once with [`Abandoned`](super::Abandoned), where Twisted's waits forever.
///
/// # Examples
/// Ask two mirrors, keep the first answer; the slower request is cancelled:
/// ```
/// use deferloop::{defer_later, race, EventLoop};
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// let ms = Duration::from_millis;
/// let first = race([
///     defer_later(&ev, ms(200), || Ok("mirror A")),
///     defer_later(&ev, ms(1), || Ok("mirror B")),
/// ]);
/// assert_eq!(ev.run_until(first).unwrap(), (1, "mirror B"));
/// assert_eq!(ev.timer_count(), 0); // mirror A's timer is gone
/// # Ok::<(), deferloop::Error>(())
/// ```
#[track_caller]
pub fn race<T: 'static>(inputs: impl IntoIterator<Item = Deferred<T>>) -> Deferred<(usize, T)> {
    let inputs: Vec<Deferred<T>> = inputs.into_iter().collect();
    let n = inputs.len();
    let state = Rc::new(RefCell::new(Race {
        resolver: None,
        failures: (0..n).map(|_| None).collect(),
        remaining: n,
        inputs: inputs.iter().map(Deferred::weak_node).collect(),
    }));
    let weak = Rc::downgrade(&state);
    let (d, r) = Deferred::with_canceller(move |_| {
        let Some(s) = weak.upgrade() else { return };
        let inputs = {
            let mut s = s.borrow_mut();
            s.resolver = None; // decided: later results are ignored
            std::mem::take(&mut s.inputs)
        };
        for w in &inputs {
            cancel_weak(w);
        }
    });
    state.borrow_mut().resolver = Some(r);
    d.tag_inputs(&inputs);
    for (i, input) in inputs.into_iter().enumerate() {
        let s = state.clone();
        input
            .add_both(move |r| {
                race_record(&s, i, r);
                Ok(())
            })
            .detach();
    }
    d
}

fn race_record<T: 'static>(state: &Rc<RefCell<Race<T>>>, i: usize, r: Result<T, Failure>) {
    let mut s = state.borrow_mut();
    if s.resolver.as_ref().is_none_or(|r| r.is_called()) {
        return;
    }
    match r {
        Ok(v) => {
            let resolver = s.resolver.take().expect("checked above");
            let inputs = std::mem::take(&mut s.inputs);
            s.failures.clear();
            drop(s);
            resolver.callback_if_pending((i, v));
            for (k, w) in inputs.iter().enumerate() {
                if k != i {
                    cancel_weak(w);
                }
            }
        }
        Err(f) => {
            s.failures[i] = Some(f);
            s.remaining -= 1;
            if s.remaining == 0 {
                let resolver = s.resolver.take().expect("checked above");
                let failures = s
                    .failures
                    .drain(..)
                    .map(|f| f.expect("all failed"))
                    .collect();
                s.inputs.clear();
                drop(s);
                resolver.errback_if_pending(FailureGroup(failures));
            }
        }
    }
}
