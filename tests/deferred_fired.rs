//! Callbacks added to a Deferred that has already fired and is idle run at once,
//! before `add_*` returns (R4), without being queued: the same rules hold as for
//! callbacks run by a firing (R8–R14), and the Deferred is not borrowed while
//! they run.

use deferloop::deferred::{fail, succeed, Deferred};
use deferloop::Failure;
use std::cell::RefCell;
use std::rc::Rc;

type Trace = Rc<RefCell<Vec<String>>>;

fn trace() -> Trace {
    Rc::new(RefCell::new(Vec::new()))
}

fn push(t: &Trace, s: impl Into<String>) {
    t.borrow_mut().push(s.into());
}

/// While a callback added after firing runs, the Deferred's resolver works: it
/// reports the Deferred as fired, and a second fire is `AlreadyCalled` naming the
/// first fire.
#[test]
fn resolver_is_usable_inside_a_callback_added_after_firing() {
    let (d, r) = Deferred::<u32>::new();
    let first = line!() + 1;
    r.callback(1).unwrap();
    let r2 = r.clone();
    let seen = Rc::new(RefCell::new(None));
    let s2 = seen.clone();
    let d = d.add_callback(move |x| {
        assert!(r2.is_called());
        let again = line!() + 1;
        let e = r2.callback(7).unwrap_err();
        *s2.borrow_mut() = Some((e.first_fired_at.line(), e.fired_again_at.line(), again));
        Ok(x + 1)
    });
    let (first_seen, again_seen, again) = seen.borrow_mut().take().expect("ran at once");
    assert_eq!((first_seen, again_seen), (first, again));
    assert_eq!(d.result().unwrap().unwrap(), 2);
}

/// Each pair added to a fired Deferred runs at once on the previous result, on
/// the value or the failure path, and the last result is kept for the next.
#[test]
fn pairs_added_one_by_one_after_firing_run_in_order_on_both_paths() {
    let t = trace();
    let (t1, t2, t3, t4) = (t.clone(), t.clone(), t.clone(), t.clone());
    let d = succeed(1u32).add_callback(move |x| {
        push(&t1, format!("cb{x}"));
        Err::<u32, _>(Failure::msg("no"))
    });
    assert_eq!(*t.borrow(), ["cb1"]);
    let d = d.add_callback(move |x| {
        push(&t2, "skipped");
        Ok(x)
    });
    let d = d.add_errback(move |f| {
        push(&t3, format!("eb:{f}"));
        Ok(5)
    });
    let d = d.map(move |x| {
        push(&t4, format!("map{x}"));
        x * 2
    });
    assert_eq!(*t.borrow(), ["cb1", "eb:no", "map5"]);
    assert_eq!(d.result().unwrap().unwrap(), 10);
}

/// A callback added after firing may itself add callbacks to other fired
/// Deferreds: each of those runs at once too, inside it.
#[test]
fn nested_adds_to_other_fired_deferreds_run_inside() {
    let t = trace();
    let (t1, t2) = (t.clone(), t.clone());
    let d = succeed(1u32).add_callback(move |x| {
        push(&t1, "outer-start");
        let t3 = t2.clone();
        let inner = fail::<u32>(Failure::msg("inner")).add_errback(move |_| {
            push(&t3, "inner");
            Ok(10)
        });
        push(&t2, "outer-end");
        Ok(x + inner.result().unwrap().unwrap())
    });
    assert_eq!(*t.borrow(), ["outer-start", "inner", "outer-end"]);
    assert_eq!(d.result().unwrap().unwrap(), 11);
}

/// A callback added after firing that returns an unfired Deferred makes the
/// chain wait (R14); pairs added meanwhile are queued and run once it fires.
#[test]
fn returning_a_pending_deferred_after_firing_waits_and_queues() {
    let t = trace();
    let (inner, ir) = Deferred::<u32>::new();
    let d = succeed(1u32).add_callback(move |_| inner);
    assert!(d.is_paused());
    let t1 = t.clone();
    let d = d.map(move |x| {
        push(&t1, format!("after{x}"));
        x + 1
    });
    assert!(t.borrow().is_empty());
    ir.callback(4).unwrap();
    assert_eq!(*t.borrow(), ["after4"]);
    assert_eq!(d.result().unwrap().unwrap(), 5);
}
