//! Chaining: a callback returning a Deferred, implicit waiting, stealing ready
//! results, pause interplay, returning its own Deferred, and `chain_deferred`
//! (Twisted rules R13–R22).

use deferloop::deferred::{
    fail, set_unhandled_failure_hook, succeed, AlreadyCalled, ChainedToSelf, Deferred,
};
use deferloop::Failure;
use std::cell::RefCell;
use std::rc::Rc;

mod util;

type Trace = Rc<RefCell<Vec<String>>>;

fn trace() -> Trace {
    Rc::new(RefCell::new(Vec::new()))
}

fn push(t: &Trace, s: impl Into<String>) {
    t.borrow_mut().push(s.into());
}

/// R13: a returned Deferred that already has a result is taken over at once.
#[test]
fn ready_inner_result_is_taken_synchronously() {
    let d = succeed(1u8).add_callback(|x| succeed(format!("inner{x}")));
    assert!(!d.is_paused());
    assert_eq!(d.result().unwrap().unwrap(), "inner1");
    let d = succeed(1u8).add_callback(|_| fail::<u8>(Failure::msg("inner failed")));
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "inner failed");
}

/// R14: the outer waits for an unfired inner; the inner's own callbacks run first,
/// then the outer continues with the inner's final result.
#[test]
fn outer_waits_for_inner_and_inner_callbacks_run_first() {
    let t = trace();
    let (inner, ir) = Deferred::<u32>::new();
    let t1 = t.clone();
    let inner = inner.map(move |x| {
        push(&t1, format!("inner-cb{x}"));
        x + 1
    });
    let slot = Rc::new(RefCell::new(Some(inner)));
    let (t2, t3) = (t.clone(), t.clone());
    let outer = succeed(0u32)
        .add_callback(move |_| {
            push(&t2, "outer-cb1");
            slot.borrow_mut().take().unwrap()
        })
        .map(move |x| {
            push(&t3, format!("outer-cb2:{x}"));
            x * 10
        });
    assert!(outer.is_paused());
    assert_eq!(*t.borrow(), ["outer-cb1"]);
    ir.callback(4).unwrap();
    assert_eq!(*t.borrow(), ["outer-cb1", "inner-cb4", "outer-cb2:5"]);
    assert!(!outer.is_paused());
    assert_eq!(outer.result().unwrap().unwrap(), 50);
}

/// R14 on the error path: the inner's failure arrives at the outer's errbacks.
#[test]
fn asynchronous_error_chain_delivers_the_inner_failure() {
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let outer = succeed(())
        .add_callback(move |()| slot.borrow_mut().take().unwrap())
        .add_errback(|f| {
            assert_eq!(f.to_string(), "late");
            Ok(42)
        });
    ir.errback(Failure::msg("late")).unwrap();
    assert_eq!(outer.result().unwrap().unwrap(), 42);
}

/// R15: chaining is transitive (outer waits on middle waits on inner).
#[test]
fn double_asynchronous_chaining_is_transitive() {
    let (inner, ir) = Deferred::<u8>::new();
    let islot = Rc::new(RefCell::new(Some(inner)));
    let (middle, mr) = Deferred::<u8>::new();
    let middle = middle.add_callback(move |_| islot.borrow_mut().take().unwrap());
    let mslot = Rc::new(RefCell::new(Some(middle)));
    let outer = succeed(0u8)
        .add_callback(move |_| mslot.borrow_mut().take().unwrap())
        .map(|x| x + 1);
    mr.callback(0).unwrap();
    assert!(outer.is_paused());
    ir.callback(7).unwrap();
    assert_eq!(outer.result().unwrap().unwrap(), 8);
}

