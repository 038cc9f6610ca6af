//! Model tests of the timer wheel against a sorted list.
//!
//! `TimerWheel` (src/timers/) is compiled in here as a module, so the
//! very code the loop runs is driven by random sequences of insert (near, far
//! enough to sit several levels up, in batches with equal deadlines), cancel
//! (pending or reserved), reset (earlier or later, near or far, pending,
//! reserved or stale), pop-due (freeing or reserving the node), release,
//! clock advances small and large (cascades) and wake-ups at `next_deadline`.
//! After every step the wheel must agree with a plain sorted `Vec` of live
//! timers: the same firing order (deadline, then when last set), the same
//! live count, the same answers for stale ids, a `next_deadline` never later
//! than the earliest deadline (and equal to it while few timers are pending),
//! and memory for exactly the live timers (payloads alive = timers pending,
//! nodes = live + reserved, buffers within 4× the live count after a trim).
//! The same model then drives the public `ManualClock`, whose calls may
//! schedule more calls while it advances.
//!
//! (Compiling the file in also runs its own unit tests a second time here.)
//! Cases: `PROPTEST_CASES`, else the count below (RELIABILITY.md).

mod util;

#[allow(dead_code)]
#[path = "../src/timers/mod.rs"]
mod timers;

use deferloop::{Clock, ManualClock, ManualTimer, Timer};
use proptest::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use timers::{Removed, Reset, TimerId, TimerWheel};

#[derive(Debug, Clone)]
enum HeapOp {
    /// A timer `ms` after the current time.
    Insert(u64),
    /// A timer `s` seconds after the current time (levels 2 to 5).
    InsertFar(u64),
    /// `n` timers at once, `ms` apart (grows the heap past its small size).
    InsertBatch(usize, u64),
    /// Cancel every `k`-th live timer (mass cancellation shrinks the buffer).
    CancelEvery(usize),
    /// Cancel the `k`-th timer ever inserted (modulo): live, reserved or stale.
    Cancel(usize),
    /// Move time on, then pop every due timer, freeing its slot.
    Advance(u64),
    /// Move time on, then pop every due timer, keeping its slot reserved.
    AdvanceReserved(u64),
    /// Pop at `next_deadline()`: if it was early (a slot's start), nothing
    /// is due then and the next answer is later; if exact, time moves there.
    WakeAtNext,
    /// Release the slot of the `k`-th timer (modulo): a reserved one is
    /// freed; a pending one and a stale id are left as they are.
    Release(usize),
    /// Move the `k`-th timer (modulo) to `ms` after the current time: a
    /// pending one is filed again as if set anew (it leaves after the timers
    /// already set for its deadline); a reserved one is freed, as by a
    /// cancel, for the loop to set its task anew; a stale id is refused.
    Reset(usize, u64),
}

fn heap_op() -> impl Strategy<Value = HeapOp> {
    prop_oneof![
        6 => (0u64..40).prop_map(HeapOp::Insert),
        2 => (0u64..1_000_000).prop_map(HeapOp::InsertFar),
        1 => (1usize..100, 0u64..3).prop_map(|(n, ms)| HeapOp::InsertBatch(n, ms)),
        1 => (1usize..4).prop_map(HeapOp::CancelEvery),
        3 => any::<usize>().prop_map(HeapOp::Cancel),
        2 => (0u64..15).prop_map(HeapOp::Advance),
        1 => (0u64..100_000_000).prop_map(HeapOp::Advance),
        2 => Just(HeapOp::WakeAtNext),
        1 => (0u64..15).prop_map(HeapOp::AdvanceReserved),
        1 => any::<usize>().prop_map(HeapOp::Release),
        3 => (any::<usize>(), 0u64..40).prop_map(|(k, ms)| HeapOp::Reset(k, ms)),
        1 => (any::<usize>(), 0u64..1_000_000).prop_map(|(k, s)| HeapOp::Reset(k, s * 1000)),
    ]
}

/// Where a timer of the model is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum At {
    /// Pending, due at this time (ms).
    Live(u64),
    /// Taken out as due, slot reserved at this ready-queue number.
    Reserved(u64),
    /// Fired, cancelled or released.
    Gone,
}

/// A payload whose copies are counted: the heap must keep only live ones.
struct Payload {
    n: usize,
    _alive: Rc<()>,
}

