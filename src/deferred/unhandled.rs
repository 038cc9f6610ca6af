//! Failures nobody handled: a Deferred dropped while its result is a failure.
//!
//! Owns [`set_unhandled_failure_hook`] and [`UnhandledFailure`]. By default
//! such a failure is logged once with `log::error!` ("Unhandled error in
//! Deferred", Twisted's wording); a hook installed on the thread receives it
//! instead, so an application can route it and a test can count or assert.
//! Tests: tests/deferred_unhandled.rs, tests/deferred_unhandled_hook.rs.

use crate::Failure;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

/// A failure that reached the end of a chain nobody handled, as the hook
/// installed with [`set_unhandled_failure_hook`] receives it.
#[derive(Debug)]
#[non_exhaustive]
pub struct UnhandledFailure<'a> {
    /// The failure (clone it to keep it).
    pub failure: &'a Failure,
    /// Where the Deferred holding it was created.
    pub created_at: &'static Location<'static>,
}

/// What [`set_unhandled_failure_hook`] installs.
pub type UnhandledFailureHook = Box<dyn FnMut(&UnhandledFailure<'_>)>;

thread_local! {
    static HOOK: RefCell<Option<UnhandledFailureHook>> = const { RefCell::new(None) };
}

/// Installs `hook` as this thread's receiver of unhandled failures and returns
/// the one it replaces; `None` restores the default, which logs each with
/// `log::error!`.
///
/// A failure is unhandled when the Deferred holding it as its final result is
/// dropped (with all its `Resolver`s), including a chain let go with
/// [`Deferred::detach`](super::Deferred::detach). Each is reported once. The
/// hook runs where that last drop happens; a failure reported from inside the
/// hook goes to the default, and a panicking hook is logged, then the default
/// reports the failure.
///
/// # Examples
/// ```
/// use deferloop::deferred::{fail, set_unhandled_failure_hook};
/// use deferloop::Failure;
/// use std::{cell::Cell, rc::Rc};
///
/// let seen = Rc::new(Cell::new(0));
/// let s = seen.clone();
/// let previous = set_unhandled_failure_hook(Some(Box::new(move |_| s.set(s.get() + 1))));
/// fail::<u8>(Failure::msg("nobody looks")).detach();
/// assert_eq!(seen.get(), 1);
/// set_unhandled_failure_hook(previous);
/// ```
pub fn set_unhandled_failure_hook(
    hook: Option<UnhandledFailureHook>,
) -> Option<UnhandledFailureHook> {
    HOOK.with(|h| std::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Reports `failure`, the final result of a Deferred created at `created_at`
/// that is being dropped.
pub(crate) fn report(failure: Failure, created_at: &'static Location<'static>) {
    let report = UnhandledFailure {
        failure: &failure,
        created_at,
    };
    // Taken out while it runs: a failure it drops itself goes to the default.
    let hook = HOOK.try_with(|h| h.borrow_mut().take()).ok().flatten();
    let Some(mut hook) = hook else {
        log_unhandled(&report);
        return;
    };
    let r = catch_unwind(AssertUnwindSafe(|| hook(&report)));
    let _ = HOOK.try_with(|h| {
        let mut slot = h.borrow_mut();
        if slot.is_none() {
            *slot = Some(hook);
        }
    });
    if let Err(p) = r {
        log::error!(
            "deferloop: the unhandled-failure hook panicked: {}",
            super::failure::panic_message(&*p)
        );
        log_unhandled(&report);
    }
}

fn log_unhandled(r: &UnhandledFailure<'_>) {
    log::error!(
        deferred_created_at:% = r.created_at, failure_origin:% = r.failure.origin(), failure:% = r.failure;
        "Unhandled error in Deferred created at {}: {} (failure origin: {})",
        r.created_at,
        r.failure,
        r.failure.origin()
    );
}