/// R17: an inner that has a result but is paused waits the outer until the inner
/// continues: here the inner's own callback waits on a gate, which keeps it paused.
#[test]
fn paused_inner_with_result_makes_outer_wait() {
    let (gate, gr) = Deferred::<()>::new();
    let inner = succeed(3u8).add_callback(move |x| gate.map(move |()| x));
    assert!(inner.is_paused());
    let slot = Rc::new(RefCell::new(Some(inner)));
    let outer = succeed(()).add_callback(move |()| slot.borrow_mut().take().unwrap());
    assert!(outer.is_paused());
    gr.callback(()).unwrap();
    assert_eq!(outer.result().unwrap().unwrap(), 3);
}

/// R17: a user-paused inner with a result is not stolen: the outer waits.
#[test]
fn returned_user_paused_inner_keeps_outer_waiting() {
    let (outer, or) = Deferred::<u8>::new();
    let outer = outer.add_callback(|_| {
        let d = succeed(9u8);
        d.pause();
        d
    });
    or.callback(0).unwrap();
    assert!(outer.is_paused());
    assert!(outer.result().is_err());
}

/// R18: a waiter paused by the user still receives the inner's result, but
/// resumes only when unpaused.
#[test]
fn user_paused_waiter_resumes_only_on_unpause() {
    let t = trace();
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let t1 = t.clone();
    let outer = succeed(())
        .add_callback(move |()| slot.borrow_mut().take().unwrap())
        .map(move |x| {
            push(&t1, format!("got{x}"));
            x
        });
    outer.pause();
    ir.callback(5).unwrap();
    assert!(t.borrow().is_empty());
    outer.unpause().unwrap();
    assert_eq!(*t.borrow(), ["got5"]);
}

/// R19: callbacks added to the outer while it waits run in order afterwards.
#[test]
fn callbacks_added_while_waiting_run_in_order() {
    let t = trace();
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let outer = succeed(()).add_callback(move |()| slot.borrow_mut().take().unwrap());
    let (t1, t2) = (t.clone(), t.clone());
    let outer = outer
        .map(move |x| {
            push(&t1, format!("a{x}"));
            x + 1
        })
        .map(move |x| {
            push(&t2, format!("b{x}"));
            x
        });
    assert!(t.borrow().is_empty());
    ir.callback(1).unwrap();
    assert_eq!(*t.borrow(), ["a1", "b2"]);
    drop(outer);
}

/// R20 (port): a callback returning its own Deferred fails the chain with
/// `ChainedToSelf` instead of hanging. The handle went into the callback, so the
/// failure is seen as an unhandled error of that Deferred.
#[test]
fn callback_returning_its_own_deferred_fails_with_chained_to_self() {
    let logs = util::logs();
    let slot: Rc<RefCell<Option<Deferred<u8>>>> = Rc::new(RefCell::new(None));
    let line = line!() + 1;
    let (d, r) = Deferred::<u8>::new();
    let s = slot.clone();
    let d = d.add_callback(move |_| s.borrow_mut().take().unwrap());
    *slot.borrow_mut() = Some(d);
    r.callback(1).unwrap();
    assert!(slot.borrow().is_none());
    drop(r);
    let needle = format!("{}:{line}", file!());
    let mine: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| r.message.contains(&needle))
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(mine[0].message.contains(&ChainedToSelf.to_string()));
}

/// R20: a callback may return its own Deferred's *inner* continuation safely:
/// returning a different, already-fired Deferred works normally.
#[test]
fn callback_returning_another_fired_deferred_is_fine() {
    let d = succeed(1u8)
        .add_callback(|x| succeed(x + 1))
        .add_callback(|x| succeed(x + 1));
    assert_eq!(d.result().unwrap().unwrap(), 3);
}

/// R16: a failure moved to the outer by chaining is reported once, by the outer
/// only, and not at all when the outer handles it.
#[test]
fn moved_failure_is_not_reported_by_the_inner() {
    let logs = util::logs();
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let outer = succeed(()).add_callback(move |()| slot.borrow_mut().take().unwrap());
    ir.errback(Failure::msg("moved-failure-r16")).unwrap();
    let outer = outer.add_errback(|_| Ok(0));
    drop(outer);
    drop(ir);
    assert!(logs
        .mine()
        .iter()
        .all(|r| !r.message.contains("moved-failure-r16")));
}

