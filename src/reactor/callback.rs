//! Loop callbacks stored inline. Owns `LoopFn` (a type-erased `FnOnce(&Loop)`)
//! and `SendLoopFn` (the same, made only from `Send` closures, for the remote
//! queue).
//!
//! A closure of at most two words whose alignment is at most a word's is
//! stored in place; a larger or over-aligned one is boxed, and the box (one
//! word) is stored in place instead. So `call_soon` of a closure capturing an
//! `Rc` or two (or an `Rc` and a number, or a `Box<dyn _>`) allocates nothing
//! beyond its slot in the ready queue: boxing every closure cost a malloc and
//! a free per callback, about half of `call_soon` + run by instruction count.
//! Why two words and not the Deferred's three: each word is paid by every
//! queued task (written and read back once per callback; a task is 40 bytes,
//! it would be 48), while the closures this crate schedules itself (timers of
//! `defer_later` and `add_timeout`) capture one or two. The pattern is the
//! Deferred's `Value` (deferred/node.rs), with a call entry in the table.
//! Tests: below (drops, panics, fallbacks), tests/loop_*.rs (behaviour).

use super::Loop;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

/// One word of a stored closure; uninitialised past the closure's end (and
/// in its padding), and carrying the provenance of any pointer in it.
type Word = MaybeUninit<usize>;
type Buf = [Word; 2];

/// Whether a `G` can live in a `Buf`.
const fn fits<G>() -> bool {
    size_of::<G>() <= size_of::<Buf>() && align_of::<G>() <= align_of::<Buf>()
}

/// What to do with the closure of one type stored in a `Buf`.
struct VTable {
    /// Rebuilds the closure from its words and calls it. The words come by
    /// value, in registers: a callback taken out of the queue then need not
    /// be copied to memory (and its address taken) before it is called.
    call: unsafe fn(Word, Word, &Loop),
    /// Drops the closure in place.
    drop: unsafe fn(*mut Buf),
}

trait HasVTable {
    const VTABLE: VTable;
}

impl<G: FnOnce(&Loop) + 'static> HasVTable for G {
    const VTABLE: VTable = VTable {
        call: call_as::<G>,
        drop: drop_as::<G>,
    };
}

/// # Safety
/// The words must be those of a `Buf` holding a valid `G` (written by
/// `LoopFn::inline`), and that `G` must be neither used nor dropped
/// afterwards.
unsafe fn call_as<G: FnOnce(&Loop)>(w0: Word, w1: Word, lp: &Loop) {
    let buf: Buf = [w0, w1];
    // SAFETY: `buf` has the bytes (and pointer provenance) of the `Buf` a
    // `G` was written to, and the same size and alignment, which `inline`
    // checked fit a `G`. The caller guarantees no other copy of that `G` is
    // used or dropped, so moving it out here moves it exactly once. If `g`
    // panics, it is dropped by this frame's unwinding.
    let g = unsafe { buf.as_ptr().cast::<G>().read() };
    g(lp);
}

/// # Safety
/// `p` must hold a valid `G` that is neither used nor dropped afterwards.
unsafe fn drop_as<G>(p: *mut Buf) {
    // SAFETY: the caller guarantees `p` holds a valid, unused `G`.
    unsafe { std::ptr::drop_in_place(p.cast::<G>()) }
}

/// A callback the loop runs once, with the loop passed in. `!Send`, like
/// what it may capture.
pub(crate) struct LoopFn {
    buf: Buf,
    vtable: &'static VTable,
    /// The stored closure may be `!Send`/`!Sync`: so is its container.
    _not_send: PhantomData<*const ()>,
}

