//! Mutual exclusion for callback chains: `DeferredLock` and `DeferredSemaphore`
//! (Twisted's).
//!
//! Acquiring gives a `Deferred<LockGuard>` that fires when the lock/token is yours; the guard
//! gives it back when dropped, wherever down the chain it travelled (Twisted's
//! `release()`, which could be forgotten or called twice, is gone). Releases
//! that happen inside a waiter's callback are trampolined, so a cascade
//! through any number of waiters runs at constant stack depth (Twisted's
//! overflows: <https://github.com/twisted/twisted/issues/9304>).

use super::registry::Wait;
use super::{maybe_deferred, succeed, Deferred, IntoStep, Resolver};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroUsize;
use std::rc::Rc;

struct Sem {
    tokens: usize,
    limit: usize,
    waiters: VecDeque<Resolver<LockGuard>>,
    /// Waiters already granted a token, not yet fired (trampoline).
    granted: VecDeque<Resolver<LockGuard>>,
    firing: bool,
    /// `"lock"` or `"semaphore"`, and where it was made (for `ps`).
    kind: &'static str,
    made_at: &'static std::panic::Location<'static>,
}

/// A held [`DeferredLock`], or one token of a [`DeferredSemaphore`]: what
/// `acquire()` fires with. Dropping it releases (the next waiter, if any,
/// gets the lock now, or right after the callback that dropped it). It can
/// travel down the chain as a value, so the lock is held until the step
/// that finally drops it.
///
/// ```
/// use deferloop::deferred::DeferredLock;
///
/// let lock = DeferredLock::new();
/// let done = lock
///     .acquire()
///     .map(|guard| {
///         // ... work while holding the lock ...
///         drop(guard); // or let it go at the end of the chain
///     });
/// assert!(!lock.is_locked());
/// # done.detach();
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    sem: Option<SemRef>,
}

impl LockGuard {
    /// Releases now (the same as dropping the guard; reads better in a chain).
    pub fn release(self) {}

    /// Gives up the token without releasing it (for a grant nobody took).
    fn defuse(mut self) {
        self.sem = None;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(sem) = self.sem.take() {
            sem.release();
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

#[derive(Clone)]
struct SemRef(Rc<RefCell<Sem>>);

impl SemRef {
    #[track_caller]
    fn new(limit: usize, kind: &'static str) -> SemRef {
        SemRef(Rc::new(RefCell::new(Sem {
            kind,
            made_at: std::panic::Location::caller(),
            tokens: limit,
            limit,
            waiters: VecDeque::new(),
            granted: VecDeque::new(),
            firing: false,
        })))
    }

    fn guard(&self) -> LockGuard {
        LockGuard {
            sem: Some(self.clone()),
        }
    }

    #[track_caller]
    fn acquire(&self) -> Deferred<LockGuard> {
        let mut s = self.0.borrow_mut();
        if s.tokens > 0 {
            s.tokens -= 1;
            drop(s);
            return succeed(self.guard());
        }
        let weak = Rc::downgrade(&self.0);
        let (d, r) = Deferred::with_canceller(move |r: &Resolver<LockGuard>| {
            if let Some(sem) = weak.upgrade() {
                sem.borrow_mut().waiters.retain(|w| !Resolver::same(w, r));
            }
        });
        s.waiters.push_back(r);
        d.tag_wait(|| Wait::Turn {
            kind: s.kind,
            created_at: s.made_at,
        });
        d
    }

    /// Returns the token of a guard being dropped.
    fn release(&self) {
        let mut s = self.0.borrow_mut();
        debug_assert!(s.tokens < s.limit, "a guard holds a token");
        match s.waiters.pop_front() {
            Some(w) => s.granted.push_back(w),
            None => {
                s.tokens += 1;
                return;
            }
        }
        if s.firing {
            // An outer release is firing waiters: it will fire this one too.
            return;
        }
        s.firing = true;
        while let Some(w) = s.granted.pop_front() {
            drop(s);
            let taken = match w.try_resolve(Ok(self.guard())) {
                Ok(()) => true,
                Err(refused) => {
                    // Its token is passed on below, not released.
                    if let Ok(guard) = refused {
                        guard.defuse();
                    }
                    false
                }
            };
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
    }

    #[track_caller]
    fn run<R: IntoStep>(&self, f: impl FnOnce() -> R + 'static) -> Deferred<R::Output> {
        self.acquire().add_callback(move |guard| {
            maybe_deferred(f).add_both(move |r| {
                guard.release();
                r
            })
        })
    }
}

/// A lock for callback chains (Twisted's `DeferredLock`).
///
/// [`acquire`](Self::acquire) fires with a [`LockGuard`] at once if unlocked,
/// else when the holders before it have dropped theirs (FIFO). Cancelling a
/// waiting acquire removes it from the queue (it fails with `Cancelled`);
/// cancelling a fired one does nothing. A lock dropped while acquires wait
/// fails them with [`Abandoned`](super::Abandoned).
///
/// **Unlike Twisted** there is no `release()` on the lock: the guard releases
/// when dropped, so a lock cannot be released twice or by someone who does
/// not hold it.
///
/// # Examples
/// ```
/// use deferloop::deferred::DeferredLock;
///
/// let lock = DeferredLock::new();
/// let first = lock.acquire();
/// let second = lock.acquire();
/// assert!(first.is_called() && !second.is_called());
/// drop(first); // its guard goes with it
/// assert!(second.is_called());
/// ```
#[derive(Clone)]
pub struct DeferredLock(SemRef);

impl DeferredLock {
    /// An unlocked lock.
    #[track_caller]
    pub fn new() -> DeferredLock {
        DeferredLock(SemRef::new(1, "lock"))
    }

    /// A Deferred that fires with the lock's guard when the caller holds it.
    #[track_caller]
    pub fn acquire(&self) -> Deferred<LockGuard> {
        self.0.acquire()
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
    #[track_caller]
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
/// `tokens` holders at once, the rest wait FIFO. Each holder has a
/// [`LockGuard`] that returns its token when dropped. Cancellation as for
/// [`DeferredLock`].
#[derive(Clone)]
pub struct DeferredSemaphore(SemRef);

impl DeferredSemaphore {
    /// A semaphore with `tokens` tokens available (zero tokens, which
    /// Twisted refuses at run time, cannot be asked for).
    ///
    /// ```
    /// use deferloop::deferred::DeferredSemaphore;
    /// use std::num::NonZeroUsize;
    ///
    /// let sem = DeferredSemaphore::new(NonZeroUsize::new(2).unwrap());
    /// assert_eq!(sem.tokens(), 2);
    /// ```
    #[track_caller]
    pub fn new(tokens: NonZeroUsize) -> DeferredSemaphore {
        DeferredSemaphore(SemRef::new(tokens.get(), "semaphore"))
    }

    /// A Deferred that fires with a guard when the caller holds a token.
    #[track_caller]
    pub fn acquire(&self) -> Deferred<LockGuard> {
        self.0.acquire()
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
