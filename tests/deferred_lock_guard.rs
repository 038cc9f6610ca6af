//! `acquire()` fires with a guard that releases when dropped, wherever it
//! went down the chain; a semaphore's guards return their tokens likewise.

use deferloop::deferred::{DeferredLock, DeferredSemaphore};
use deferloop::Failure;
use std::num::NonZeroUsize;

/// The guard travels down the chain as a value: the lock is held until the
/// step that drops it, not until the first callback returns.
#[test]
fn the_guard_holds_the_lock_down_the_chain_until_dropped() {
    let lock = DeferredLock::new();
    let d = lock
        .acquire()
        .add_callback(|g| Ok((g, 1u8)))
        .map(|(g, n)| (g, n + 1));
    assert!(lock.is_locked(), "the guard is still in the chain");
    let next = lock.acquire();
    assert!(!next.is_called());
    let (g, n) = d.result().unwrap().unwrap();
    assert_eq!(n, 2);
    g.release();
    assert!(next.is_called(), "the next waiter got the lock");
    drop(next);
    assert!(!lock.is_locked());
}

/// A guard lost with a failed chain still releases.
#[test]
fn a_guard_dropped_with_its_chain_releases() {
    let lock = DeferredLock::new();
    let d = lock
        .acquire()
        .add_callback(|_g| Err::<u8, _>(Failure::msg("lock-work-failed")));
    assert!(!lock.is_locked(), "the failing step dropped the guard");
    let _ = d.result();
}

/// Each semaphore guard is one token.
#[test]
fn semaphore_guards_return_their_tokens() {
    let sem = DeferredSemaphore::new(NonZeroUsize::new(2).unwrap());
    let a = sem.acquire().result().unwrap().unwrap();
    let b = sem.acquire().result().unwrap().unwrap();
    assert_eq!(sem.tokens(), 0);
    drop(a);
    assert_eq!(sem.tokens(), 1);
    b.release();
    assert_eq!(sem.tokens(), 2);
}