impl LoopFn {
    /// Stores `f` inline if it fits, else boxed (and the box inline).
    #[inline]
    pub(crate) fn new<F: FnOnce(&Loop) + 'static>(f: F) -> LoopFn {
        if fits::<F>() {
            LoopFn::inline(f)
        } else {
            LoopFn::inline(Box::new(f))
        }
    }

    #[inline]
    fn inline<G: FnOnce(&Loop) + 'static>(g: G) -> LoopFn {
        assert!(fits::<G>(), "LoopFn::inline of a closure that does not fit");
        let mut buf: Buf = [Word::uninit(); 2];
        // SAFETY: `buf` is large enough for a `G` and aligned for `usize`,
        // hence for `G` (asserted just above, at compile time in practice);
        // it is uninitialised, so writing leaks nothing. `vtable` records that
        // it now holds a `G`.
        unsafe { buf.as_mut_ptr().cast::<G>().write(g) };
        LoopFn {
            buf,
            vtable: &<G as HasVTable>::VTABLE,
            _not_send: PhantomData,
        }
    }

    /// Runs the callback, consuming it.
    #[inline]
    pub(crate) fn call(self, lp: &Loop) {
        let this = ManuallyDrop::new(self);
        let [w0, w1] = this.buf;
        // SAFETY: the words are those of `buf`, which holds a valid closure of
        // the type `vtable` was made for (written by `inline`); `this` is
        // forgotten (ManuallyDrop) and consumed, so that closure is neither
        // used nor dropped again: `call` moves it out exactly once.
        unsafe { (this.vtable.call)(w0, w1, lp) }
    }
}

impl Drop for LoopFn {
    fn drop(&mut self) {
        // SAFETY: `buf` holds a valid closure of the type `vtable` describes
        // (written by `inline`); one that was called is never dropped here
        // (`call` forgets it), so this drops it exactly once.
        unsafe { (self.vtable.drop)(&mut self.buf) }
    }
}

/// The table of a cancelled callback (a tombstone): nothing to call or drop.
/// A `static`, so that its address is unique.
static CANCELLED: VTable = VTable {
    call: |_, _, _| {},
    drop: |_| {},
};

impl LoopFn {
    /// A callback that does nothing: what a cancelled one is replaced with.
    pub(crate) fn cancelled() -> LoopFn {
        LoopFn {
            buf: [Word::uninit(); 2],
            vtable: &CANCELLED,
            _not_send: PhantomData,
        }
    }

    /// Whether this is [`LoopFn::cancelled`].
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        std::ptr::eq(self.vtable, &CANCELLED)
    }
}

/// A [`LoopFn`] made from a `Send` closure: it may be queued on another
/// thread and run on the loop's.
pub(crate) struct SendLoopFn(LoopFn);

// SAFETY: `SendLoopFn::new` is the only constructor and requires `F: Send`;
// the buffer holds that `F` or a `Box<F>` (also `Send`), and the vtable is
// plain function pointers. So moving the value to another thread moves only
// `Send` data. Loop-thread-only state is reached solely through the `&Loop`
// passed in when it runs, on the loop thread.
unsafe impl Send for SendLoopFn {}

