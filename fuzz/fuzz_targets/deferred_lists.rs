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

/// The one place a queue is made (its constructor's signature may change).
fn new_queue<T: 'static>(size: Option<usize>, backlog: Option<usize>) -> DeferredQueue<T> {
    let q = match size {
        Some(n) => DeferredQueue::bounded(n),
        None => DeferredQueue::unbounded(),
    };
    match backlog {
        Some(b) => q.with_backlog(b),
        None => q,
    }
}

fn small_limit(b: u8) -> Option<usize> {
    (b % 4 != 3).then_some(b as usize % 4)
}

/// A failure's identity, for comparing outcomes.
fn name(f: &Failure) -> String {
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

// ---------------------------------------------------------------- locks

#[derive(Default)]
struct LockModel {
    tokens: usize,
    waiting: VecDeque<usize>,
    held: Vec<usize>,
    grants: Vec<usize>,
    auto: Vec<bool>,
}

impl LockModel {
    fn grant(&mut self, id: usize) {
        self.grants.push(id);
        if self.auto[id] {
            self.release(id);
        } else {
            self.held.push(id);
        }
    }
    fn release(&mut self, id: usize) {
        self.held.retain(|&h| h != id);
        match self.waiting.pop_front() {
            Some(w) => self.grant(w),
            None => self.tokens += 1,
        }
    }
}

fn locks(input: &mut Input<'_>) {
    let b = input.byte();
    let limit = 1 + b as usize % 3;
    let use_lock = limit == 1 && b & 4 != 0;
    let lock = DeferredLock::new();
    let sem = DeferredSemaphore::new(NonZeroUsize::new(limit).unwrap());
    let acquire = || {
        if use_lock {
            lock.acquire()
        } else {
            sem.acquire()
        }
    };
    let guards: Rc<RefCell<Vec<Option<LockGuard>>>> = Rc::default();
    let grants: Rc<RefCell<Vec<usize>>> = Rc::default();
    let cancelled: Rc<RefCell<Vec<usize>>> = Rc::default();
    let mut handles: Vec<Deferred<()>> = Vec::new();
    let mut m = LockModel {
        tokens: limit,
        ..LockModel::default()
    };
    let mut steps = 0;
    while !input.0.is_empty() && steps < 100 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        match op % 3 {
            0 => {
                let id = handles.len();
                let auto = op & 8 != 0;
                m.auto.push(auto);
                guards.borrow_mut().push(None);
                let (g, gr, c) = (guards.clone(), grants.clone(), cancelled.clone());
                let d = acquire().add_both(move |r: Result<LockGuard, Failure>| {
                    match r {
                        Ok(guard) => {
                            gr.borrow_mut().push(id);
                            if !auto {
                                g.borrow_mut()[id] = Some(guard);
                            }
                        }
                        Err(f) => {
                            assert!(f.check::<Cancelled>(), "{f}");
                            c.borrow_mut().push(id);
                        }
                    }
                    Ok::<(), Failure>(())
                });
                handles.push(d);
                if m.tokens > 0 {
                    m.tokens -= 1;
                    m.grant(id);
                } else {
                    m.waiting.push_back(id);
                }
            }
            1 if !m.held.is_empty() => {
                let id = m.held[k % m.held.len()];
                let guard = guards.borrow_mut()[id].take().expect("held");
                if k & 1 == 0 {
                    drop(guard);
                } else {
                    guard.release();
                }
                m.release(id);
            }
            _ if !handles.is_empty() => {
                let id = k % handles.len();
                if let Some(at) = m.waiting.iter().position(|&w| w == id) {
                    m.waiting.remove(at);
                    assert!(!cancelled.borrow().contains(&id));
                    handles[id].cancel();
                    assert_eq!(cancelled.borrow().last(), Some(&id), "cancel fires at once");
                } else {
                    handles[id].cancel(); // fired: nothing happens
                }
            }
            _ => {}
        }
        assert_eq!(*grants.borrow(), m.grants, "grants, FIFO");
        let (tokens, waiting) = if use_lock {
            assert_eq!(lock.is_locked(), m.tokens == 0);
            (m.tokens, lock.waiting())
        } else {
            (sem.tokens(), sem.waiting())
        };
        assert_eq!((tokens, waiting), (m.tokens, m.waiting.len()));
    }
    // Break the cycles (a waiter's callback holds the guards, a guard the
    // semaphore): no more waiters, then no guards.
    handles.iter().for_each(Deferred::cancel);
    let held = std::mem::take(&mut *guards.borrow_mut());
    drop(held);
}