/// R22: chain_deferred forwards value and failure; the source keeps nothing.
#[test]
fn chain_deferred_forwards_results() {
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    a.map(|x| x + 1).chain_deferred(&br);
    let b = b.map(|x| x * 2);
    assert!(!b.is_called());
    ar.callback(1).unwrap();
    assert_eq!(b.result().unwrap().unwrap(), 4);

    let logs = util::logs();
    let (b, br) = Deferred::<u8>::new();
    fail::<u8>(Failure::msg("forwarded-r22")).chain_deferred(&br);
    assert_eq!(
        b.result().unwrap().unwrap_err().to_string(),
        "forwarded-r22"
    );
    drop(br);
    assert!(logs
        .mine()
        .iter()
        .all(|r| !r.message.contains("forwarded-r22")));
}

/// R22: forwarding into an already-fired target leaves the source holding an
/// `AlreadyCalled` failure, which is reported as unhandled with the source's
/// creation site; the target is unaffected.
#[test]
fn chain_deferred_into_fired_target_reports_already_called() {
    let logs = util::logs();
    let (b, br) = Deferred::<u8>::new();
    br.callback(1).unwrap();
    let line = line!() + 1;
    let (a, ar) = Deferred::<u8>::new();
    a.chain_deferred(&br);
    ar.callback(2).unwrap();
    drop(ar);
    assert_eq!(b.result().unwrap().unwrap(), 1);
    let needle = format!("{}:{line}", file!());
    let mine: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| {
            r.message.contains("Unhandled error in Deferred") && r.message.contains(&needle)
        })
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(mine[0].message.contains("already fired"));
    let _ = AlreadyCalled::clone;
}

/// Firing the target of chain_deferred directly does not affect the source, and
/// the source's later forward then is refused.
#[test]
fn firing_the_target_directly_does_not_touch_the_source() {
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    a.add_errback(|_| Ok(0)).chain_deferred(&br);
    br.callback(5).unwrap();
    assert_eq!(b.result().unwrap().unwrap(), 5);
    assert!(!ar.is_called());
    // The source fires later: its forward is refused, and it is left with
    // an `AlreadyCalled` failure, reported when it is dropped.
    let refused = Rc::new(RefCell::new(Vec::new()));
    let r = refused.clone();
    let previous = set_unhandled_failure_hook(Some(Box::new(move |u| {
        r.borrow_mut().push(u.failure.check::<AlreadyCalled>());
    })));
    ar.callback(1).unwrap();
    drop(ar);
    set_unhandled_failure_hook(previous);
    assert_eq!(*refused.borrow(), [true]);
}

/// Chaining through several levels where the inner has extra callbacks queued
/// after the continuation (test_nestedAsynchronousChainedDeferredsWithExtraCallbacks).
#[test]
fn nested_asynchronous_chain_with_extra_callbacks() {
    let t = trace();
    let (inner, ir) = Deferred::<String>::new();
    let islot = Rc::new(RefCell::new(Some(inner)));
    let t1 = t.clone();
    let middle = succeed(())
        .add_callback(move |()| islot.borrow_mut().take().unwrap())
        .map(move |s| {
            push(&t1, format!("middle:{s}"));
            format!("{s}+m")
        });
    let mslot = Rc::new(RefCell::new(Some(middle)));
    let t2 = t.clone();
    let outer = succeed(())
        .add_callback(move |()| mslot.borrow_mut().take().unwrap())
        .map(move |s| {
            push(&t2, format!("outer:{s}"));
            s
        });
    ir.callback("i".into()).unwrap();
    assert_eq!(*t.borrow(), ["middle:i", "outer:i+m"]);
    assert_eq!(outer.result().unwrap().unwrap(), "i+m");
}