impl SendLoopFn {
    #[inline]
    pub(crate) fn new<F: FnOnce(&Loop) + Send + 'static>(f: F) -> SendLoopFn {
        SendLoopFn(LoopFn::new(f))
    }

    /// The callback, to be queued and run on the loop thread.
    #[inline]
    pub(crate) fn into_local(self) -> LoopFn {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLoop;
    use std::cell::Cell;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::rc::Rc;

    /// Counts its drops in a shared cell.
    struct Tracked(Rc<Cell<u32>>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[repr(align(64))]
    struct OverAligned(u8);

    fn lp() -> EventLoop {
        EventLoop::new().unwrap()
    }

    #[test]
    fn small_closures_are_inline_large_and_over_aligned_ones_are_boxed() {
        let rc = Rc::new(1);
        let small = move |_: &Loop| drop(rc);
        assert!(LoopFn::is_inline_for_val(&small));
        let two = [1usize; 2];
        assert!(LoopFn::is_inline_for_val(&move |_: &Loop| {
            std::hint::black_box(two)
        }));
        let three = [1usize; 3];
        assert!(!LoopFn::is_inline_for_val(&move |_: &Loop| {
            std::hint::black_box(three)
        }));
        let aligned = OverAligned(1);
        assert!(!LoopFn::is_inline_for_val(&move |_: &Loop| {
            std::hint::black_box(aligned)
        }));
        assert!(LoopFn::is_inline_for::<Box<OverAligned>>());
        assert_eq!(size_of::<LoopFn>(), 3 * size_of::<usize>());
        assert_eq!(size_of::<Option<LoopFn>>(), size_of::<LoopFn>());
    }

    #[test]
    fn inline_and_boxed_closures_run_once_and_drop_their_captures_once() {
        let ev = lp();
        let drops = Rc::new(Cell::new(0));
        let ran = Rc::new(Cell::new(0u64));
        let (t, r) = (Tracked(drops.clone()), ran.clone());
        LoopFn::new(move |_: &Loop| {
            let _t = &t;
            r.set(r.get() + 1);
        })
        .call(&ev);
        assert_eq!((ran.get(), drops.get()), (1, 1));

        let (t, r, big) = (Tracked(drops.clone()), ran.clone(), [7u64; 8]);
        LoopFn::new(move |_: &Loop| {
            let _t = &t;
            r.set(r.get() + big.iter().sum::<u64>());
        })
        .call(&ev);
        assert_eq!((ran.get(), drops.get()), (57, 2));

        let (t, r, a) = (Tracked(drops.clone()), ran.clone(), OverAligned(3));
        LoopFn::new(move |_: &Loop| {
            let _t = &t;
            assert_eq!(&a as *const OverAligned as usize % 64, 0);
            r.set(r.get() + u64::from(a.0));
        })
        .call(&ev);
        assert_eq!((ran.get(), drops.get()), (60, 3));
    }

    #[test]
    fn a_closure_dropped_without_running_drops_its_captures_once() {
        let drops = Rc::new(Cell::new(0));
        let ran = Rc::new(Cell::new(false));
        let (t, r) = (Tracked(drops.clone()), ran.clone());
        drop(LoopFn::new(move |_: &Loop| {
            let _t = &t;
            r.set(true);
        }));
        assert_eq!(drops.get(), 1);
        let (t, big) = (Tracked(drops.clone()), [0u64; 16]);
        drop(LoopFn::new(move |_: &Loop| {
            let _t = (&t, big);
        }));
        assert_eq!(drops.get(), 2);
        let (t, a) = (Tracked(drops.clone()), OverAligned(0));
        drop(LoopFn::new(move |_: &Loop| {
            let _t = (&t, &a);
        }));
        assert_eq!(drops.get(), 3);
        drop(LoopFn::new(|_: &Loop| {})); // zero-sized, nothing to drop
        assert!(!ran.get());
    }

    #[test]
    fn send_and_sync_are_what_they_were() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<SendLoopFn>();
        send_sync::<crate::Remote>();
        // LoopFn, and so the loop, stay !Send, and Remote takes only Send
        // closures: the `compile_fail` doctests in remote.rs check both.
    }

    #[test]
    fn the_cancelled_tombstone_is_recognised_and_does_nothing() {
        let ev = lp();
        assert!(LoopFn::cancelled().is_cancelled());
        assert!(!LoopFn::new(|_: &Loop| {}).is_cancelled());
        let big = [0u64; 8];
        assert!(!LoopFn::new(move |_: &Loop| {
            std::hint::black_box(big);
        })
        .is_cancelled());
        LoopFn::cancelled().call(&ev);
        drop(LoopFn::cancelled());
    }

    #[test]
    fn a_panicking_closure_drops_its_captures_once() {
        let ev = lp();
        let drops = Rc::new(Cell::new(0));
        let t = Tracked(drops.clone());
        let f = LoopFn::new(move |_: &Loop| {
            let _t = &t;
            panic!("inline boom");
        });
        assert!(catch_unwind(AssertUnwindSafe(|| f.call(&ev))).is_err());
        assert_eq!(drops.get(), 1);
        let (t, big) = (Tracked(drops.clone()), [0u64; 16]);
        let f = LoopFn::new(move |_: &Loop| {
            let _t = (&t, big);
            panic!("boxed boom");
        });
        assert!(catch_unwind(AssertUnwindSafe(|| f.call(&ev))).is_err());
        assert_eq!(drops.get(), 2);
    }

    #[test]
    fn a_send_closure_crosses_threads_and_runs_on_the_loop() {
        let ev = lp();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (h, g) = (hits.clone(), hits.clone());
        let big = [1u32; 9];
        let fns = std::thread::spawn(move || {
            vec![
                SendLoopFn::new(move |_: &Loop| {
                    h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }),
                SendLoopFn::new(move |_: &Loop| {
                    g.fetch_add(big.iter().sum(), std::sync::atomic::Ordering::Relaxed);
                }),
            ]
        })
        .join()
        .unwrap();
        for f in fns {
            f.into_local().call(&ev);
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 10);
        assert_eq!(std::sync::Arc::strong_count(&hits), 1, "captures dropped");
    }

    impl LoopFn {
        fn is_inline_for<F>() -> bool {
            fits::<F>()
        }
        fn is_inline_for_val<F>(_: &F) -> bool {
            fits::<F>()
        }
    }
}
