//! DeferredList, gather_results and race (Twisted rules R36–R43), including the
//! deliberate change: failures delivered to the list's consumer are consumed.

use deferloop::deferred::{
    fail, gather_results, race, succeed, Cancelled, Deferred, DeferredList, FailureGroup,
    FirstError, ListResult,
};
use deferloop::Failure;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

mod util;

fn all<T>(r: ListResult<T>) -> Vec<Result<T, Failure>> {
    match r {
        ListResult::All(v) => v,
        _ => panic!("expected All"),
    }
}

fn unhandled(needle: &str) -> usize {
    util::logs()
        .mine()
        .iter()
        .filter(|r| r.message.contains("Unhandled error in Deferred") && r.message.contains(needle))
        .count()
}

/// R37: results in input order, whatever the firing order; failures included.
#[test]
fn list_fires_with_all_results_in_input_order() {
    util::logs();
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let (c, cr) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b, c]).build();
    cr.callback(3).unwrap();
    ar.errback(Failure::msg("list-a")).unwrap();
    assert!(!l.is_called());
    br.callback(2).unwrap();
    let v = all(l.result().unwrap().unwrap());
    assert_eq!(v[0].as_ref().unwrap_err().to_string(), "list-a");
    assert_eq!(*v[1].as_ref().unwrap(), 2);
    assert_eq!(*v[2].as_ref().unwrap(), 3);
    drop((ar, br, cr));
    assert_eq!(unhandled("list-a"), 0, "delivered failures are consumed");
}

/// R36: already-fired inputs report during construction.
#[test]
fn already_fired_inputs_report_at_construction() {
    let l = DeferredList::new(vec![succeed(1u8), succeed(2)]).build();
    let v: Vec<u8> = all(l.result().unwrap().unwrap())
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(v, [1, 2]);
}

/// R38: an empty list fires All([]) at once, even with fire_on_one_errback.
/// With fire_on_one_callback nothing can ever fire it: Twisted's waits forever,
/// ours fails with `Abandoned` at once.
#[test]
fn empty_list_fires_at_once_and_is_abandoned_with_fire_on_one_callback() {
    let l = DeferredList::<u8>::new(vec![]).build();
    assert!(all(l.result().unwrap().unwrap()).is_empty());
    let l = DeferredList::<u8>::new(vec![])
        .fire_on_one_errback(true)
        .build();
    assert!(all(l.result().unwrap().unwrap()).is_empty());
    let l = DeferredList::<u8>::new(vec![])
        .fire_on_one_callback(true)
        .build();
    let f = l.result().unwrap().unwrap_err();
    assert!(f.check::<deferloop::deferred::Abandoned>());
}

/// R37: fire_on_one_callback fires First with the first success.
#[test]
fn fire_on_one_callback_gives_the_first_success() {
    let (a, _ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b])
        .fire_on_one_callback(true)
        .build();
    br.callback(9).unwrap();
    match l.result().unwrap().unwrap() {
        ListResult::First { index, value } => assert_eq!((index, value), (1, 9)),
        _ => panic!("expected First"),
    }
}

/// R38 (V): with fire_on_one_callback and every input failing, All of failures.
#[test]
fn fire_on_one_callback_with_all_failing_gives_all_failures() {
    let l = DeferredList::new(vec![fail::<u8>(Failure::msg("x")), fail(Failure::msg("y"))])
        .fire_on_one_callback(true)
        .build();
    let v = all(l.result().unwrap().unwrap());
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].as_ref().unwrap_err().to_string(), "y");
}

/// R37/R40: fire_on_one_errback errbacks with FirstError{index, failure}; its
/// Display is `FirstError[#i, failure]` and source() is the failure's error. A
/// later failure is delivered nowhere and so reported on its input.
#[test]
fn fire_on_one_errback_gives_first_error_and_late_failures_are_reported() {
    util::logs();
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let (c, cr) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b, c])
        .fire_on_one_errback(true)
        .build();
    ar.callback(1).unwrap();
    let boom = Failure::msg("first-err-b");
    br.errback(boom.clone()).unwrap();
    let f = l.result().unwrap().unwrap_err();
    let fe = f.downcast_ref::<FirstError>().unwrap();
    assert_eq!(fe.index, 1);
    assert!(Failure::ptr_eq(&fe.failure, &boom));
    assert_eq!(fe.to_string(), "FirstError[#1, first-err-b]");
    assert_eq!(
        std::error::Error::source(fe).unwrap().to_string(),
        "first-err-b"
    );
    assert_eq!((fe.index, Failure::ptr_eq(&fe.failure, &boom)), (1, true));
    cr.errback(Failure::msg("late-c")).unwrap();
    drop((ar, br));
    assert_eq!(unhandled("first-err-b"), 0);
    drop(cr);
    assert_eq!(unhandled("late-c"), 1);
}

