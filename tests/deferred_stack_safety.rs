//! Stack safety (R23, R24 and beyond Twisted): deep waiting chains, long runs of
//! already-fired returns, 100,000-link `chain_deferred` chains, dropping deep
//! chains, and lock/semaphore/queue cascades all run at constant native stack
//! depth. Each test runs in a thread with a 256 KiB stack to prove it.

use deferloop::deferred::{
    succeed, Deferred, DeferredLock, DeferredQueue, DeferredSemaphore, Resolver,
};
use deferloop::Failure;
use std::cell::Cell;
use std::rc::Rc;

const N: usize = 100_000;

fn small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

/// Builds N Deferreds each waiting on the previous; returns the outermost and the
/// innermost's resolver.
fn nested_waiting_chain() -> (Deferred<u64>, Resolver<u64>) {
    let (mut d, r) = Deferred::<u64>::new();
    for _ in 0..N {
        let inner = d;
        d = succeed(()).add_callback(move |()| inner).map(|x| x + 1);
        assert!(d.is_paused());
    }
    (d, r)
}

/// 100,000 nested waiting Deferreds fired from the innermost.
#[test]
fn nested_chain_of_100k_fired_from_innermost_does_not_overflow() {
    small_stack(|| {
        let (d, r) = nested_waiting_chain();
        r.callback(0).unwrap();
        assert_eq!(d.result().unwrap().unwrap(), N as u64);
    });
}

/// 100,000 callbacks each returning an already-fired Deferred.
#[test]
fn hundred_thousand_fired_returns_do_not_overflow() {
    small_stack(|| {
        let (mut d, r) = Deferred::<u64>::new();
        for _ in 0..N {
            d = d.add_callback(|x| succeed(x + 1));
        }
        r.callback(0).unwrap();
        assert_eq!(d.result().unwrap().unwrap(), N as u64);
    });
}

/// A 100,000-link chain_deferred chain (Twisted overflows at about 2,000).
#[test]
fn chain_deferred_chain_of_100k_does_not_overflow() {
    small_stack(|| {
        let (first, r0) = Deferred::<u64>::new();
        let mut d = first;
        for _ in 0..N {
            let (next, nr) = Deferred::<u64>::new();
            d.map(|x| x + 1).chain_deferred(&nr);
            d = next;
        }
        r0.callback(0).unwrap();
        assert_eq!(d.result().unwrap().unwrap(), N as u64);
    });
}

/// Dropping a never-fired 100,000-deep waiting chain is iterative.
#[test]
fn dropping_an_unfired_100k_waiting_chain_does_not_overflow() {
    small_stack(|| {
        let (d, r) = nested_waiting_chain();
        drop(d);
        drop(r);
    });
}

/// Dropping a never-fired 100,000-link chain_deferred chain is iterative.
#[test]
fn dropping_an_unfired_100k_forward_chain_does_not_overflow() {
    small_stack(|| {
        let (first, r0) = Deferred::<u64>::new();
        let mut d = first;
        let mut keep = Vec::new();
        for _ in 0..N {
            let (next, nr) = Deferred::<u64>::new();
            d.chain_deferred(&nr);
            d = next;
            keep.push(());
        }
        drop(d);
        drop(r0);
    });
}

/// Releasing a lock to 100,000 queued waiters whose callbacks each release again
/// (Twisted #9304 overflows).
#[test]
fn lock_release_cascade_of_100k_does_not_overflow() {
    small_stack(|| {
        let lock = DeferredLock::new();
        let held = lock.acquire();
        assert!(held.is_called());
        let ran = Rc::new(Cell::new(0usize));
        let mut waiters = Vec::new();
        for _ in 0..N {
            let (l, r) = (lock.clone(), ran.clone());
            waiters.push(lock.acquire().map(move |guard| {
                r.set(r.get() + 1);
                drop(l);
                drop(guard); // releases to the next waiter
            }));
        }
        drop(held.result().unwrap().unwrap());
        assert_eq!(ran.get(), N);
        assert!(!lock.is_locked());
    });
}

/// The same cascade through a semaphore.
#[test]
fn semaphore_release_cascade_of_100k_does_not_overflow() {
    small_stack(|| {
        let sem = DeferredSemaphore::new(std::num::NonZeroUsize::MIN);
        let held = sem.acquire();
        let ran = Rc::new(Cell::new(0usize));
        let mut waiters = Vec::new();
        for _ in 0..N {
            let r = ran.clone();
            waiters.push(sem.acquire().map(move |guard| {
                r.set(r.get() + 1);
                drop(guard); // releases to the next waiter
            }));
        }
        drop(held.result().unwrap().unwrap());
        assert_eq!(ran.get(), N);
        assert_eq!(sem.tokens(), 1);
    });
}

/// 100,000 waiting getters whose callbacks each put the next item.
#[test]
fn queue_put_cascade_of_100k_does_not_overflow() {
    small_stack(|| {
        let q = DeferredQueue::<usize>::unbounded();
        let got = Rc::new(Cell::new(0usize));
        let mut gets = Vec::new();
        for _ in 0..N {
            let (q2, g) = (q.clone(), got.clone());
            gets.push(q.get().unwrap().add_callback(move |v| {
                g.set(g.get() + 1);
                if v + 1 < N {
                    q2.put(v + 1).map_err(Failure::new)?;
                }
                Ok(())
            }));
        }
        q.put(0).unwrap();
        assert_eq!(got.get(), N);
        assert_eq!(q.waiting(), 0);
    });
}
