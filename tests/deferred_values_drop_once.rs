//! Every value that flows through a chain is dropped exactly once, whichever
//! way a step takes it: in place (a small value, `add_callback` and `map`),
//! moved (`add_both`, a large value), into a panicking callback, into a
//! callback that returns a failure or a Deferred, or left at the end.

// Each step is a closure that passes its value on, on purpose.
#![allow(clippy::redundant_closure, clippy::map_identity)]

use deferloop::{Deferred, Failure};
use std::cell::Cell;
use std::rc::Rc;

/// A value whose drops are counted; `Small` fits inline in a step's slot,
/// `Large` does not.
struct Small(Rc<Cell<u32>>);
struct Large(Rc<Cell<u32>>, #[allow(dead_code)] [u64; 8]);

impl Drop for Small {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}
impl Drop for Large {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

fn counter() -> Rc<Cell<u32>> {
    Rc::new(Cell::new(0))
}

fn settled<T: 'static>(d: Deferred<T>) -> Result<T, Failure> {
    let Ok(r) = d.result() else {
        panic!("the chain is synchronous")
    };
    r
}

/// Builds a 3-step chain before firing, then after (both runners).
fn both_ways<T: 'static>(
    make: impl Fn() -> T,
    steps: impl Fn(Deferred<T>) -> Deferred<T>,
    end: impl Fn(Result<T, Failure>),
) {
    let (d, r) = Deferred::new();
    let d = steps(d);
    r.callback(make()).unwrap();
    end(settled(d));
    let (d, r) = Deferred::new();
    r.callback(make()).unwrap();
    end(settled(steps(d)));
}

#[test]
fn values_moved_through_steps_are_dropped_once() {
    let small = counter();
    let large = counter();
    let (s, l) = (small.clone(), large.clone());
    both_ways(
        || Small(s.clone()),
        |d| {
            d.add_callback(|v| Ok(v))
                .map(|v| v)
                .add_both(|r: Result<Small, Failure>| r)
        },
        |r| drop(r.unwrap()),
    );
    both_ways(
        || Large(l.clone(), [7; 8]),
        |d| {
            d.add_callback(|v| Ok(v))
                .map(|v| v)
                .add_both(|r: Result<Large, Failure>| r)
        },
        |r| drop(r.unwrap()),
    );
    assert_eq!(small.get(), 2, "one Small per chain, each dropped once");
    assert_eq!(large.get(), 2, "one Large per chain, each dropped once");
}

#[test]
fn a_value_handed_to_a_panicking_callback_is_dropped_once() {
    for before_firing in [true, false] {
        let drops = counter();
        let (d, r) = Deferred::new();
        let step = |d: Deferred<Small>| {
            d.add_callback(|v: Small| -> Result<Small, Failure> {
                let _keep = &v;
                panic!("kaput")
            })
            .map(|v: Small| v)
        };
        let d = if before_firing {
            let d = step(d);
            r.callback(Small(drops.clone())).unwrap();
            d
        } else {
            r.callback(Small(drops.clone())).unwrap();
            step(d)
        };
        let f = d
            .result()
            .ok()
            .unwrap()
            .err()
            .expect("the panic is a failure");
        assert!(f.is_panic());
        assert_eq!(drops.get(), 1, "before_firing: {before_firing}");
    }
}

#[test]
fn a_value_a_callback_turns_into_a_failure_or_a_deferred_is_dropped_once() {
    let drops = counter();
    let (d, r) = Deferred::new();
    let d = d
        .add_callback(|v: Small| -> Result<Small, Failure> {
            drop(v);
            Err(Failure::msg("gone"))
        })
        .add_errback({
            let drops = drops.clone();
            move |_| Ok(Small(drops))
        })
        .add_callback(|v: Small| {
            let (inner, ir) = Deferred::new();
            ir.callback(v).unwrap();
            inner
        });
    r.callback(Small(drops.clone())).unwrap();
    assert_eq!(drops.get(), 1, "the first value, dropped by its callback");
    drop(settled(d).unwrap());
    assert_eq!(drops.get(), 2, "the second, at the end");
}

#[test]
fn a_value_left_in_a_dropped_chain_is_dropped_once() {
    let drops = counter();
    let (d, r) = Deferred::new();
    let d = d.map(|v: Small| v).map(|v| v);
    r.callback(Small(drops.clone())).unwrap();
    drop(d);
    assert_eq!(drops.get(), 0, "the Resolver still holds the chain");
    drop(r);
    assert_eq!(drops.get(), 1);
}