/// R39: consume_errors(true) silences failures delivered nowhere.
#[test]
fn consume_errors_silences_late_failures() {
    util::logs();
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b])
        .fire_on_one_errback(true)
        .consume_errors(true)
        .build();
    ar.errback(Failure::msg("ce-first")).unwrap();
    br.errback(Failure::msg("ce-late")).unwrap();
    drop((ar, br, l));
    assert_eq!(unhandled("ce-late"), 0);
}

/// R41: cancelling the list cancels every input; a panicking canceller is logged
/// and the rest are still cancelled; the list then fires with the results.
#[test]
fn cancelling_the_list_cancels_every_input() {
    util::logs();
    let hits = Rc::new(Cell::new(0));
    let h = hits.clone();
    let (a, _ar) = Deferred::<u8>::with_canceller(move |_| h.set(h.get() + 1));
    let (b, _br) = Deferred::<u8>::with_canceller(|_| panic!("list-canceller-panics"));
    let (c, _cr) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b, c]).build();
    l.cancel();
    assert_eq!(hits.get(), 1);
    assert_eq!(
        util::logs()
            .mine()
            .iter()
            .filter(|r| r.message.contains("list-canceller-panics"))
            .count(),
        1
    );
    // b stays unfired, so the list itself is cancelled.
    assert!(l.result().unwrap().unwrap_err().check::<Cancelled>());
}

/// R41, R30: cancelling the list reaches every input that can still be
/// cancelled, whatever state it was in when the list was built: unfired, fired
/// but waiting on a Deferred its callback returned (the inner one is
/// cancelled), or fired but paused. Inputs that had fired and recorded are left
/// alone.
#[test]
fn cancelling_the_list_reaches_pending_waiting_and_paused_inputs() {
    let hits = Rc::new(RefCell::new(Vec::new()));
    let canceller = |name: &'static str| {
        let h = hits.clone();
        move |_: &_| h.borrow_mut().push(name)
    };
    let (unfired, _ur) = Deferred::<u8>::with_canceller(canceller("unfired"));
    let (inner, _ir) = Deferred::<u8>::with_canceller(canceller("inner"));
    let waiting = succeed(0u8).add_callback(move |_| inner);
    assert!(waiting.is_paused());
    let (paused, pr) = Deferred::<u8>::new();
    paused.pause();
    pr.callback(3).unwrap();
    let l = DeferredList::new(vec![succeed(1), unfired, waiting, paused, succeed(2)]).build();
    assert!(!l.is_called());
    l.cancel();
    assert_eq!(*hits.borrow(), ["unfired", "inner"]);
    // The paused input has fired, so cancelling it changes nothing; it has not
    // recorded, so the list is then cancelled itself (R26).
    assert!(l.result().unwrap().unwrap_err().check::<Cancelled>());
}

/// R37: with fire_on_one_callback, failures stored before the first success
/// are delivered nowhere: they are reported when the list fires, with the
/// creation site of their input.
#[test]
fn fire_on_one_callback_reports_stored_failures_with_their_input_site() {
    util::logs();
    let line = line!() + 1;
    let a = fail::<u8>(Failure::msg("stored-before-first"));
    let (b, br) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b])
        .fire_on_one_callback(true)
        .build();
    br.callback(5).unwrap();
    assert!(matches!(
        l.result().unwrap().unwrap(),
        ListResult::First { index: 1, value: 5 }
    ));
    let logged: Vec<_> = util::logs()
        .mine()
        .into_iter()
        .filter(|r| r.message.contains("stored-before-first"))
        .collect();
    assert_eq!(logged.len(), 1);
    assert!(logged[0].message.contains(&format!("{}:{line}:", file!())));
}

/// R41: cancel with every input cancellable fires the list with their Cancelled
/// failures (delivered, hence consumed); cancel after firing does nothing.
#[test]
fn cancel_fires_list_with_cancelled_inputs() {
    let (a, _ar) = Deferred::<u8>::new();
    let (b, _br) = Deferred::<u8>::new();
    let l = DeferredList::new(vec![a, b]).build();
    l.cancel();
    let v = all(l.result().unwrap().unwrap());
    assert!(v
        .iter()
        .all(|r| r.as_ref().unwrap_err().check::<Cancelled>()));
}

/// R42: gather_results: values in order; a failure as FirstError; empty → [].
#[test]
fn gather_results_collects_values_or_first_error() {
    let (a, ar) = Deferred::<u8>::new();
    let g = gather_results(vec![a, succeed(2)]);
    ar.callback(1).unwrap();
    assert_eq!(g.result().unwrap().unwrap(), [1, 2]);

    let g = gather_results(vec![succeed(1u8), fail(Failure::msg("g-fail"))]);
    let f = g.result().unwrap().unwrap_err();
    assert_eq!(f.downcast_ref::<FirstError>().unwrap().index, 1);

    assert!(gather_results::<u8>(vec![])
        .result()
        .unwrap()
        .unwrap()
        .is_empty());
}

