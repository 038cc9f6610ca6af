//! Mutual exclusion for callback chains: `DeferredLock` and `DeferredSemaphore`
//! (Twisted's, R47–R48).
//!
//! Owns `DeferredLock`, `DeferredSemaphore`. Acquiring gives a `Deferred<()>`
//! that fires when the lock/token is yours; release it with `release()` (there
//! is no guard: the holder is a callback chain, not a scope). Releases that
//! happen inside a waiter's callback are trampolined, so a cascade through any
//! number of waiters runs at constant stack depth (Twisted's #9304 overflows).
//! Tests: tests/deferred_lock_queue.rs.

use super::errors::NotLocked;
use super::{maybe_deferred, succeed, Deferred, IntoStep, Resolver};
use crate::Error;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

struct Sem {
    tokens: usize,
    limit: usize,
    waiters: VecDeque<Resolver<()>>,
    /// Waiters already granted a token, not yet fired (trampoline).
    granted: VecDeque<Resolver<()>>,
    firing: bool,
}

#[derive(Clone)]
struct Shared(Rc<RefCell<Sem>>);

impl Shared {
    fn new(limit: usize) -> Shared {
        Shared(Rc::new(RefCell::new(Sem {
            tokens: limit,
            limit,
            waiters: VecDeque::new(),
            granted: VecDeque::new(),
            firing: false,
        })))
    }

    #[track_caller]
    fn acquire(&self) -> Deferred<()> {
        let mut s = self.0.borrow_mut();
        if s.tokens > 0 {
            s.tokens -= 1;
            return succeed(());
        }
        let weak = Rc::downgrade(&self.0);
        let (d, r) = Deferred::with_canceller(move |r: &Resolver<()>| {
            if let Some(sem) = weak.upgrade() {
                sem.borrow_mut().waiters.retain(|w| !Resolver::same(w, r));
            }
        });
        s.waiters.push_back(r);
        d
    }

    fn release(&self) -> Result<(), NotLocked> {
        let mut s = self.0.borrow_mut();
        if s.tokens >= s.limit {
            return Err(NotLocked);
        }
        match s.waiters.pop_front() {
            Some(w) => s.granted.push_back(w),
            None => {
                s.tokens += 1;
                return Ok(());
            }
        }
        if s.firing {
            // An outer release is firing waiters: it will fire this one too.
            return Ok(());
        }
        s.firing = true;
        while let Some(w) = s.granted.pop_front() {
            drop(s);
            let taken = w.try_resolve(Ok(())).is_ok();
            drop(w);
            s = self.0.borrow_mut();
            if !taken {
                // Cancelled while granted: the token goes to the next waiter.
                match s.waiters.pop_front() {
                    Some(w) => s.granted.push_back(w),
                    None => s.tokens += 1,
                }
            }
        }
        s.firing = false;
        Ok(())
    }

    #[track_caller]
    fn run<R: IntoStep>(&self, f: impl FnOnce() -> R + 'static) -> Deferred<R::Output> {
        let me = self.clone();
        self.acquire().add_callback(move |()| {
            maybe_deferred(f).add_both(move |r| {
                let _ = me.release();
                r
            })
        })
    }
}

/// A lock for callback chains (Twisted's `DeferredLock`).
///
/// [`acquire`](Self::acquire) fires at once if unlocked, else when the holders
/// before it have released (FIFO). Cancelling a waiting acquire removes it from
/// the queue (it fails with `Cancelled`); cancelling a fired one does nothing.
///
/// # Examples
/// ```
/// use deferloop::deferred::DeferredLock;
///
/// let lock = DeferredLock::new();
/// let first = lock.acquire();
/// let second = lock.acquire();
/// assert!(first.is_called() && !second.is_called());
/// lock.release().unwrap();
/// assert!(second.is_called());
/// ```
#[derive(Clone)]
pub struct DeferredLock(Shared);

impl DeferredLock {
    /// An unlocked lock.
    pub fn new() -> DeferredLock {
        DeferredLock(Shared::new(1))
    }

    /// A Deferred that fires when the caller holds the lock.
    #[track_caller]
    pub fn acquire(&self) -> Deferred<()> {
        self.0.acquire()
    }

    /// Releases the lock: the first waiter (if any) gets it and its Deferred fires
    /// now (or, inside another waiter's callback, right after that callback).
    ///
    /// # Errors
    /// [`NotLocked`] if the lock is not held.
    pub fn release(&self) -> Result<(), NotLocked> {
        self.0.release()
    }

    /// Runs `f` holding the lock; releases it when `f`'s outcome (a Deferred it
    /// returns included) is complete, and passes that outcome on.
    #[track_caller]
    pub fn run<R: IntoStep>(&self, f: impl FnOnce() -> R + 'static) -> Deferred<R::Output> {
        self.0.run(f)
    }

    /// Whether the lock is held.
    pub fn is_locked(&self) -> bool {
        self.0 .0.borrow().tokens == 0
    }

    /// Number of acquires waiting.
    pub fn waiting(&self) -> usize {
        self.0 .0.borrow().waiters.len()
    }
}

impl Default for DeferredLock {
    fn default() -> Self {
        DeferredLock::new()
    }
}

impl fmt::Debug for DeferredLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredLock")
            .field("locked", &self.is_locked())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A semaphore for callback chains (Twisted's `DeferredSemaphore`): up to
/// `tokens` holders at once, the rest wait FIFO. Cancellation as for
/// [`DeferredLock`].
#[derive(Clone)]
pub struct DeferredSemaphore(Shared);

impl DeferredSemaphore {
    /// A semaphore with `tokens` tokens available.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `tokens` is 0.
    pub fn new(tokens: usize) -> Result<DeferredSemaphore, Error> {
        if tokens < 1 {
            return Err(Error::InvalidInput(
                "DeferredSemaphore needs at least one token",
            ));
        }
        Ok(DeferredSemaphore(Shared::new(tokens)))
    }

    /// A Deferred that fires when the caller holds a token.
    #[track_caller]
    pub fn acquire(&self) -> Deferred<()> {
        self.0.acquire()
    }

    /// Returns a token: the first waiter (if any) gets it.
    ///
    /// # Errors
    /// [`NotLocked`] if no token is held.
    pub fn release(&self) -> Result<(), NotLocked> {
        self.0.release()
    }

    /// Runs `f` holding a token (see [`DeferredLock::run`]).
    #[track_caller]
    pub fn run<R: IntoStep>(&self, f: impl FnOnce() -> R + 'static) -> Deferred<R::Output> {
        self.0.run(f)
    }

    /// Tokens available now.
    pub fn tokens(&self) -> usize {
        self.0 .0.borrow().tokens
    }

    /// The number of tokens it was created with.
    pub fn limit(&self) -> usize {
        self.0 .0.borrow().limit
    }

    /// Number of acquires waiting.
    pub fn waiting(&self) -> usize {
        self.0 .0.borrow().waiters.len()
    }
}

impl fmt::Debug for DeferredSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredSemaphore")
            .field("tokens", &self.tokens())
            .field("limit", &self.limit())
            .field("waiting", &self.waiting())
            .finish()
    }
}