// ---------------------------------------------------------------- queue

#[derive(Default)]
struct QueueModel {
    size: Option<usize>,
    backlog: Option<usize>,
    stored: VecDeque<u32>,
    waiting: VecDeque<usize>,
    /// Which getter got which value.
    got: Vec<(usize, u32)>,
    /// The outcome of every put, in order.
    puts: Vec<(u32, bool)>,
    next: u32,
    again: Vec<bool>,
}

impl QueueModel {
    fn put(&mut self) {
        let v = self.next;
        self.next += 1;
        match self.waiting.pop_front() {
            Some(w) => {
                self.puts.push((v, true));
                self.receive(w, v);
            }
            None if self.size.is_none_or(|s| self.stored.len() < s) => {
                self.puts.push((v, true));
                self.stored.push_back(v);
            }
            None => self.puts.push((v, false)),
        }
    }
    fn receive(&mut self, id: usize, v: u32) {
        self.got.push((id, v));
        if self.again[id] {
            self.put();
        }
    }
}

fn queue(input: &mut Input<'_>) {
    let b = input.byte();
    let mut m = QueueModel {
        size: small_limit(b),
        backlog: small_limit(b >> 2),
        ..QueueModel::default()
    };
    let q: DeferredQueue<u32> = new_queue(m.size, m.backlog);
    let next = Rc::new(Cell::new(0u32));
    let got: Rc<RefCell<Vec<(usize, u32)>>> = Rc::default();
    let puts: Rc<RefCell<Vec<(u32, bool)>>> = Rc::default();
    let put = {
        let (next, puts) = (next.clone(), puts.clone());
        move |q: &DeferredQueue<u32>| {
            let v = next.get();
            next.set(v + 1);
            let ok = q.put(v).is_ok();
            puts.borrow_mut().push((v, ok));
        }
    };
    let mut handles: Vec<Deferred<()>> = Vec::new();
    let mut steps = 0;
    while !input.0.is_empty() && steps < 100 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        match op % 3 {
            0 => {
                put(&q);
                m.put();
            }
            1 => {
                let id = handles.len();
                let again = op & 8 != 0;
                let underflow =
                    m.stored.is_empty() && !m.backlog.is_none_or(|bl| m.waiting.len() < bl);
                match q.get() {
                    Err(_) => assert!(underflow, "underflow"),
                    Ok(d) => {
                        assert!(!underflow, "no underflow");
                        m.again.push(again);
                        let (g, q2, put) = (got.clone(), q.clone(), put.clone());
                        handles.push(d.add_both(move |r: Result<u32, Failure>| {
                            if let Ok(v) = r {
                                g.borrow_mut().push((id, v));
                                if again {
                                    put(&q2);
                                }
                            }
                            Ok::<(), Failure>(())
                        }));
                        match m.stored.pop_front() {
                            Some(v) => m.receive(id, v),
                            None => m.waiting.push_back(id),
                        }
                    }
                }
            }
            _ if !handles.is_empty() => {
                let id = k % handles.len();
                m.waiting.retain(|&w| w != id);
                handles[id].cancel();
            }
            _ => {}
        }
        assert_eq!(*got.borrow(), m.got, "who got what");
        // (A put from a getter's callback ends inside the outer put.)
        let mut seen = puts.borrow().clone();
        seen.sort_unstable();
        let mut want = m.puts.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "puts taken or refused");
        assert_eq!((q.len(), q.waiting()), (m.stored.len(), m.waiting.len()));
    }
    // Break the cycle (a waiting getter's callback holds the queue).
    handles.iter().for_each(Deferred::cancel);
    // No value lost or doubled: each was refused, stored, or got once.
    let mut all: Vec<u32> = m.got.iter().map(|g| g.1).collect();
    all.extend(m.stored.iter());
    all.extend(m.puts.iter().filter(|p| !p.1).map(|p| p.0));
    all.sort_unstable();
    assert_eq!(all, (0..next.get()).collect::<Vec<_>>());
}

// ---------------------------------------------------------------- lists

