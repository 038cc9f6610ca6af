//! The basic chain: pairs in FIFO order, value vs failure path, recovery, panics,
//! adding after firing, re-entrant adds, firing twice, pause/unpause, helpers
//! (Twisted rules R1–R12, R25, R33–R35).

use deferloop::deferred::{fail, maybe_deferred, succeed, AlreadyCalled, Deferred, NotPaused};
use deferloop::{Failure, Message, Panicked};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::rc::Rc;

type Trace = Rc<RefCell<Vec<String>>>;

fn trace() -> Trace {
    Rc::new(RefCell::new(Vec::new()))
}

fn push(t: &Trace, s: impl Into<String>) {
    t.borrow_mut().push(s.into());
}

#[derive(Debug)]
struct Boom(u32);
impl fmt::Display for Boom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "boom {}", self.0)
    }
}
impl std::error::Error for Boom {}

/// Callbacks run in the order they were added, each on the previous result.
#[test]
fn callbacks_run_in_fifo_order_on_the_previous_result() {
    let t = trace();
    let (d, r) = Deferred::<u32>::new();
    let (t1, t2, t3) = (t.clone(), t.clone(), t.clone());
    let d = d
        .add_callback(move |x| {
            push(&t1, format!("a{x}"));
            Ok(x + 1)
        })
        .add_callback(move |x| {
            push(&t2, format!("b{x}"));
            Ok(x * 10)
        })
        .map(move |x| {
            push(&t3, format!("c{x}"));
            format!("v{x}")
        });
    assert!(t.borrow().is_empty());
    r.callback(1).unwrap();
    assert_eq!(*t.borrow(), ["a1", "b2", "c20"]);
    assert_eq!(d.result().unwrap().unwrap(), "v20");
}

/// `Err` switches to the errback path (callbacks skipped), `Ok` from an errback
/// switches back.
#[test]
fn err_switches_to_errbacks_and_ok_recovers() {
    let t = trace();
    let (d, r) = Deferred::<u32>::new();
    let (t1, t2, t3, t4) = (t.clone(), t.clone(), t.clone(), t.clone());
    let d = d
        .add_callback(move |x| {
            push(&t1, "cb1");
            Err::<u32, _>(Failure::new(Boom(x)))
        })
        .add_callback(move |x| {
            push(&t2, "cb2-skipped");
            Ok(x)
        })
        .add_errback(move |f| {
            push(&t3, format!("eb:{f}"));
            Ok(7)
        })
        .add_callbacks(
            move |x| {
                push(&t4, format!("cb3:{x}"));
                Ok(x + 1)
            },
            |_f| -> Result<u32, Failure> { panic!("errback half must not run") },
        );
    r.callback(3).unwrap();
    assert_eq!(*t.borrow(), ["cb1", "eb:boom 3", "cb3:7"]);
    assert_eq!(d.result().unwrap().unwrap(), 8);
}

/// Errback-only pairs pass values through; callback-only pairs pass failures
/// through, the identical failure.
#[test]
fn one_sided_pairs_pass_the_other_kind_through() {
    let d = succeed(5u8).add_errback(|_| -> Result<u8, Failure> { panic!("not for values") });
    assert_eq!(d.result().unwrap().unwrap(), 5);

    let f = Failure::new(Boom(1));
    let d = fail::<u8>(f.clone())
        .add_callback(|_| -> Result<u8, Failure> { panic!("not for failures") });
    let got = d.result().unwrap().unwrap_err();
    assert!(Failure::ptr_eq(&got, &f));
}

/// add_both sees both kinds.
#[test]
fn add_both_receives_values_and_failures() {
    let d = succeed(2u8).add_both(|r| Ok(format!("{r:?}")));
    assert_eq!(d.result().unwrap().unwrap(), "Ok(2)");
    let d = fail::<u8>(Boom(4)).add_both(|r| Ok(r.unwrap_err().to_string()));
    assert_eq!(d.result().unwrap().unwrap(), "boom 4");
}

/// A panic in a callback becomes a `Panicked` failure whose origin is the line
/// where that callback was added.
#[test]
fn panic_in_callback_becomes_failure_located_where_it_was_added() {
    let d = succeed(1u8);
    let line = line!() + 1;
    let d = d.add_callback(|_| -> Result<u8, Failure> { panic!("kaput") });
    let f = d.result().unwrap().unwrap_err();
    assert!(f.is_panic());
    assert_eq!(f.downcast_ref::<Panicked>().unwrap().message, "kaput");
    assert_eq!(f.origin().line(), line);
    assert_eq!(f.origin().file(), file!());
}

/// Errors convert with `?`: the failure's origin is the `?`.
#[test]
fn question_mark_in_a_callback_fails_the_chain() {
    let d = succeed("x").add_callback(|s| {
        let n: u32 = s.parse()?;
        Ok(n)
    });
    let f = d.result().unwrap().unwrap_err();
    assert!(f.check::<std::num::ParseIntError>());
}

