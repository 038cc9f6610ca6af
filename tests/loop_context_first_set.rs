//! The first context variable ever set in the process, set inside a callback.
//!
//! Until a variable is set, the loop skips the thread-local context when it
//! schedules and runs callbacks. This file holds one test, so that (in its own
//! process) no variable was set before it: the switch happens mid-callback.

use deferloop::{ContextVar, Error, EventLoop};
use std::cell::RefCell;
use std::rc::Rc;

static USER: ContextVar<&'static str> = ContextVar::new("user");

/// A variable first set inside a callback is seen by what that callback
/// schedules, and is gone for the next callback of the turn and afterwards.
#[test]
fn the_first_variable_ever_set_inside_a_callback_stays_local() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    ev.call_soon(move |lp| {
        s.borrow_mut().push(("a", USER.get()));
        USER.set("alice");
        let s2 = s.clone();
        lp.call_soon(move |_| s2.borrow_mut().push(("child", USER.get())))
            .unwrap();
    })?;
    let s = seen.clone();
    ev.call_soon(move |_| s.borrow_mut().push(("b", USER.get())))?;
    ev.run_once()?;
    assert_eq!(USER.get(), None, "the caller's context is untouched");
    ev.run_once()?;
    assert_eq!(
        *seen.borrow(),
        [("a", None), ("b", None), ("child", Some("alice"))]
    );
    Ok(())
}
