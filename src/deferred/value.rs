//! A type-erased value: what flows from one callback of a chain to the next.
//!
//! Owns `Value`. Small values are stored inline (no allocation per step), the
//! rest boxed. The crate's typed layer guarantees that every `Value` is taken
//! out as the type it was put in; a mismatch is a bug and panics with
//! "deferloop bug". Tests: below (Miri runs them clean).

use std::any::{Any, TypeId};
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

/// A type-erased value. The typed API guarantees `take::<T>` matches `new::<T>`.
///
/// Values of at most three words (and alignment at most 8) are stored inline,
/// the rest in a `Box<dyn Any>`: a chain of `u64` steps allocates nothing per
/// step (measured: boxing every step made a 10-step chain about 2.5× slower).
pub(crate) enum Value {
    Inline(Inline),
    Boxed(Box<dyn Any>),
}

const INLINE_WORDS: usize = 3;

/// A value of the type described by `meta`, stored in `buf`.
pub(crate) struct Inline {
    buf: MaybeUninit<[usize; INLINE_WORDS]>,
    meta: &'static Meta,
    /// The stored value may be `!Send`/`!Sync`: so is its container.
    _not_send: std::marker::PhantomData<*const ()>,
}

struct Meta {
    type_id: TypeId,
    drop: unsafe fn(*mut u8),
}

trait HasMeta {
    const META: Meta;
}

impl<T: 'static> HasMeta for T {
    const META: Meta = Meta {
        type_id: TypeId::of::<T>(),
        drop: drop_as::<T>,
    };
}

/// # Safety
/// `p` must point to a valid `T` that is not used (or dropped) afterwards.
unsafe fn drop_as<T>(p: *mut u8) {
    // SAFETY: the caller guarantees `p` points to a valid, unused `T`.
    unsafe { std::ptr::drop_in_place(p.cast::<T>()) }
}

/// Whether a `T` is stored inline (decided at compile time).
const fn fits<T>() -> bool {
    size_of::<T>() <= size_of::<[usize; INLINE_WORDS]>() && align_of::<T>() <= align_of::<usize>()
}

impl Value {
    #[inline(always)]
    pub(crate) fn new<T: 'static>(v: T) -> Value {
        if fits::<T>() {
            let mut buf = MaybeUninit::<[usize; INLINE_WORDS]>::uninit();
            // SAFETY: `buf` is large enough for a `T` and aligned for `usize`,
            // hence for `T` (`fits`); it is uninitialised, so writing does not
            // leak anything. `meta` records that it now holds a `T`.
            unsafe { buf.as_mut_ptr().cast::<T>().write(v) };
            Value::Inline(Inline {
                buf,
                meta: &<T as HasMeta>::META,
                _not_send: std::marker::PhantomData,
            })
        } else {
            Value::Boxed(Box::new(v))
        }
    }

    /// Always inlined: every step takes its input with it, and the check is
    /// one comparison of `Meta` addresses in the common case.
    #[inline(always)]
    pub(crate) fn take<T: 'static>(self) -> T {
        if !fits::<T>() {
            return self.take_boxed();
        }
        // Nothing is dropped from here on, even if the type check panics (a
        // bug: an inline value leaks). That keeps unwinding code away from
        // the hot path, which would otherwise hold the value in memory.
        let this = ManuallyDrop::new(self);
        match &*this {
            Value::Inline(inline) => {
                check_type::<T>(inline.meta);
                // SAFETY: `meta` says `buf` holds a `T` written by `new` (the
                // type ids match); `this` is never dropped (ManuallyDrop), so
                // the `T` is moved out exactly once.
                unsafe { inline.buf.as_ptr().cast::<T>().read() }
            }
            Value::Boxed(_) => {
                // A bug too; freeing the box first (no unwinding code: it
                // cannot panic) keeps the report from leaking it.
                drop(ManuallyDrop::into_inner(this));
                mismatch::<T>()
            }
        }
    }

    /// Moves the `T` out of an inline value, leaving a `()` in its place (a
    /// value that owns nothing, so a panic before [`put_in_place`] drops
    /// nothing twice); `None` if the value is not inline.
    ///
    /// [`put_in_place`]: Value::put_in_place
    #[inline(always)]
    pub(crate) fn take_in_place<T: 'static>(&mut self) -> Option<T> {
        if !fits::<T>() {
            return None;
        }
        let Value::Inline(inline) = self else {
            return None;
        };
        check_type::<T>(inline.meta);
        // SAFETY: `meta` says `buf` holds a `T` (checked above); it is read
        // out once, and `meta` then says `()`, whose drop does nothing, so
        // the moved-out `T` is never dropped from here.
        let v = unsafe { inline.buf.as_ptr().cast::<T>().read() };
        inline.meta = &<() as HasMeta>::META;
        Some(v)
    }

    /// Stores `u` in a value that owns nothing (left so by
    /// [`take_in_place`](Value::take_in_place)), in place.
    #[inline(always)]
    pub(crate) fn put_in_place<U: 'static>(&mut self, u: U) {
        debug_assert!(matches!(self, Value::Inline(i) if (i.meta.type_id) == TypeId::of::<()>()));
        // SAFETY: `self` owns nothing (a `()`, see above): writing over it
        // without a drop leaks nothing (an assignment would call the drop
        // through `meta` for nothing).
        unsafe { std::ptr::write(self, Value::new(u)) };
    }

    fn take_boxed<T: 'static>(self) -> T {
        match self {
            Value::Boxed(b) => match b.downcast::<T>() {
                Ok(b) => *b,
                Err(_) => mismatch::<T>(),
            },
            Value::Inline(_) => mismatch::<T>(),
        }
    }
}