#[derive(Clone, Copy, PartialEq)]
enum Which {
    List {
        one_ok: bool,
        one_err: bool,
        consume: bool,
    },
    Gather,
    Race,
}

/// What a combinator over inputs fires with, as text.
type Out = Option<Result<String, String>>;

struct ListModel {
    which: Which,
    fired: bool,
    out: Out,
    results: Vec<Option<Result<u32, String>>>,
    remaining: usize,
    unhandled: usize,
    /// Each input has its result.
    done: Vec<bool>,
    /// Cancelled inputs absorb one later fire (Twisted's rule).
    absorb: Vec<bool>,
    /// Inputs that had fired before the build: a cancel does nothing to them.
    ready: Vec<bool>,
}

impl ListModel {
    fn record(&mut self, i: usize, r: Result<u32, String>) {
        assert!(!self.done[i]);
        self.done[i] = true;
        let (one_ok, one_err, consume) = match self.which {
            Which::List {
                one_ok,
                one_err,
                consume,
            } => (one_ok, one_err, consume),
            Which::Gather => (false, true, false),
            Which::Race => {
                if self.fired {
                    return;
                }
                match r {
                    Ok(v) => {
                        self.fire(Ok(format!("({i}, {v})")));
                        self.cancel_inputs();
                    }
                    Err(e) => {
                        self.results[i] = Some(Err(e));
                        self.remaining -= 1;
                        if self.remaining == 0 {
                            let all: Vec<String> = self
                                .results
                                .iter()
                                .map(|r| r.clone().unwrap().unwrap_err())
                                .collect();
                            self.fire(Err(format!("Group({all:?})")));
                        }
                    }
                }
                return;
            }
        };
        if self.fired {
            if r.is_err() && !consume {
                self.unhandled += 1;
            }
            return;
        }
        match r {
            Ok(v) if one_ok => {
                if !consume {
                    self.unhandled += self.results.iter().flatten().filter(|r| r.is_err()).count();
                }
                self.fire(Ok(format!("First({i}, {v})")));
            }
            Err(e) if one_err => self.fire(Err(format!("FirstError({i}, {e})"))),
            r => {
                self.results[i] = Some(r);
                self.remaining -= 1;
                if self.remaining == 0 {
                    let all: Vec<Result<u32, String>> =
                        self.results.iter().map(|r| r.clone().unwrap()).collect();
                    self.fire(Ok(match self.which {
                        Which::Gather => format!(
                            "{:?}",
                            all.iter().map(|r| *r.as_ref().unwrap()).collect::<Vec<_>>()
                        ),
                        _ => format!("All({all:?})"),
                    }));
                }
            }
        }
    }
    fn fire(&mut self, out: Result<String, String>) {
        self.fired = true;
        self.out = Some(out);
    }
    fn cancel_inputs(&mut self) {
        for i in 0..self.done.len() {
            if !self.done[i] && !self.ready[i] {
                self.absorb[i] = true;
                self.record(i, Err("Cancelled".into()));
            }
        }
    }
}

