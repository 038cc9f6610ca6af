//! A queue whose `get` is a Deferred: `DeferredQueue` (Twisted's).
//!
//! A `put` that fires a waiting getter from inside another getter's callback
//! is trampolined: a cascade through any number of getters runs at constant
//! stack depth.

use super::errors::{QueueOverflow, QueueUnderflow};
use super::{succeed, Deferred, Resolver};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

/// An event queue of `T`s: [`get`](Self::get) returns a Deferred that fires with
/// the next item (Twisted's `DeferredQueue`).
///
/// - `put(v)`: if getters wait, the oldest gets `v` (whatever `size` says); else
///   `v` is stored if fewer than `size` items are (any number for
///   [`unbounded`](Self::unbounded)); else
///   [`QueueOverflow`].
/// - `get()`: the oldest stored item (already fired); else a waiting Deferred if
///   fewer than `backlog` getters wait ([`with_backlog`](Self::with_backlog);
///   any number by default); else [`QueueUnderflow`]. Cancelling a
///   waiting get removes it (it fails with `Cancelled`).
///
/// Cloning gives another handle to the same queue, whatever `T` is.
pub struct DeferredQueue<T> {
    inner: Rc<RefCell<Q<T>>>,
}

// Not derived: a derive would ask `T: Clone` of a handle that clones an `Rc`.
impl<T> Clone for DeferredQueue<T> {
    fn clone(&self) -> Self {
        DeferredQueue {
            inner: self.inner.clone(),
        }
    }
}

struct Q<T> {
    size: Option<usize>,
    backlog: Option<usize>,
    pending: VecDeque<T>,
    waiting: VecDeque<Resolver<T>>,
    granted: VecDeque<(Resolver<T>, T)>,
    firing: bool,
    /// Where the queue was made (for `ps`).
    made_at: &'static std::panic::Location<'static>,
}

impl<T: 'static> DeferredQueue<T> {
    /// A queue that stores any number of items and of waiting getters
    /// (Twisted's `DeferredQueue()`).
    ///
    /// # Examples
    /// ```
    /// use deferloop::DeferredQueue;
    ///
    /// let q = DeferredQueue::unbounded();
    /// let got = q.get().unwrap(); // waits
    /// q.put("job").unwrap();
    /// assert_eq!(got.result().unwrap().unwrap(), "job");
    /// ```
    #[track_caller]
    pub fn unbounded() -> DeferredQueue<T> {
        DeferredQueue::with_limits(None, None)
    }

    /// A queue that stores at most `size` items while no getter waits; a
    /// put past that is [`QueueOverflow`]. `size` 0 is a hand-off: a put
    /// succeeds only into a waiting getter. Waiting getters are unbounded
    /// unless [`with_backlog`](Self::with_backlog) says otherwise.
    ///
    /// # Examples
    /// ```
    /// use deferloop::deferred::errors::QueueOverflow;
    /// use deferloop::DeferredQueue;
    ///
    /// let q = DeferredQueue::bounded(1);
    /// q.put(1).unwrap();
    /// assert_eq!(q.put(2), Err(QueueOverflow));
    /// ```
    #[track_caller]
    pub fn bounded(size: usize) -> DeferredQueue<T> {
        DeferredQueue::with_limits(Some(size), None)
    }

    /// At most `backlog` getters wait at once; a `get` past that is
    /// [`QueueUnderflow`].
    pub fn with_backlog(self, backlog: usize) -> DeferredQueue<T> {
        self.inner.borrow_mut().backlog = Some(backlog);
        self
    }

    #[track_caller]
    fn with_limits(size: Option<usize>, backlog: Option<usize>) -> DeferredQueue<T> {
        DeferredQueue {
            inner: Rc::new(RefCell::new(Q {
                made_at: std::panic::Location::caller(),
                size,
                backlog,
                pending: VecDeque::new(),
                waiting: VecDeque::new(),
                granted: VecDeque::new(),
                firing: false,
            })),
        }
    }

    /// Adds an item (see the type's documentation).
    ///
    /// # Errors
    /// [`QueueOverflow`] if no getter waits and `size` items are stored; `v` is
    /// dropped.
    pub fn put(&self, v: T) -> Result<(), QueueOverflow> {
        let mut q = self.inner.borrow_mut();
        match q.waiting.pop_front() {
            Some(w) => q.granted.push_back((w, v)),
            None if q.size.is_none_or_lt(q.pending.len()) => {
                q.pending.push_back(v);
                return Ok(());
            }
            None => return Err(QueueOverflow),
        }
        if q.firing {
            return Ok(());
        }
        q.firing = true;
        while let Some((w, v)) = q.granted.pop_front() {
            drop(q);
            let refused = w.try_resolve(Ok(v)).err();
            drop(w);
            q = self.inner.borrow_mut();
            if let Some(Ok(v)) = refused {
                // The getter was cancelled while granted: the item goes on.
                match q.waiting.pop_front() {
                    Some(w) => q.granted.push_back((w, v)),
                    None => q.pending.push_front(v),
                }
            }
        }
        q.firing = false;
        Ok(())
    }

    /// A Deferred for the next item (see the type's documentation).
    ///
    /// # Errors
    /// [`QueueUnderflow`] if nothing is stored and `backlog` getters wait.
    #[track_caller]
    pub fn get(&self) -> Result<Deferred<T>, QueueUnderflow> {
        let mut q = self.inner.borrow_mut();
        if let Some(v) = q.pending.pop_front() {
            drop(q);
            return Ok(succeed(v));
        }
        if !q.backlog.is_none_or_lt(q.waiting.len()) {
            return Err(QueueUnderflow);
        }
        let weak = Rc::downgrade(&self.inner);
        let (d, r) = Deferred::with_canceller(move |r: &Resolver<T>| {
            if let Some(q) = weak.upgrade() {
                q.borrow_mut().waiting.retain(|w| !Resolver::same(w, r));
            }
        });
        q.waiting.push_back(r);
        d.tag_wait(|| super::registry::Wait::Turn {
            kind: "queue",
            created_at: q.made_at,
        });
        Ok(d)
    }

    /// Number of stored items.
    pub fn len(&self) -> usize {
        self.inner.borrow().pending.len()
    }

    /// Whether no item is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of waiting getters.
    pub fn waiting(&self) -> usize {
        self.inner.borrow().waiting.len()
    }
}

trait LimitExt {
    fn is_none_or_lt(&self, n: usize) -> bool;
}

impl LimitExt for Option<usize> {
    /// No limit, or `n` below it.
    fn is_none_or_lt(&self, n: usize) -> bool {
        match *self {
            None => true,
            Some(limit) => n < limit,
        }
    }
}

impl<T> fmt::Debug for DeferredQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.inner.borrow();
        f.debug_struct("DeferredQueue")
            .field("len", &q.pending.len())
            .field("waiting", &q.waiting.len())
            .field("size", &q.size)
            .field("backlog", &q.backlog)
            .finish()
    }
}
