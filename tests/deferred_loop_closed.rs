//! One error story: calling a closed loop returns `Error::Closed` from the
//! call; an operation whose result travels in a Deferred fails that Deferred
//! with the chain condition `LoopClosed`.

use deferloop::deferred::{defer_later, Deferred, LoopClosed};
use deferloop::{Error, EventLoop};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_closed_loop_refuses_calls_with_error_and_fails_chains_with_loop_closed() {
    let ev = EventLoop::new().unwrap();
    let lp = ev.to_loop();
    ev.close().unwrap();

    assert!(matches!(lp.call_soon(|_| {}), Err(Error::Closed)));

    let later = defer_later(&lp, MS, || Ok(1u8));
    let f = later.result().unwrap().unwrap_err();
    assert!(f.check::<LoopClosed>(), "{f:?}");

    let on_thread = lp.defer_to_thread(|| 1u8);
    let f = on_thread.result().unwrap().unwrap_err();
    assert!(f.check::<LoopClosed>(), "{f:?}");

    let (d, _r) = Deferred::<u8>::new();
    let f = d.add_timeout(MS, &lp).result().unwrap().unwrap_err();
    assert!(f.check::<LoopClosed>(), "{f:?}");
}

/// The conditions a chain fails with are reachable from the crate root.
#[test]
fn chain_errors_are_reexported_at_the_root() {
    let after = std::time::Duration::from_secs(1);
    let f = deferloop::Failure::new(deferloop::TimedOut { after });
    assert!(f.check::<deferloop::TimedOut>());
    let f = deferloop::Failure::new(deferloop::Cancelled);
    assert!(f.check::<deferloop::Cancelled>() && !f.check::<deferloop::LoopClosed>());
    let _: Option<&deferloop::FailureGroup> = f.downcast_ref();
    let _: Option<&deferloop::Abandoned> = f.downcast_ref();
}
