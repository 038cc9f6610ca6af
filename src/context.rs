//! Context: `ContextVar`, values that follow a callback from where it was
//! scheduled to where it runs (asyncio's `contextvars`, the request-ID case).
//!
//! Owns `ContextVar` and the crate-internal `Context` snapshot. A context is an
//! immutable, shared list of `(variable, value)` pairs behind one `Rc`: capturing
//! it when a callback is scheduled is one pointer copy plus a reference-count
//! increment (nothing at all while no variable was ever set). Each callback runs
//! with the context captured when it was scheduled; `set` inside it makes a new
//! list (copy-on-write, one entry per distinct variable, so it never grows with
//! the number of sets) that is visible to what that callback schedules, and is
//! gone when the callback returns. So a change made inside a callback is
//! invisible to the caller and to other callbacks.
//! Tests: below, and tests/loop_context.rs.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Behind a thin pointer (`Rc<Vec>`, not `Rc<[_]>`): a context is copied into
/// every queued task, so it is kept to one word.
type Entries = Rc<Vec<(usize, Rc<dyn Any>)>>;

/// A snapshot of every context variable's value; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Context(Option<Entries>);

thread_local! {
    static CURRENT: RefCell<Context> = const { RefCell::new(Context(None)) };
}

/// Whether a variable was ever set, on any thread. Until then every thread's
/// context is empty, so capturing and resetting it (once per callback
/// scheduled and run) skip the thread-local. A thread that sets a variable
/// stores `true` first, so its own later loads see it.
static EVER_SET: AtomicBool = AtomicBool::new(false);

impl Context {
    /// The context current on this thread.
    #[inline]
    pub(crate) fn capture() -> Context {
        if !EVER_SET.load(Ordering::Relaxed) {
            return Context(None);
        }
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Makes the empty context current, dropping any other: what a callback
    /// that ran in the empty context leaves behind (it may have set a variable).
    #[inline]
    pub(crate) fn reset() {
        if EVER_SET.load(Ordering::Relaxed) {
            Context::default().enter();
        }
    }

    /// Makes `self` current and returns the context it replaced.
    #[inline]
    pub(crate) fn enter(self) -> Context {
        CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), self))
    }

    /// Whether no variable is set in this context.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn get(&self, id: usize) -> Option<Rc<dyn Any>> {
        self.0
            .as_ref()?
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| v.clone())
    }

    fn with_value(&self, id: usize, value: Rc<dyn Any>) -> Context {
        let mut entries: Vec<(usize, Rc<dyn Any>)> = match &self.0 {
            Some(e) => e.iter().filter(|(k, _)| *k != id).cloned().collect(),
            None => Vec::with_capacity(1),
        };
        entries.push((id, value));
        Context(Some(Rc::new(entries)))
    }

    fn without(&self, id: usize) -> Context {
        match &self.0 {
            None => Context(None),
            Some(e) => {
                let rest: Vec<_> = e.iter().filter(|(k, _)| *k != id).cloned().collect();
                Context(if rest.is_empty() {
                    None
                } else {
                    Some(Rc::new(rest))
                })
            }
        }
    }
}

/// A variable whose value belongs to the current callback's context.
///
/// A value set before scheduling a callback is visible when that callback runs,
/// whichever turn that is; a value set inside a callback is seen by that
/// callback and by what it schedules, not by its caller or by other callbacks.
/// Values must be `Clone` for [`get`](Self::get); [`with`](Self::with) borrows.
///
/// # Examples
/// ```
/// use deferloop::{ContextVar, EventLoop};
///
/// static REQUEST_ID: ContextVar<u32> = ContextVar::new("request_id");
///
/// let ev = EventLoop::new()?;
/// REQUEST_ID.set(7);
/// ev.call_soon(|lp| {
///     assert_eq!(REQUEST_ID.get(), Some(7));
///     REQUEST_ID.set(8); // only this callback and what it schedules see 8
///     lp.stop();
/// })?;
/// ev.run()?;
/// assert_eq!(REQUEST_ID.get(), Some(7));
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct ContextVar<T> {
    name: &'static str,
    id: AtomicUsize,
    _value: PhantomData<fn() -> T>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

impl<T: 'static> ContextVar<T> {
    /// A new variable; `name` is for diagnostics only.
    pub const fn new(name: &'static str) -> ContextVar<T> {
        ContextVar {
            name,
            id: AtomicUsize::new(0),
            _value: PhantomData,
        }
    }

    /// The variable's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn id(&self) -> usize {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        let fresh = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        match self
            .id
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(winner) => winner,
        }
    }

    /// Sets the value in the current context.
    pub fn set(&self, value: T) {
        let id = self.id();
        EVER_SET.store(true, Ordering::Relaxed);
        CURRENT.with(|c| {
            let next = c.borrow().with_value(id, Rc::new(value));
            *c.borrow_mut() = next;
        });
    }

    /// Removes the value from the current context.
    pub fn remove(&self) {
        let id = self.id();
        CURRENT.with(|c| {
            let next = c.borrow().without(id);
            *c.borrow_mut() = next;
        });
    }

    /// Calls `f` with a reference to the current value, if any.
    pub fn with<R>(&self, f: impl FnOnce(Option<&T>) -> R) -> R {
        let value = CURRENT.with(|c| c.borrow().get(self.id()));
        f(value.as_deref().and_then(|v| v.downcast_ref::<T>()))
    }

    /// Runs `f` with the variable set to `value`, then restores the context.
    pub fn scoped<R>(&self, value: T, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Context>);
        impl Drop for Restore {
            fn drop(&mut self) {
                if let Some(c) = self.0.take() {
                    c.enter();
                }
            }
        }
        let _restore = Restore(Some(Context::capture()));
        self.set(value);
        f()
    }
}

impl<T: Clone + 'static> ContextVar<T> {
    /// A clone of the current value, if set.
    pub fn get(&self) -> Option<T> {
        self.with(|v| v.cloned())
    }
}

impl<T> fmt::Debug for ContextVar<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextVar")
            .field("name", &self.name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: ContextVar<u32> = ContextVar::new("a");
    static B: ContextVar<String> = ContextVar::new("b");

    #[test]
    fn a_captured_context_is_unaffected_by_later_sets() {
        A.set(1);
        let snap = Context::capture();
        A.set(2);
        let prev = snap.enter();
        assert_eq!(A.get(), Some(1));
        prev.enter();
        assert_eq!(A.get(), Some(2));
        A.remove();
        assert_eq!(A.get(), None);
    }

    #[test]
    fn setting_again_replaces_instead_of_growing() {
        B.set("x".into());
        for i in 0..1000u32 {
            A.set(i);
        }
        let len = CURRENT.with(|c| c.borrow().0.as_ref().map_or(0, |e| e.len()));
        assert_eq!(len, 2);
        assert_eq!(A.get(), Some(999));
        assert_eq!(B.get().as_deref(), Some("x"));
        A.remove();
        B.remove();
        assert!(Context::capture().is_empty());
    }

    #[test]
    fn scoped_restores_even_on_panic() {
        let r = std::panic::catch_unwind(|| A.scoped(5, || panic!("x")));
        assert!(r.is_err());
        assert_eq!(A.get(), None);
        assert_eq!(A.scoped(6, || A.get()), Some(6));
        assert_eq!(A.get(), None);
    }
}