fn check_heap(ops: Vec<HeapOp>) -> Result<(), TestCaseError> {
    let base = Instant::now();
    let at = |ms: u64| base + Duration::from_millis(ms);
    let alive = Rc::new(());
    let mut heap: TimerWheel<Payload> = TimerWheel::new(base);
    let mut ids: Vec<TimerId> = Vec::new();
    // The model: per timer (in insertion order) where it is; `now` in ms.
    let mut model: Vec<At> = Vec::new();
    let mut now = 0u64;
    let mut ready_seq = 0u64;
    // Per timer, its place among equal deadlines: when it was last set.
    let mut set_order: Vec<u64> = Vec::new();
    let mut next_order = 0u64;
    let mut stamp = || {
        next_order += 1;
        next_order
    };
    for op in ops {
        match op {
            HeapOp::Insert(ms) => {
                let n = ids.len();
                ids.push(heap.insert(
                    at(now + ms),
                    Payload {
                        n,
                        _alive: alive.clone(),
                    },
                ));
                model.push(At::Live(now + ms));
                set_order.push(stamp());
            }
            HeapOp::InsertFar(secs) => {
                let n = ids.len();
                let d = now + secs * 1000;
                let p = Payload {
                    n,
                    _alive: alive.clone(),
                };
                ids.push(heap.insert(at(d), p));
                model.push(At::Live(d));
                set_order.push(stamp());
            }
            HeapOp::WakeAtNext => {
                let truth = model
                    .iter()
                    .filter_map(|a| match a {
                        At::Live(d) => Some(*d),
                        _ => None,
                    })
                    .min();
                match (heap.next_deadline(), truth) {
                    (None, None) => {}
                    (Some(next), Some(d)) if next < at(d) => {
                        prop_assert!(heap.pop_due(next).is_none(), "due at an early bound");
                        let later = heap.next_deadline();
                        prop_assert!(later.is_some_and(|l| l > next), "no progress");
                    }
                    (Some(next), Some(d)) => {
                        prop_assert_eq!(next, at(d), "next_deadline after the earliest");
                        // Exact: fire what is due then (time moves there).
                        now = now.max(d);
                        let mut due: Vec<(u64, u64, usize)> = model
                            .iter()
                            .enumerate()
                            .filter_map(|(i, a)| match a {
                                At::Live(d) if *d <= now => Some((*d, set_order[i], i)),
                                _ => None,
                            })
                            .collect();
                        due.sort();
                        let mut got = Vec::new();
                        while let Some((id, p)) = heap.pop_due(at(now)) {
                            prop_assert_eq!(id, ids[p.n]);
                            model[p.n] = At::Gone;
                            got.push(p.n);
                        }
                        let want: Vec<usize> = due.iter().map(|&(_, _, i)| i).collect();
                        prop_assert_eq!(got, want, "firing order at {}ms", now);
                    }
                    (next, truth) => prop_assert!(false, "next {next:?}, earliest {truth:?}"),
                }
            }
            HeapOp::InsertBatch(n, step) => {
                for j in 0..n as u64 {
                    let n = ids.len();
                    let d = now + 1 + j * step;
                    let p = Payload {
                        n,
                        _alive: alive.clone(),
                    };
                    ids.push(heap.insert(at(d), p));
                    model.push(At::Live(d));
                    set_order.push(stamp());
                }
            }
            HeapOp::CancelEvery(every) => {
                let live = (0..ids.len()).filter(|&i| matches!(model[i], At::Live(_)));
                for k in live.step_by(every).collect::<Vec<_>>() {
                    let got = heap.cancel(ids[k]);
                    prop_assert!(matches!(got, Removed::Pending(ref p) if p.n == k));
                    model[k] = At::Gone;
                }
            }
            HeapOp::Cancel(k) if !ids.is_empty() => {
                let k = k % ids.len();
                let got = heap.cancel(ids[k]);
                match (model[k], got) {
                    (At::Live(_), Removed::Pending(p)) => prop_assert_eq!(p.n, k),
                    (At::Reserved(s), Removed::Ready(seq)) => prop_assert_eq!(seq, s),
                    (At::Gone, Removed::Gone) => {}
                    (want, _) => prop_assert!(false, "cancel of {k} ({want:?}) disagrees"),
                }
                model[k] = At::Gone;
            }
            HeapOp::Advance(ms) | HeapOp::AdvanceReserved(ms) => {
                now += ms;
                let reserve = matches!(op, HeapOp::AdvanceReserved(_));
                // The model's order: due timers by (deadline, when last set).
                let mut due: Vec<(u64, u64, usize)> = model
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| match a {
                        At::Live(d) if *d <= now => Some((*d, set_order[i], i)),
                        _ => None,
                    })
                    .collect();
                due.sort();
                let mut got = Vec::new();
                loop {
                    let popped = if reserve {
                        heap.pop_due_reserved(at(now), |_| ready_seq)
                    } else {
                        heap.pop_due(at(now))
                    };
                    let Some((id, p)) = popped else { break };
                    prop_assert_eq!(id, ids[p.n]);
                    model[p.n] = if reserve {
                        ready_seq += 1;
                        At::Reserved(ready_seq - 1)
                    } else {
                        At::Gone
                    };
                    got.push(p.n);
                }
                let want: Vec<usize> = due.iter().map(|&(_, _, i)| i).collect();
                prop_assert_eq!(got, want, "firing order at {}ms", now);
            }
            HeapOp::Release(k) => {
                if !ids.is_empty() {
                    let k = k % ids.len();
                    heap.release(ids[k]);
                    if !matches!(model[k], At::Live(_)) {
                        model[k] = At::Gone;
                    }
                }
            }
            HeapOp::Reset(k, ms) if !ids.is_empty() => {
                let k = k % ids.len();
                let got = heap.reset(ids[k], at(now + ms));
                match (model[k], got) {
                    (At::Live(_), Reset::Moved(id)) => {
                        prop_assert!(!heap.contains(ids[k]), "the old id of {} is stale", k);
                        ids[k] = id;
                        model[k] = At::Live(now + ms);
                        set_order[k] = stamp();
                    }
                    (At::Reserved(s), Reset::Ready(seq)) => {
                        prop_assert_eq!(seq, s);
                        model[k] = At::Gone;
                    }
                    (At::Gone, Reset::Gone) => {}
                    (want, got) => prop_assert!(false, "reset of {k} ({want:?}): {got:?}"),
                }
            }
            HeapOp::Cancel(_) | HeapOp::Reset(..) => {}
        }
        // After every step: the same state, and memory for live timers only.
        let live: Vec<(u64, usize)> = model
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                At::Live(d) => Some((*d, i)),
                _ => None,
            })
            .collect();
        let reserved = model
            .iter()
            .filter(|a| matches!(a, At::Reserved(_)))
            .count();
        prop_assert_eq!(heap.len(), live.len(), "live count");
        prop_assert_eq!(heap.reserved(), live.len() + reserved, "slots in use");
        prop_assert_eq!(Rc::strong_count(&alive) - 1, live.len(), "payloads kept");
        // Buffers: kept through a burst of cancels, given back by a trim
        // (the loop's step 1).
        heap.trim();
        prop_assert!(
            heap.capacity() <= 64.max(4 * heap.len() + 3),
            "payload buffer {} for {} timers",
            heap.capacity(),
            heap.len()
        );
        prop_assert!(
            heap.near_capacity() <= 64.max(4 * heap.len() + 3),
            "near heap buffer {} for {} timers",
            heap.near_capacity(),
            heap.len()
        );
        // Never later than the earliest deadline; exact while the earliest
        // slot cannot hold more than `SCAN` (32) timers.
        let earliest = live.iter().map(|&(d, _)| d).min().map(at);
        let next = heap.next_deadline();
        prop_assert_eq!(next.is_some(), earliest.is_some());
        prop_assert!(
            next <= earliest,
            "next_deadline {next:?} after {earliest:?}"
        );
        if live.len() <= 32 {
            prop_assert_eq!(next, earliest, "next_deadline with {} timers", live.len());
        }
        for (k, a) in model.iter().enumerate() {
            prop_assert_eq!(heap.contains(ids[k]), *a != At::Gone, "contains {}", k);
            let want = match a {
                At::Live(d) => Some(at(*d)),
                _ => None,
            };
            prop_assert_eq!(heap.deadline(ids[k]), want, "deadline of {}", k);
        }
        // The diagnostic iterator lists exactly the pending timers.
        let mut listed: Vec<(Instant, usize)> = heap.iter().map(|(d, p)| (d, p.n)).collect();
        listed.sort();
        let mut want: Vec<(Instant, usize)> = live.iter().map(|&(d, i)| (at(d), i)).collect();
        want.sort();
        prop_assert_eq!(listed, want, "iter");
        heap.check_invariants();
    }
    // Draining (what `close` does) hands back every live payload.
    let drained = heap.drain().len();
    prop_assert_eq!(
        drained,
        model.iter().filter(|a| matches!(a, At::Live(_))).count()
    );
    prop_assert_eq!(Rc::strong_count(&alive), 1);
    prop_assert_eq!(heap.reserved(), 0);
    Ok(())
}