/// Inputs that all have their result (bare `succeed`/`fail` results, or fired
/// idle chains) are gathered at once, exactly as the list would: values in
/// order, the first failure as `FirstError`, every later failure reported as
/// unhandled once, with its input's creation site.
#[test]
fn gather_of_fired_inputs_answers_as_the_list_does() {
    util::logs();
    let (fired, fr) = Deferred::<u8>::new();
    fr.callback(3).unwrap();
    let g = gather_results(vec![succeed(1u8), succeed(2).map(|x| x), fired]);
    assert_eq!(g.result().unwrap().unwrap(), [1, 2, 3]);

    let (late, lr) = Deferred::<u8>::new();
    lr.errback(Failure::msg("gather-late-node")).unwrap();
    let late_line = line!() + 4;
    let g = gather_results(vec![
        succeed(1u8),
        fail(Failure::msg("gather-first")),
        fail(Failure::msg("gather-late-bare")),
        late,
    ]);
    let f = g.result().unwrap().unwrap_err();
    let first = f.downcast_ref::<FirstError>().unwrap();
    assert_eq!(first.index, 1);
    assert!(first.failure.to_string().contains("gather-first"));
    let bare = util::logs().containing("gather-late-bare");
    assert_eq!(bare.len(), 1);
    let msg = &bare[0].message;
    assert!(
        msg.contains(&format!("deferred_list.rs:{late_line}")),
        "{msg}"
    );
    assert_eq!(util::logs().containing("gather-late-node").len(), 1);
    assert!(util::logs().containing("gather-first").is_empty());
}

/// R42: cancelling gather cancels every input.
#[test]
fn cancelling_gather_cancels_inputs() {
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let g = gather_results(vec![a, b]);
    g.cancel();
    assert!(ar.is_called() && br.is_called());
    let f = g.result().unwrap().unwrap_err();
    let fe = f.downcast_ref::<FirstError>().unwrap();
    assert_eq!(fe.index, 0);
    assert!(fe.failure.check::<Cancelled>());
}

/// R43: the first success wins; every other input is cancelled exactly once;
/// their Cancelled failures are consumed quietly.
#[test]
fn race_first_success_wins_and_cancels_the_others_once() {
    util::logs();
    let cancels = Rc::new(RefCell::new(Vec::new()));
    let mk = |i: usize| {
        let c = cancels.clone();
        Deferred::<u8>::with_canceller(move |_| c.borrow_mut().push(i))
    };
    let (a, _ar) = mk(0);
    let (b, br) = mk(1);
    let (c, _cr) = mk(2);
    let r = race(vec![a, b, c]);
    br.callback(5).unwrap();
    assert_eq!(r.result().unwrap().unwrap(), (1, 5));
    assert_eq!(*cancels.borrow(), [0, 2]);
    assert_eq!(unhandled("Deferred was cancelled"), 0);
}

/// R43: all inputs failing → FailureGroup in index order.
#[test]
fn race_all_failing_gives_failure_group_in_index_order() {
    let (a, ar) = Deferred::<u8>::new();
    let (b, br) = Deferred::<u8>::new();
    let r = race(vec![a, b]);
    br.errback(Failure::msg("second")).unwrap();
    ar.errback(Failure::msg("first")).unwrap();
    let f = r.result().unwrap().unwrap_err();
    let g = f.downcast_ref::<FailureGroup>().unwrap();
    let msgs: Vec<String> = g.0.iter().map(|f| f.to_string()).collect();
    assert_eq!(msgs, ["first", "second"]);
}

/// R43: cancelling the race cancels all inputs; later results are ignored.
#[test]
fn cancelling_race_cancels_all_and_ignores_later_results() {
    let (a, ar) = Deferred::<u8>::with_canceller(|_| {});
    let (b, br) = Deferred::<u8>::with_canceller(|_| {});
    let r = race(vec![a, b]);
    r.cancel();
    assert!(ar.is_called() && br.is_called());
    assert!(r.result().unwrap().unwrap_err().check::<Cancelled>());
}

/// The combinators take any `IntoIterator` of Deferreds: an iterator, an
/// array, or a `Vec` as before.
#[test]
fn combinators_take_any_iterator_of_deferreds() {
    let gathered = gather_results((1..=3u8).map(succeed));
    assert_eq!(gathered.result().unwrap().unwrap(), vec![1, 2, 3]);

    let (slow, _slow_r) = Deferred::<&str>::new();
    let first = race([slow, succeed("fast")]);
    assert_eq!(first.result().unwrap().unwrap(), (1, "fast"));

    let l = DeferredList::new(std::iter::once(succeed(7u8))).build();
    let results = all(l.result().unwrap().unwrap());
    assert_eq!(results.len(), 1);
    assert_eq!(*results[0].as_ref().unwrap(), 7);

    let v = gather_results(vec![succeed(1u8), succeed(2)]);
    assert_eq!(v.result().unwrap().unwrap(), vec![1, 2]);
}