fn lists(input: &mut Input<'_>) {
    let b = input.byte();
    let which = match b % 4 {
        0 | 1 => Which::List {
            one_ok: b & 4 != 0,
            one_err: b & 8 != 0,
            consume: b & 16 != 0,
        },
        2 => Which::Gather,
        _ => Which::Race,
    };
    let n = input.byte() as usize % 6;
    let mut inputs = Vec::new();
    let mut resolvers: Vec<Option<Resolver<u32>>> = Vec::new();
    let mut m = ListModel {
        which,
        fired: false,
        out: None,
        results: vec![None; n],
        remaining: n,
        unhandled: 0,
        done: vec![false; n],
        absorb: vec![false; n],
        ready: vec![false; n],
    };
    let mut prefired = Vec::new();
    for i in 0..n {
        match input.byte() % 4 {
            0 => {
                inputs.push(succeed(i as u32 * 10));
                prefired.push((i, Ok(i as u32 * 10)));
                m.ready[i] = true;
                resolvers.push(None);
            }
            1 => {
                inputs.push(fail(Failure::msg(format!("e{i}"))));
                prefired.push((i, Err(format!("e{i}"))));
                m.ready[i] = true;
                resolvers.push(None);
            }
            _ => {
                let (d, r) = Deferred::new();
                inputs.push(d);
                resolvers.push(Some(r));
            }
        }
    }
    let unhandled = Rc::new(Cell::new(0));
    let u = unhandled.clone();
    let old = set_unhandled_failure_hook(Some(Box::new(move |_| u.set(u.get() + 1))));
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = match which {
        Which::List {
            one_ok,
            one_err,
            consume,
        } => DeferredList::new(inputs)
            .fire_on_one_callback(one_ok)
            .fire_on_one_errback(one_err)
            .consume_errors(consume)
            .build()
            .map(|r| match r {
                ListResult::All(all) => format!(
                    "All({:?})",
                    all.iter()
                        .map(|r| r.as_ref().map(|v| *v).map_err(name))
                        .collect::<Vec<_>>()
                ),
                ListResult::First { index, value } => format!("First({index}, {value})"),
                _ => unreachable!("a ListResult this target does not know"),
            }),
        Which::Gather => gather_results(inputs).map(|v| format!("{v:?}")),
        Which::Race => race(inputs).map(|(i, v)| format!("({i}, {v})")),
    };
    let d = d.add_both(move |r: Result<String, Failure>| {
        assert!(o.borrow().is_none(), "fired twice");
        *o.borrow_mut() = Some(r.map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    // At build, inputs that had fired record in input order.
    for (i, r) in prefired {
        m.record(i, r);
    }
    if n == 0 {
        match which {
            Which::List { one_ok: true, .. } => m.fire(Err("Abandoned".into())),
            // Nothing can fire it: `Abandoned` at once (Twisted's waits forever).
            Which::Race => m.fire(Err("Abandoned".into())),
            Which::Gather => m.fire(Ok("[]".into())),
            Which::List { .. } => m.fire(Ok("All([])".into())),
        }
    }
    let mut steps = 0;
    while !input.0.is_empty() && steps < 40 && n > 0 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize % n);
        match op % 8 {
            0..=2 => {
                if let Some(r) = &resolvers[k] {
                    let v = 100 + op as u32;
                    if r.callback(v).is_ok() && !std::mem::take(&mut m.absorb[k]) {
                        m.record(k, Ok(v));
                    }
                }
            }
            3..=4 => {
                if let Some(r) = &resolvers[k] {
                    if r.errback(Failure::msg(format!("f{k}"))).is_ok()
                        && !std::mem::take(&mut m.absorb[k])
                    {
                        m.record(k, Err(format!("f{k}")));
                    }
                }
            }
            5 => {
                // A dropped resolver: the input fails with `Abandoned`.
                if let Some(r) = resolvers[k].take() {
                    let pending = !r.is_called();
                    drop(r);
                    if pending {
                        m.record(k, Err("Abandoned".into()));
                    }
                }
            }
            6 => {
                d.cancel();
                if !m.fired && which == Which::Race {
                    // Decided: what the inputs do now is ignored.
                    for k in 0..n {
                        m.absorb[k] |= !m.done[k];
                        m.done[k] = true;
                    }
                    m.fire(Err("Cancelled".into()));
                } else if !m.fired {
                    m.cancel_inputs();
                    if !m.fired {
                        m.fire(Err("Cancelled".into()));
                    }
                }
            }
            _ => {}
        }
        assert_eq!(*out.borrow(), m.out, "the result");
    }
    assert_eq!(*out.borrow(), m.out, "the result");
    // The resolvers left are dropped in order: their inputs are abandoned.
    for (k, r) in resolvers.iter_mut().enumerate() {
        if let Some(r) = r.take() {
            let pending = !r.is_called() && !m.done[k];
            drop(r);
            if pending {
                m.record(k, Err("Abandoned".into()));
            }
        }
    }
    drop(d);
    set_unhandled_failure_hook(old);
    assert_eq!(unhandled.get(), m.unhandled, "failures reported unhandled");
}

// ---------------------------------------------------------------- map_limit

fn mapping(input: &mut Input<'_>) {
    let b = input.byte();
    let limit = 1 + b as usize % 4;
    let n = input.byte() as usize % 10;
    // Each item: 0 answers at once, 1 fails at once, else waits.
    let plan: Vec<u8> = (0..n).map(|_| input.byte() % 4).collect();
    let started: Rc<RefCell<Vec<usize>>> = Rc::default();
    let flying: Rc<RefCell<Vec<(usize, Resolver<u32>)>>> = Rc::default();
    let max_flying = Rc::new(Cell::new(0));
    let (s, fl, mf, p) = (
        started.clone(),
        flying.clone(),
        max_flying.clone(),
        plan.clone(),
    );
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = map_limit(0..n, limit, move |i| {
        s.borrow_mut().push(i);
        match p[i] {
            0 => succeed(i as u32),
            1 => fail(Failure::msg(format!("e{i}"))),
            _ => {
                let (d, r) = Deferred::new();
                fl.borrow_mut().push((i, r));
                let waiting = fl.borrow().iter().filter(|(_, r)| !r.is_called()).count();
                mf.set(mf.get().max(waiting));
                d
            }
        }
    })
    .add_both(move |r: Result<Vec<u32>, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| format!("{v:?}")).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    // The model.
    let mut next = 0;
    let mut in_flight: Vec<usize> = Vec::new();
    let mut values = vec![None; n];
    let mut first: Option<String> = None;
    let mut stopped = false;
    let mut cancelled = false;
    let mut model_started = Vec::new();
    let mut m_out: Out = None;
    let unhandled = Rc::new(Cell::new(0));
    let u = unhandled.clone();
    let old = set_unhandled_failure_hook(Some(Box::new(move |_| u.set(u.get() + 1))));
    let mut steps = 0;
    loop {
        // Fill, as the model sees it.
        loop {
            if stopped || in_flight.len() >= limit || next >= n {
                break;
            }
            let i = next;
            next += 1;
            model_started.push(i);
            match plan[i] {
                0 => values[i] = Some(i as u32),
                1 => {
                    first = Some(format!("FirstError({i}, e{i})"));
                    stopped = true;
                }
                _ => in_flight.push(i),
            }
        }
        if stopped {
            in_flight.clear(); // cancelled
        }
        if m_out.is_none() && in_flight.is_empty() && (stopped || next >= n) {
            m_out = Some(if cancelled {
                Err("Cancelled".into())
            } else if let Some(f) = &first {
                Err(f.clone())
            } else {
                Ok(format!(
                    "{:?}",
                    values.iter().map(|v| v.unwrap()).collect::<Vec<u32>>()
                ))
            });
        }
        assert_eq!(*started.borrow(), model_started, "items started, in order");
        assert!(max_flying.get() <= limit, "more than {limit} in flight");
        assert_eq!(*out.borrow(), m_out, "the result");
        if input.0.is_empty() || steps >= 40 || m_out.is_some() {
            break;
        }
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        if op % 8 == 7 {
            d.cancel();
            if m_out.is_none() {
                cancelled = true;
                stopped = true;
            }
            continue;
        }
        if in_flight.is_empty() {
            continue;
        }
        let i = in_flight.remove(k % in_flight.len());
        let r = {
            let fl = flying.borrow();
            let (_, r) = fl.iter().find(|(j, _)| *j == i).expect("in flight");
            r.clone()
        };
        if op & 1 == 0 {
            r.callback(1000 + i as u32).expect("pending");
            values[i] = Some(1000 + i as u32);
        } else {
            r.errback(Failure::msg(format!("f{i}"))).expect("pending");
            if !stopped {
                first = Some(format!("FirstError({i}, f{i})"));
                stopped = true;
            }
        }
    }
    let left = std::mem::take(&mut *flying.borrow_mut());
    drop(left);
    drop(d);
    set_unhandled_failure_hook(old);
    assert_eq!(unhandled.get(), 0, "failures reported unhandled");
}

// ---------------------------------------------------------------- loop_fn

fn looping(input: &mut Input<'_>) {
    // Step k: 0 continue at once, 1 break, 2 fail, else wait.
    let plan: Vec<u8> = (0..input.byte() as usize % 12)
        .map(|_| input.byte() % 5)
        .collect();
    let ran = Rc::new(Cell::new(0usize));
    let waiting: Rc<RefCell<Option<Resolver<ControlFlow<usize, usize>>>>> = Rc::default();
    let (r2, w2, p) = (ran.clone(), waiting.clone(), plan.clone());
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = loop_fn(0usize, move |k| {
        r2.set(r2.get() + 1);
        assert_eq!(k + 1, r2.get(), "state handed on");
        let step = p.get(k).copied().unwrap_or(1);
        let d: Deferred<ControlFlow<usize, usize>> = match step {
            0 | 3 => succeed(ControlFlow::Continue(k + 1)),
            1 => succeed(ControlFlow::Break(k)),
            2 => fail(Failure::msg(format!("e{k}"))),
            _ => {
                let (d, r) = Deferred::new();
                *w2.borrow_mut() = Some(r);
                d
            }
        };
        d
    })
    .add_both(move |r: Result<usize, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| v.to_string()).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    let mut k = 0; // the model: the step running or waiting
    let mut m_out: Out = None;
    let advance = |k: &mut usize, m_out: &mut Out| loop {
        match plan.get(*k).copied().unwrap_or(1) {
            0 | 3 => *k += 1,
            1 => return *m_out = Some(Ok(k.to_string())),
            2 => return *m_out = Some(Err(format!("e{k}"))),
            _ => return,
        }
    };
    advance(&mut k, &mut m_out);
    while m_out.is_none() && !input.0.is_empty() {
        let op = input.byte();
        let r = waiting.borrow_mut().take().expect("a step waits");
        match op % 4 {
            0 => {
                r.callback(ControlFlow::Continue(k + 1)).unwrap();
                k += 1;
                advance(&mut k, &mut m_out);
            }
            1 => {
                r.callback(ControlFlow::Break(k + 50)).unwrap();
                m_out = Some(Ok((k + 50).to_string()));
            }
            2 => {
                r.errback(Failure::msg("late")).unwrap();
                m_out = Some(Err("late".into()));
            }
            _ => {
                d.cancel();
                assert!(r.is_called(), "the waiting step is cancelled");
                m_out = Some(Err("Cancelled".into()));
            }
        }
        assert_eq!(*out.borrow(), m_out);
    }
    assert_eq!(*out.borrow(), m_out);
    assert_eq!(ran.get(), k + 1, "steps run");
    let left = waiting.borrow_mut().take();
    drop(left);
}

// ---------------------------------------------------------------- scope

fn scoping(input: &mut Input<'_>) {
    let n = input.byte() as usize % 6;
    let body_fails = input.byte() % 8 == 0;
    let children: Rc<RefCell<Vec<Resolver<u32>>>> = Rc::default();
    let c = children.clone();
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = scope(move |s| {
        for _ in 0..n {
            let (d, r) = Deferred::<u32>::new();
            s.spawn(d).expect("the scope runs");
            c.borrow_mut().push(r);
        }
        if body_fails {
            Err(Failure::msg("body"))
        } else {
            Ok(7u32)
        }
    })
    .add_both(move |r: Result<u32, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| v.to_string()).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    let mut pending: Vec<bool> = vec![true; n];
    let mut m_out: Out = None;
    let mut failures: Vec<String> = Vec::new();
    let mut cancelled = false;
    if body_fails {
        failures.push("body".into());
        pending.iter_mut().for_each(|p| *p = false);
    }
    loop {
        if m_out.is_none() && pending.iter().all(|p| !p) {
            m_out = Some(if !failures.is_empty() {
                Err(format!("Scope({failures:?})"))
            } else if cancelled {
                Err("Cancelled".into())
            } else {
                Ok("7".into())
            });
        }
        assert_eq!(*out.borrow(), m_out, "the scope's result");
        if m_out.is_some() || input.0.is_empty() {
            break;
        }
        let (op, k) = (input.byte(), input.byte() as usize % n.max(1));
        let r = children.borrow()[k].clone();
        match op % 4 {
            0 | 1 => {
                if r.callback(k as u32).is_ok() {
                    pending[k] = false;
                }
            }
            2 => {
                if r.errback(Failure::msg(format!("f{k}"))).is_ok() {
                    pending[k] = false;
                    failures.push(format!("f{k}"));
                    pending.iter_mut().for_each(|p| *p = false); // cancelled
                }
            }
            _ => {
                d.cancel();
                cancelled = true;
                pending.iter_mut().for_each(|p| *p = false);
            }
        }
        assert_eq!(
            children.borrow().iter().filter(|r| !r.is_called()).count(),
            pending.iter().filter(|p| **p).count(),
            "children still running"
        );
    }
    children.borrow_mut().clear();
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
