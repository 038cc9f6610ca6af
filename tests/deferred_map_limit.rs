//! `map_limit`, `map_limit_settled`, `for_each_limit`: at most `limit` in
//! flight, results in input order, the first failure cancels what is in
//! flight and the result waits for it; checked against a model too.

use deferloop::deferred::{for_each_limit, map_limit, map_limit_settled, FirstError};
use deferloop::{Cancelled, Deferred, Error, Failure, Resolver};
use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Items whose Deferreds the test fires by hand; counts what is in flight.
#[derive(Default)]
struct Pending {
    resolvers: RefCell<Vec<(usize, Resolver<usize>)>>,
    in_flight: Cell<usize>,
    most: Cell<usize>,
    started: Cell<usize>,
    cancelled: Cell<usize>,
}

fn tracked(p: &Rc<Pending>) -> impl FnMut(usize) -> Deferred<usize> + 'static {
    let p = p.clone();
    move |i| {
        let p2 = p.clone();
        let (d, r) = Deferred::with_canceller(move |_| p2.cancelled.set(p2.cancelled.get() + 1));
        p.started.set(p.started.get() + 1);
        p.in_flight.set(p.in_flight.get() + 1);
        p.most.set(p.most.get().max(p.in_flight.get()));
        p.resolvers.borrow_mut().push((i, r));
        let p3 = p.clone();
        d.add_both(move |r| {
            p3.in_flight.set(p3.in_flight.get() - 1);
            r
        })
    }
}

fn fire(p: &Pending, pick: usize, ok: bool) {
    let (i, r) = {
        let mut rs = p.resolvers.borrow_mut();
        let k = pick % rs.len();
        rs.remove(k)
    };
    if ok {
        r.callback_if_pending(i * 10);
    } else {
        r.errback_if_pending(Failure::msg(format!("item {i} failed")));
    }
}

#[test]
fn results_come_in_input_order_with_at_most_limit_in_flight() {
    let p = Rc::new(Pending::default());
    let d = map_limit(0..6usize, 2, tracked(&p));
    assert_eq!(p.in_flight.get(), 2);
    while !p.resolvers.borrow().is_empty() {
        fire(&p, 1, true); // always the newest of the two: out of order
    }
    assert_eq!(p.most.get(), 2);
    assert_eq!(d.result().unwrap().unwrap(), [0, 10, 20, 30, 40, 50]);
}

#[test]
fn the_first_failure_cancels_what_is_in_flight_and_starts_nothing_more() {
    let p = Rc::new(Pending::default());
    let d = map_limit(0..10usize, 3, tracked(&p));
    fire(&p, 1, false); // item 1 fails
    assert_eq!(p.cancelled.get(), 2, "items 0 and 2 were cancelled");
    assert_eq!(p.started.get(), 3, "nothing started after the failure");
    let f = d.result().unwrap().unwrap_err();
    let first = f.downcast_ref::<FirstError>().unwrap();
    assert_eq!(first.index, 1);
    assert_eq!(first.failure.to_string(), "item 1 failed");
}

#[test]
fn items_that_finish_at_once_run_in_a_loop() {
    let d = map_limit(0..1_000_000u64, 4, |i| Ok(i & 1));
    let v = d.result().unwrap().unwrap();
    assert_eq!(v.len(), 1_000_000);
    assert_eq!(v.iter().sum::<u64>(), 500_000);
}

#[test]
fn settled_runs_every_item_and_keeps_each_outcome_in_order() {
    let d = map_limit_settled(0..5u8, 2, |i| {
        if i % 2 == 1 {
            Err(Failure::msg(format!("odd {i}")))
        } else {
            Ok(i)
        }
    });
    let out = d.result().unwrap().unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(*out[2].as_ref().unwrap(), 2);
    assert_eq!(out[3].as_ref().unwrap_err().to_string(), "odd 3");
}

#[test]
fn cancelling_the_map_cancels_what_is_in_flight() {
    let p = Rc::new(Pending::default());
    let d = map_limit(0..10usize, 3, tracked(&p));
    d.cancel();
    assert_eq!(p.cancelled.get(), 3);
    assert_eq!(p.started.get(), 3);
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
}

#[test]
fn a_zero_limit_is_an_error_and_takes_no_item() {
    let taken = Rc::new(Cell::new(0));
    let t = taken.clone();
    let items = std::iter::from_fn(move || {
        t.set(t.get() + 1);
        Some(1u8)
    });
    let d = map_limit(items, 0, Ok::<u8, Failure>);
    let f = d.result().unwrap().unwrap_err();
    assert!(matches!(
        f.downcast_ref::<Error>(),
        Some(Error::InvalidInput(_))
    ));
    assert_eq!(taken.get(), 0);
}

#[test]
fn a_panicking_function_is_that_items_failure() {
    let d = map_limit(
        0..3u8,
        2,
        |i| if i == 1 { panic!("item broke") } else { Ok(i) },
    );
    let f = d.result().unwrap().unwrap_err();
    assert!(f.downcast_ref::<FirstError>().unwrap().failure.is_panic());
}

#[test]
fn for_each_limit_fires_once_all_are_done() {
    let p = Rc::new(Pending::default());
    let mut f = tracked(&p);
    let d = for_each_limit(0..4usize, 2, move |i| f(i).map(drop));
    for _ in 0..4 {
        fire(&p, 0, true);
    }
    d.result().unwrap().unwrap();
}

#[test]
fn an_empty_input_gives_an_empty_result() {
    let d = map_limit(Vec::<u8>::new(), 3, Ok::<u8, Failure>);
    assert!(d.result().unwrap().unwrap().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Against a model: whatever the order items fire in, at most `limit`
    /// are in flight; with no failure the values come in input order; with
    /// failures the first to fail is reported, nothing starts after it and
    /// the result waits for every item in flight to end.
    #[test]
    fn map_limit_matches_its_model(
        n in 0usize..20,
        limit in 1usize..6,
        picks in proptest::collection::vec((0usize..8, prop::bool::weighted(0.85)), 0..40),
    ) {
        let p = Rc::new(Pending::default());
        let d = map_limit(0..n, limit, tracked(&p));
        let mut first_failed = None;
        let mut started_at_failure = None;
        for (pick, ok) in picks {
            if p.resolvers.borrow().is_empty() {
                break;
            }
            let i = { let rs = p.resolvers.borrow(); rs[pick % rs.len()].0 };
            if !ok && first_failed.is_none() {
                first_failed = Some(i);
            }
            fire(&p, pick, ok);
            if first_failed.is_some() && started_at_failure.is_none() {
                started_at_failure = Some(p.started.get());
            }
            prop_assert!(p.in_flight.get() <= limit);
            if first_failed.is_some() {
                prop_assert_eq!(p.in_flight.get(), 0, "a failure cancels what is in flight");
            }
        }
        while !p.resolvers.borrow().is_empty() {
            fire(&p, 0, true);
        }
        prop_assert!(p.most.get() <= limit);
        match (d.result().unwrap(), first_failed) {
            (Ok(v), None) => prop_assert_eq!(v, (0..n).map(|i| i * 10).collect::<Vec<_>>()),
            (Err(f), Some(i)) => {
                let e = f.downcast_ref::<FirstError>().unwrap();
                prop_assert_eq!(e.index, i);
                prop_assert_eq!(Some(p.started.get()), started_at_failure, "nothing starts after a failure");
            }
            (r, first) => prop_assert!(false, "result {:?} with first failure {:?}", r.map(|_| ()), first),
        }
    }
}
