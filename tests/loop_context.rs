//! Context variables follow callbacks from where they were scheduled.

use deferloop::{ContextVar, Error, EventLoop};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

static REQUEST_ID: ContextVar<u32> = ContextVar::new("request_id");

/// A value set before scheduling is visible when the callback runs; a change
/// inside a callback is seen by what it schedules, not by the caller or others.
#[test]
fn context_set_before_scheduling_is_visible_and_changes_stay_local() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let seen = Rc::new(RefCell::new(Vec::new()));
    REQUEST_ID.set(1);
    let s = seen.clone();
    ev.call_later(Duration::from_millis(1), move |lp| {
        s.borrow_mut().push(("a", REQUEST_ID.get()));
        REQUEST_ID.set(2);
        let s2 = s.clone();
        lp.call_soon(move |_| s2.borrow_mut().push(("child", REQUEST_ID.get())))
            .unwrap();
    })?;
    REQUEST_ID.set(3);
    let s = seen.clone();
    ev.call_later(Duration::from_millis(2), move |_| {
        s.borrow_mut().push(("b", REQUEST_ID.get()))
    })?;
    REQUEST_ID.remove();
    let s = seen.clone();
    ev.call_later(Duration::from_millis(3), move |lp| {
        s.borrow_mut().push(("c", REQUEST_ID.get()));
        // Queued after "child" even if a loaded machine made all three timers
        // due in one turn (then "child" runs in the next turn, before this).
        lp.call_soon(|lp| lp.stop()).unwrap();
    })?;
    ev.run()?;
    assert_eq!(REQUEST_ID.get(), None, "the caller's context is untouched");
    // What each callback saw is the rule under test, not the order in which
    // a loaded machine lets the three timers come due.
    seen.borrow_mut().sort();
    assert_eq!(
        *seen.borrow(),
        [
            ("a", Some(1)),
            ("b", Some(3)),
            ("c", None),
            ("child", Some(2))
        ]
    );
    Ok(())
}
