//! DeferredLock, DeferredSemaphore (R47, R48) and DeferredQueue (R49).

use deferloop::deferred::{
    Cancelled, Deferred, DeferredLock, DeferredQueue, DeferredSemaphore, LockGuard, QueueOverflow,
    QueueUnderflow,
};
use deferloop::Failure;
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::rc::Rc;

fn guard(d: Deferred<LockGuard>) -> LockGuard {
    d.result().unwrap().unwrap()
}

fn sem(tokens: usize) -> DeferredSemaphore {
    DeferredSemaphore::new(NonZeroUsize::new(tokens).unwrap())
}

/// testLock: acquire fires at once when unlocked, else FIFO as each holder
/// drops its guard (the guard replaces Twisted's `release()`).
#[test]
fn lock_hands_over_in_fifo_order() {
    let lock = DeferredLock::new();
    let order = Rc::new(RefCell::new(Vec::new()));
    let a = lock.acquire();
    assert!(a.is_called() && lock.is_locked());
    let mk = |i: u8| {
        let o = order.clone();
        lock.acquire().map(move |g| {
            o.borrow_mut().push(i);
            g
        })
    };
    let (b, c) = (mk(1), mk(2));
    assert_eq!(lock.waiting(), 2);
    drop(guard(a));
    assert_eq!(*order.borrow(), [1]);
    guard(b).release();
    assert_eq!(*order.borrow(), [1, 2]);
    assert!(lock.is_locked());
    drop(guard(c));
    assert!(!lock.is_locked());
}

/// test_cancelLockBeforeAcquired: cancelling a waiting acquire removes it
/// (Cancelled); cancelling a fired one does nothing.
#[test]
fn cancelling_a_waiting_acquire_removes_it() {
    let lock = DeferredLock::new();
    let first = lock.acquire();
    let waiting = lock.acquire();
    waiting.cancel();
    assert_eq!(lock.waiting(), 0);
    assert!(waiting.result().unwrap().unwrap_err().check::<Cancelled>());
    first.cancel();
    drop(guard(first));
    assert!(!lock.is_locked());
}

/// run(f) holds the lock until f's Deferred fires, and passes its result on.
#[test]
fn run_holds_the_lock_until_fs_deferred_fires() {
    let lock = DeferredLock::new();
    let (inner, ir) = Deferred::<u8>::new();
    let slot = Rc::new(RefCell::new(Some(inner)));
    let d = lock.run(move || slot.borrow_mut().take().unwrap());
    assert!(lock.is_locked());
    let second = lock.run(|| Ok(2u8));
    assert!(!second.is_called());
    ir.callback(1).unwrap();
    assert_eq!(d.result().unwrap().unwrap(), 1);
    assert_eq!(second.result().unwrap().unwrap(), 2);
    assert!(!lock.is_locked());
    let failed = lock.run(|| Err::<u8, _>(Failure::msg("run-failed")));
    assert_eq!(
        failed.result().unwrap().unwrap_err().to_string(),
        "run-failed"
    );
    assert!(!lock.is_locked());
}

/// testSemaphore: tokens count down; a dropped guard hands its token to a
/// waiter. (test_semaphoreInvalidTokens has no counterpart: zero tokens is a
/// `NonZeroUsize` that cannot be made, and over-release needs a guard that
/// cannot be had.)
#[test]
fn semaphore_counts_tokens() {
    let sem = sem(2);
    let a = sem.acquire();
    let b = sem.acquire();
    assert!(a.is_called() && b.is_called());
    assert_eq!(sem.tokens(), 0);
    let c = sem.acquire();
    assert!(!c.is_called());
    drop(guard(a));
    assert!(c.is_called());
    assert_eq!(sem.tokens(), 0);
    drop(guard(b));
    drop(guard(c));
    assert_eq!(sem.tokens(), 2);
    assert_eq!(sem.limit(), 2);
}

/// Cancelling a waiting semaphore acquire removes it; the next gets the token.
#[test]
fn cancelling_a_waiting_semaphore_acquire() {
    let sem = sem(1);
    let a = sem.acquire();
    let b = sem.acquire();
    let c = sem.acquire();
    b.cancel();
    assert_eq!(sem.waiting(), 1);
    drop(guard(a));
    assert!(c.is_called());
    assert!(b.result().unwrap().unwrap_err().check::<Cancelled>());
}

/// testQueue: puts before gets are stored; gets before puts wait, FIFO.
#[test]
fn queue_delivers_in_order() {
    let q = DeferredQueue::unbounded();
    q.put(1u8).unwrap();
    q.put(2).unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(q.get().unwrap().result().unwrap().unwrap(), 1);
    assert_eq!(q.get().unwrap().result().unwrap().unwrap(), 2);
    assert!(q.is_empty());
    let a = q.get().unwrap();
    let b = q.get().unwrap();
    assert_eq!(q.waiting(), 2);
    q.put(3).unwrap();
    q.put(4).unwrap();
    assert_eq!(a.result().unwrap().unwrap(), 3);
    assert_eq!(b.result().unwrap().unwrap(), 4);
}

/// R49: size and backlog limits give QueueOverflow / QueueUnderflow; a put with a
/// waiting getter ignores size (V: size=0 works).
#[test]
fn queue_limits_overflow_and_underflow() {
    let q = DeferredQueue::bounded(1).with_backlog(1);
    q.put(1u8).unwrap();
    assert_eq!(q.put(2), Err(QueueOverflow));
    let _ = q.get().unwrap();
    let _waiting = q.get().unwrap();
    assert!(matches!(q.get(), Err(QueueUnderflow)));

    let q = DeferredQueue::bounded(0);
    let g = q.get().unwrap();
    q.put(5u8).unwrap();
    assert_eq!(g.result().unwrap().unwrap(), 5);
    assert_eq!(q.put(6), Err(QueueOverflow));
}

/// test_cancelQueueAfterGet: cancelling a waiting get removes it (Cancelled); the
/// next put goes to the next getter or is stored.
#[test]
fn cancelling_a_waiting_get_removes_it() {
    let q = DeferredQueue::<u8>::unbounded();
    let g = q.get().unwrap();
    g.cancel();
    assert_eq!(q.waiting(), 0);
    assert!(g.result().unwrap().unwrap_err().check::<Cancelled>());
    q.put(1).unwrap();
    assert_eq!(q.len(), 1);
    // test_cancelQueueAfterSynchronousGet: cancelling a fired get does nothing.
    let g = q.get().unwrap();
    g.cancel();
    assert_eq!(g.result().unwrap().unwrap(), 1);
}

/// A queue of values that are not `Clone` (a command holding a connection,
/// say) is still a handle that clones: both handles are the same queue.
#[test]
fn a_queue_of_non_clone_items_clones_as_a_handle() {
    #[derive(Debug)]
    struct NotClone(u8);
    let q = DeferredQueue::<NotClone>::unbounded();
    let producer = q.clone();
    let g = q.get().unwrap();
    assert!(producer.put(NotClone(7)).is_ok());
    assert_eq!(g.result().unwrap().unwrap().0, 7);
}