/// Panics unless `meta` describes a `T`. The same `Meta` address is the fast
/// path; constants may be duplicated across codegen units, so it falls back
/// to the TypeId (a constant here: two compares, no call).
#[inline(always)]
fn check_type<T: 'static>(meta: &Meta) {
    if !std::ptr::eq(meta, &<T as HasMeta>::META) && meta.type_id != TypeId::of::<T>() {
        mismatch::<T>();
    }
}

#[cold]
#[inline(never)]
fn mismatch<T>() -> ! {
    panic!(
        "deferloop bug: Deferred value is not a {}",
        std::any::type_name::<T>()
    )
}

impl Drop for Inline {
    fn drop(&mut self) {
        // SAFETY: `buf` holds a valid value of the type `meta` describes (written
        // by `Value::new`); values moved out by `take` are never dropped here
        // (ManuallyDrop), so this drops it exactly once.
        unsafe { (self.meta.drop)(self.buf.as_mut_ptr().cast::<u8>()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::node::Res;
    use std::rc::Rc;

    #[test]
    #[should_panic(expected = "deferloop bug")]
    fn value_type_mismatch_is_a_clear_bug_inline() {
        let _ = Value::new(1u8).take::<u64>();
    }

    #[test]
    #[should_panic(expected = "deferloop bug")]
    fn value_type_mismatch_is_a_clear_bug_boxed() {
        let _ = Value::new([0u64; 8]).take::<u64>();
    }

    #[test]
    fn small_values_are_inline_and_round_trip() {
        assert!(matches!(Value::new(7u64), Value::Inline(_)));
        assert!(matches!(Value::new(String::from("x")), Value::Inline(_)));
        assert!(matches!(Value::new(()), Value::Inline(_)));
        assert_eq!(Value::new(7u64).take::<u64>(), 7);
        assert_eq!(Value::new(String::from("abc")).take::<String>(), "abc");
        assert_eq!(
            Value::new((1u8, 2u64, 3u32)).take::<(u8, u64, u32)>(),
            (1, 2, 3)
        );
        Value::new(()).take::<()>();
    }

    /// `take_in_place` leaves a value that owns nothing (so dropping it
    /// then drops nothing twice); `put_in_place` fills it again; a boxed
    /// value is left alone.
    #[test]
    fn values_taken_and_put_in_place_drop_once() {
        use std::cell::Cell;
        struct Counted(Rc<Cell<u32>>, u8);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let drops = Rc::new(Cell::new(0));
        let mut v = Value::new(Counted(drops.clone(), 1));
        let c = v.take_in_place::<Counted>().expect("inline");
        drop(v);
        assert_eq!(drops.get(), 0, "the emptied value owned nothing");
        let mut v = Value::new(Counted(drops.clone(), 2));
        let d = v.take_in_place::<Counted>().expect("inline");
        drop(d);
        assert_eq!(drops.get(), 1);
        v.put_in_place(Counted(c.0.clone(), c.1 + 10));
        drop(c);
        assert_eq!(drops.get(), 2);
        assert_eq!(v.take::<Counted>().1, 11);
        assert_eq!(drops.get(), 3);
        let mut big = Value::new([5u64; 4]);
        assert!(big.take_in_place::<[u64; 4]>().is_none());
        assert_eq!(big.take::<[u64; 4]>(), [5; 4]);
    }

    #[test]
    fn large_or_overaligned_values_are_boxed_and_round_trip() {
        #[repr(align(16))]
        #[derive(Debug, PartialEq)]
        struct A16(u8);
        assert!(matches!(Value::new(A16(1)), Value::Boxed(_)));
        assert_eq!(Value::new(A16(3)).take::<A16>(), A16(3));
        assert!(matches!(Value::new([1u64; 4]), Value::Boxed(_)));
        assert_eq!(Value::new([1u64; 4]).take::<[u64; 4]>(), [1; 4]);
    }

    #[test]
    fn inline_values_drop_once_whether_taken_or_not() {
        use std::cell::Cell;
        struct Counted(Rc<Cell<u32>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let drops = Rc::new(Cell::new(0));
        let v = Value::new(Counted(drops.clone()));
        assert!(matches!(v, Value::Inline(_)));
        drop(v); // dropped in place by Inline::drop
        assert_eq!(drops.get(), 1);
        let v = Value::new(Counted(drops.clone()));
        let c = v.take::<Counted>(); // moved out: not dropped by the Value
        assert_eq!(drops.get(), 1);
        drop(c);
        assert_eq!(drops.get(), 2);
        let r: Res = Ok(Value::new(Counted(drops.clone())));
        drop(r);
        assert_eq!(drops.get(), 3);
    }
}