/// R4: a pair added after firing runs before add_* returns.
#[test]
fn adding_after_firing_runs_at_once() {
    let t = trace();
    let (d, r) = Deferred::<u8>::new();
    r.callback(1).unwrap();
    let t1 = t.clone();
    let d = d.map(move |x| {
        push(&t1, "ran");
        x
    });
    assert_eq!(*t.borrow(), ["ran"]);
    let d = fail::<u8>(Boom(0))
        .add_errback(|_| Ok(9))
        .map(|x| x + d.result().unwrap().unwrap());
    assert_eq!(d.result().unwrap().unwrap(), 10);
}

/// R11: a callback that adds to its own chain only appends: the new callback runs
/// after the current one returns, behind those already queued.
#[test]
fn adding_from_inside_a_callback_appends_behind_the_queue() {
    let t = trace();
    let slot: Rc<RefCell<Option<Deferred<u32>>>> = Rc::new(RefCell::new(None));
    let (d, r) = Deferred::<u32>::new();
    let (t1, t2, s1) = (t.clone(), t.clone(), slot.clone());
    let d = d
        .add_callback(move |x| {
            push(&t1, "1");
            let d = s1.borrow_mut().take().expect("slot filled");
            let t3 = t1.clone();
            let d = d.map(move |x| {
                push(&t3, "3");
                x + 100
            });
            push(&t1, "1-end");
            *s1.borrow_mut() = Some(d);
            Ok(x + 1)
        })
        .map(move |x| {
            push(&t2, "2");
            x * 2
        });
    *slot.borrow_mut() = Some(d);
    r.callback(1).unwrap();
    assert_eq!(*t.borrow(), ["1", "1-end", "2", "3"]);
    let d = slot.borrow_mut().take().unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 104);
}

fn assert_already(e: AlreadyCalled, created_line: u32, first_line: u32, again_line: u32) {
    assert_eq!(e.created_at.line(), created_line);
    assert_eq!(e.first_fired_at.line(), first_line);
    assert_eq!(e.fired_again_at.line(), again_line);
    assert!(e.to_string().contains("already fired"));
}

/// R6: firing twice is `Err(AlreadyCalled)` for CC, CE, EC and EE, and the error
/// carries the creation site and both firing sites. The first result stands.
#[test]
fn firing_twice_is_already_called_in_all_four_combinations() {
    for (first_ok, second_ok) in [(true, true), (true, false), (false, true), (false, false)] {
        let created = line!() + 1;
        let (d, r) = Deferred::<u8>::new();
        let first = if first_ok {
            r.callback(1).unwrap();
            line!() - 1
        } else {
            r.errback(Boom(1)).unwrap();
            line!() - 1
        };
        let (e, again) = if second_ok {
            (r.callback(2).unwrap_err(), line!())
        } else {
            (r.errback(Boom(2)).unwrap_err(), line!())
        };
        assert_already(e, created, first, again);
        match d.result().unwrap() {
            Ok(v) => assert!(first_ok && v == 1),
            Err(f) => assert!(!first_ok && f.to_string() == "boom 1"),
        }
    }
}

/// R12: firing a Deferred from inside its own callback is `AlreadyCalled`.
#[test]
fn firing_from_inside_its_own_callback_is_already_called() {
    let (d, r) = Deferred::<u8>::new();
    let r2 = r.clone();
    let d = d.add_callback(move |x| {
        let e = r2.callback(5).unwrap_err();
        assert!(e.to_string().contains("already fired"));
        Ok(x)
    });
    r.callback(1).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 1);
}

/// R25: while paused, firing and adding only store; unpausing to zero runs them.
#[test]
fn pause_stores_and_unpause_to_zero_runs() {
    let t = trace();
    let (d, r) = Deferred::<u8>::new();
    d.pause();
    d.pause();
    assert!(d.is_paused());
    let t1 = t.clone();
    let d = d.map(move |x| {
        push(&t1, format!("{x}"));
        x
    });
    r.callback(3).unwrap();
    assert!(d.is_called());
    assert!(t.borrow().is_empty());
    d.unpause().unwrap();
    assert!(t.borrow().is_empty());
    d.unpause().unwrap();
    assert_eq!(*t.borrow(), ["3"]);
    assert!(!d.is_paused());
}

/// Pausing before firing, a failure waits too (testPausedFailure).
#[test]
fn paused_failure_waits_for_unpause() {
    let (d, r) = Deferred::<u8>::new();
    d.pause();
    let seen = trace();
    let s = seen.clone();
    let d = d.add_errback(move |f| {
        push(&s, f.to_string());
        Ok(0)
    });
    r.errback(Boom(9)).unwrap();
    assert!(seen.borrow().is_empty());
    d.unpause().unwrap();
    assert_eq!(*seen.borrow(), ["boom 9"]);
}

