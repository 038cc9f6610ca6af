//! The firing side of a Deferred: `Resolver`.
//!
//! Owns `Resolver`: `callback`, `errback`, `resolve`, their `*_if_pending`
//! forms, and the count of live Resolvers behind abandonment (the last one
//! dropped before firing fails the chain with `Abandoned`). Tests:
//! tests/deferred_abandoned.rs, tests/deferred_fire_if_pending.rs.

use super::errors::AlreadyCalled;
use super::node::{NodeRef, Res, Value};
use super::{cancel, run, spare};
use crate::Failure;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::rc::Rc;

/// The firing side of a [`Deferred`](super::Deferred): `callback`, `errback`, `resolve`.
///
/// Cheap to clone; all clones fire the same Deferred (once). Holding a
/// `Resolver` keeps the Deferred's state alive. When the last one is dropped
/// before the Deferred fired, the chain fails with [`Abandoned`](super::Abandoned).
pub struct Resolver<T> {
    /// Taken out only by `drop`.
    pub(super) node: ManuallyDrop<NodeRef>,
    /// Where this Resolver was created or cloned (the origin of [`Abandoned`](super::Abandoned)).
    made_at: &'static Location<'static>,
    /// Invariant in `T`, as `Deferred`.
    _t: PhantomData<*mut T>,
}

impl<T> Resolver<T> {
    pub(super) fn from_node(node: NodeRef, made_at: &'static Location<'static>) -> Resolver<T> {
        cancel::add_resolver(&node);
        Resolver::counted(node, made_at)
    }

    /// A Resolver already counted in its node's `resolvers`.
    #[inline]
    pub(super) fn counted(node: NodeRef, made_at: &'static Location<'static>) -> Resolver<T> {
        Resolver {
            node: ManuallyDrop::new(node),
            made_at,
            _t: PhantomData,
        }
    }
}

impl<T> Resolver<T> {
    /// Drops this Resolver and hands back its Deferred's storage, reset, if
    /// nothing else refers to it any more and its chain has run to the end
    /// (see `spare::into_spare`): for the next `Deferred::new_in`.
    pub(crate) fn into_spare(self) -> Option<spare::Spare> {
        let n = NodeRef::clone(&self.node);
        drop(self);
        spare::into_spare(n)
    }
}

impl<T> Clone for Resolver<T> {
    #[track_caller]
    fn clone(&self) -> Self {
        Resolver::from_node(NodeRef::clone(&self.node), Location::caller())
    }
}

impl<T> Drop for Resolver<T> {
    fn drop(&mut self) {
        // SAFETY: `node` is taken once, here, and the Resolver is gone after.
        let node = unsafe { ManuallyDrop::take(&mut self.node) };
        spare::release_resolver(node, self.made_at);
    }
}

impl<T> fmt::Debug for Resolver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.node.borrow();
        f.debug_struct("Resolver")
            .field("created_at", &format_args!("{}", n.created_at()))
            .field("called", &n.is_called())
            .finish()
    }
}

impl<T: 'static> Resolver<T> {
    /// Fires the Deferred with a value; its chain runs now (unless paused).
    ///
    /// Each callback gets the previous result. `Err(Failure)` switches to
    /// errbacks; an errback returning `Ok` switches back; a returned `Deferred`
    /// pauses this chain until it has a result.
    ///
    /// # Errors
    /// [`AlreadyCalled`] if the Deferred has fired before (including from inside
    /// its own callback). After a `cancel()` without canceller, one late fire is
    /// absorbed silently instead.
    #[track_caller]
    pub fn callback(&self, v: T) -> Result<(), AlreadyCalled> {
        self.fire(Ok(Value::new(v)))
    }

    /// Fires the Deferred with a failure (anything that converts into one).
    ///
    /// # Errors
    /// As for [`callback`](Self::callback).
    #[track_caller]
    pub fn errback(&self, f: impl Into<Failure>) -> Result<(), AlreadyCalled> {
        self.fire(Err(f.into()))
    }

    /// Fires the Deferred with `r`: `callback` or `errback`.
    ///
    /// # Errors
    /// As for [`callback`](Self::callback).
    #[track_caller]
    pub fn resolve(&self, r: Result<T, Failure>) -> Result<(), AlreadyCalled> {
        self.fire(r.map(Value::new))
    }

    #[track_caller]
    fn fire(&self, r: Res) -> Result<(), AlreadyCalled> {
        run::fire(&self.node, r, Location::caller()).map_err(|(e, _)| e)
    }

    /// Fires the Deferred with `v` if it has not fired yet; `false` (and `v`
    /// dropped) if it had. For a producer that may legitimately finish twice,
    /// e.g. an answer then a close: the second is expected, not a bug.
    #[track_caller]
    pub fn callback_if_pending(&self, v: T) -> bool {
        self.fire(Ok(Value::new(v))).is_ok()
    }

    /// Fails the Deferred with `f` if it has not fired yet; `false` (and `f`
    /// dropped, not reported) if it had. See
    /// [`callback_if_pending`](Self::callback_if_pending).
    #[track_caller]
    pub fn errback_if_pending(&self, f: impl Into<Failure>) -> bool {
        self.fire(Err(f.into())).is_ok()
    }

    /// Fires the Deferred with `r` if it has not fired yet; `false` (and `r`
    /// dropped) if it had. See [`callback_if_pending`](Self::callback_if_pending).
    #[track_caller]
    pub fn resolve_if_pending(&self, r: Result<T, Failure>) -> bool {
        self.fire(r.map(Value::new)).is_ok()
    }

    /// Fires, handing back the result if the Deferred had already fired (for
    /// helpers that must not lose a value, e.g. a queue).
    #[track_caller]
    pub(crate) fn try_resolve(&self, r: Result<T, Failure>) -> Result<(), Result<T, Failure>> {
        run::fire(&self.node, r.map(Value::new), Location::caller())
            .map_err(|(_, r)| r.map(Value::take::<T>))
    }

    /// Whether the Deferred has fired.
    pub fn is_called(&self) -> bool {
        self.node.borrow().is_called()
    }

    /// Whether `a` and `b` fire the same Deferred.
    pub(crate) fn same(a: &Resolver<T>, b: &Resolver<T>) -> bool {
        Rc::ptr_eq(&*a.node, &*b.node)
    }
}