#[derive(Debug, Clone)]
enum ClockOp {
    /// A call `ms` from now; when it runs it schedules a child call `child`
    /// ms after the clock's time then, if any.
    Schedule(u64, Option<u64>),
    Cancel(usize),
    Advance(u64),
}

fn clock_op() -> impl Strategy<Value = ClockOp> {
    prop_oneof![
        5 => (0u64..40, proptest::option::of(0u64..10)).prop_map(|(a, b)| ClockOp::Schedule(a, b)),
        2 => any::<usize>().prop_map(ClockOp::Cancel),
        2 => (0u64..20).prop_map(ClockOp::Advance),
    ]
}

/// The reference: a list of (deadline, id) kept sorted, run Twisted's way.
#[derive(Default)]
struct ClockModel {
    now: u64,
    /// (deadline, id, child delay), sorted by (deadline, id).
    pending: Vec<(u64, usize, Option<u64>)>,
    next_id: usize,
    log: Vec<usize>,
}

impl ClockModel {
    fn schedule(&mut self, delay: u64, child: Option<u64>) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push((self.now + delay, id, child));
        self.pending.sort();
        id
    }

    fn advance(&mut self, by: u64) {
        self.now += by;
        while self.pending.first().is_some_and(|p| p.0 <= self.now) {
            let (_, id, child) = self.pending.remove(0);
            self.log.push(id);
            if let Some(c) = child {
                self.schedule(c, None);
            }
        }
    }
}

