//! `set_unhandled_failure_hook`: applications and tests receive unhandled
//! failures instead of the log.

use deferloop::deferred::{fail, set_unhandled_failure_hook, succeed};
use deferloop::Failure;
use std::cell::RefCell;
use std::rc::Rc;

mod util;

/// The hook gets each unhandled failure once, with the Deferred's creation
/// site; nothing is logged meanwhile; `None` restores logging.
#[test]
fn the_hook_receives_unhandled_failures_instead_of_the_log() {
    util::logs();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let previous = set_unhandled_failure_hook(Some(Box::new(move |u| {
        s.borrow_mut()
            .push((u.failure.to_string(), u.created_at.line()))
    })));
    assert!(previous.is_none());
    let line = line!() + 1;
    drop(fail::<u8>(Failure::msg("hooked-1")));
    drop(succeed(1u8).add_errback(Err::<u8, _>)); // no failure: nothing
    assert_eq!(*seen.borrow(), [("hooked-1".to_owned(), line)]);
    assert!(util::logs().containing("hooked-1").is_empty());

    assert!(set_unhandled_failure_hook(None).is_some());
    drop(fail::<u8>(Failure::msg("hooked-2")));
    assert_eq!(seen.borrow().len(), 1);
    assert_eq!(util::logs().containing("hooked-2").len(), 1);
}

/// A panicking hook is contained: logged, then the default reports.
#[test]
fn a_panicking_hook_is_logged_and_the_default_reports() {
    util::logs();
    let previous = set_unhandled_failure_hook(Some(Box::new(|_| panic!("hook-broke"))));
    drop(fail::<u8>(Failure::msg("hooked-3")));
    set_unhandled_failure_hook(previous);
    let logs = util::logs();
    assert_eq!(logs.containing("hook-broke").len(), 1);
    assert_eq!(logs.containing("hooked-3").len(), 1);
}