/// An unmatched unpause is `Err(NotPaused)` and the count stays at zero.
#[test]
fn unmatched_unpause_is_not_paused_and_count_stays_zero() {
    let (d, r) = Deferred::<u8>::new();
    assert_eq!(d.unpause(), Err(NotPaused));
    assert!(!d.is_paused());
    let d = d.map(|x| x + 1);
    r.callback(1).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 2); // not stuck paused at -1
}

/// `result()` hands the Deferred back before firing and while paused, and
/// the handed-back chain is intact: it still gives its result later.
#[test]
fn result_hands_the_deferred_back_unless_fired_and_idle() {
    let (d, r) = Deferred::<u8>::new();
    let d = d.result().unwrap_err();
    r.callback(2).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 2);
    let d = succeed(1u8);
    d.pause();
    let d = d.result().unwrap_err();
    d.unpause().unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 1);
}

/// R34: succeed/fail give fired Deferreds; fail keeps an existing Failure as is.
#[test]
fn succeed_and_fail_are_already_fired() {
    let d = succeed(3u8);
    assert!(d.is_called());
    assert_eq!(d.result().unwrap().unwrap(), 3);
    let f = Failure::msg("nope");
    let d = fail::<u8>(f.clone());
    assert!(d.is_called());
    assert!(Failure::ptr_eq(&d.result().unwrap().unwrap_err(), &f));
}

/// R35: maybe_deferred on Ok, Err, a Deferred (the same one), and a panic.
#[test]
fn maybe_deferred_covers_values_failures_deferreds_and_panics() {
    assert_eq!(maybe_deferred(|| Ok(1u8)).result().unwrap().unwrap(), 1);
    let f = Failure::msg("x");
    let f2 = f.clone();
    let got = maybe_deferred(move || Err::<u8, _>(f2))
        .result()
        .unwrap()
        .unwrap_err();
    assert!(Failure::ptr_eq(&got, &f));
    let (inner, r) = Deferred::<u8>::new();
    let created = inner.created_at();
    let d = maybe_deferred(move || inner);
    assert_eq!(d.created_at(), created);
    r.callback(4).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 4);
    let line = line!() + 1;
    let f = maybe_deferred(|| -> Result<u8, Failure> { panic!("p") })
        .result()
        .unwrap()
        .unwrap_err();
    assert!(f.is_panic());
    assert_eq!(f.origin().line(), line);
}

/// resolve() is callback or errback.
#[test]
fn resolve_fires_either_kind() {
    let (d, r) = Deferred::<u8>::new();
    r.resolve(Ok(1)).unwrap();
    assert!(r.is_called());
    assert_eq!(d.result().unwrap().unwrap(), 1);
    let (d, r) = Deferred::<u8>::new();
    r.resolve(Err(Failure::msg("m"))).unwrap();
    assert_eq!(d.result().unwrap().unwrap_err().to_string(), "m");
}

/// R33: `f.trap::<E>()?` in an errback handles `E` and re-raises anything else
/// as the *same* failure.
#[test]
fn trap_in_errback_handles_its_type_and_reraises_the_same_failure() {
    let d = fail::<u32>(io::Error::new(io::ErrorKind::NotFound, "gone")).add_errback(|f| {
        let e = f.trap::<io::Error>()?;
        Ok(if e.kind() == io::ErrorKind::NotFound {
            1
        } else {
            2
        })
    });
    assert_eq!(d.result().unwrap().unwrap(), 1);

    let original = Failure::new(Boom(2));
    let seen = Rc::new(RefCell::new(None));
    let s = seen.clone();
    let d = fail::<u32>(original.clone())
        .add_errback(|f| {
            f.trap::<io::Error>()?;
            Ok(0)
        })
        .add_errback(move |f| {
            *s.borrow_mut() = Some(f.clone());
            Err(f)
        });
    let last = d.result().unwrap().unwrap_err();
    assert!(Failure::ptr_eq(&last, &original));
    assert!(Failure::ptr_eq(seen.borrow().as_ref().unwrap(), &original));
    assert!(original.check::<Boom>());
    assert!(!original.check::<Message>());
}

/// The failure Display walks the cause chain; a message failure shows its text.
#[test]
fn failure_display_in_chain() {
    let d = fail::<u8>(Failure::msg("outer"))
        .add_errback(|f| Err(Failure::msg(format!("wrapped: {f}"))));
    assert_eq!(
        d.result().unwrap().unwrap_err().to_string(),
        "wrapped: outer"
    );
}

/// created_at is the `Deferred::new` call site.
#[test]
fn created_at_is_the_new_call_site() {
    let line = line!() + 1;
    let (d, _r) = Deferred::<u8>::new();
    assert_eq!(d.created_at().line(), line);
    assert_eq!(d.created_at().file(), file!());
}