type Timers = Rc<RefCell<Vec<ManualTimer>>>;

fn schedule_real(
    clock: &ManualClock,
    timers: &Timers,
    log: &Rc<RefCell<Vec<usize>>>,
    delay: u64,
    child: Option<u64>,
) {
    let id = timers.borrow().len();
    let (c, t, l) = (clock.clone(), timers.clone(), log.clone());
    let timer = clock
        .call_later(Duration::from_millis(delay), move || {
            l.borrow_mut().push(id);
            if let Some(ms) = child {
                schedule_real(&c, &t, &l, ms, None);
            }
        })
        .unwrap();
    timers.borrow_mut().push(timer);
}

fn check_clock(ops: Vec<ClockOp>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let timers: Timers = Rc::default();
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut m = ClockModel::default();
    for op in ops {
        match op {
            ClockOp::Schedule(ms, child) => {
                m.schedule(ms, child);
                schedule_real(&clock, &timers, &log, ms, child);
            }
            ClockOp::Cancel(k) if m.next_id > 0 => {
                let k = k % m.next_id;
                let was = m.pending.iter().position(|p| p.1 == k);
                if let Some(i) = was {
                    m.pending.remove(i);
                }
                let t = timers.borrow()[k].clone();
                prop_assert_eq!(t.cancel(), was.is_some(), "cancel {}", k);
            }
            ClockOp::Cancel(_) => {}
            ClockOp::Advance(ms) => {
                m.advance(ms);
                clock.advance(Duration::from_millis(ms));
            }
        }
        prop_assert_eq!(&*log.borrow(), &m.log, "firing order");
        prop_assert_eq!(clock.pending(), m.pending.len(), "live count");
        prop_assert_eq!(m.next_id, timers.borrow().len());
        let start = clock.now() - clock.elapsed();
        for (k, t) in timers.borrow().iter().enumerate() {
            let p = m.pending.iter().find(|p| p.1 == k);
            prop_assert_eq!(t.is_active(), p.is_some(), "is_active {}", k);
            let want = p.map(|p| start + Duration::from_millis(p.0));
            prop_assert_eq!(t.deadline(), want, "deadline {}", k);
        }
    }
    // The pending calls hold the clock (a cycle): cancel them, or they leak.
    let all = timers.borrow().clone();
    for t in all {
        t.cancel();
    }
    prop_assert_eq!(clock.pending(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: util::cases(2000),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn timer_heap_matches_a_sorted_list(ops in proptest::collection::vec(heap_op(), 0..150)) {
        check_heap(ops)?;
    }

    #[test]
    fn manual_clock_fires_like_a_sorted_list(ops in proptest::collection::vec(clock_op(), 0..120)) {
        check_clock(ops)?;
    }
}
