//! A queued step, type-erased: what a `Link::Call` holds.
//!
//! Owns `Callback` and [`RunIn`], generic over the slot a step runs on (the
//! node's `Outcome`, see `node.rs`, which makes every `StepFn` a `RunIn`), so
//! that this file needs nothing from the node. `Callback`: a step moved to the heap (nowhere, for a step that
//! captures nothing) and a table of two functions made for its type, one that
//! runs it and one that drops it unrun. A `Box<dyn FnOnce>` did the same, but
//! its caller had to look up the size in the vtable after every call to know
//! whether to free the box; here the free is compiled into the step's own
//! function, where the size is known (nothing for a step that captures
//! nothing). Tests: below, and every chain test.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// A step that runs on a slot of type `O`: takes its input from it and
/// leaves its outcome there.
pub(crate) trait RunIn<O>: Sized {
    fn run_in(self, slot: &mut O);
}

/// One link's code: handles both halves of a (callback, errback) pair. It
/// takes its input from the slot (`Outcome::Done`) and leaves its outcome
/// there, so the result stays in one place from one callback to the next.
pub(crate) struct Callback<O: 'static> {
    /// A `Box<S>` turned into a pointer (dangling when `S` is zero-sized).
    step: NonNull<u8>,
    table: &'static Table<O>,
    /// Owns an `S`, which may be `!Send`: so is the callback.
    _owns: PhantomData<*mut u8>,
}

struct Table<O> {
    /// Runs the step on the slot and frees its box. `step` must come from
    /// `Callback::new` for the same `S`, and is used up.
    run: unsafe fn(NonNull<u8>, &mut O),
    /// Drops the step unrun and frees its box; same contract.
    drop: unsafe fn(NonNull<u8>),
}

trait HasTable<O> {
    const TABLE: Table<O>;
}

impl<O: 'static, S: RunIn<O> + 'static> HasTable<O> for S {
    const TABLE: Table<O> = Table {
        run: run_as::<O, S>,
        drop: drop_as::<S>,
    };
}

/// # Safety
/// `p` comes from `Box::<S>::into_raw` and is not used afterwards.
unsafe fn run_as<O, S: RunIn<O>>(p: NonNull<u8>, slot: &mut O) {
    // SAFETY: the caller guarantees `p` is an unused `Box<S>`; the step is
    // moved out (the box freed) before it runs, so a panic in it drops the
    // step once, as it would drop any moved-in closure.
    let step = *unsafe { Box::from_raw(p.as_ptr().cast::<S>()) };
    step.run_in(slot);
}

/// # Safety
/// As for [`run_as`].
unsafe fn drop_as<S>(p: NonNull<u8>) {
    // SAFETY: as in `run_as`.
    drop(unsafe { Box::from_raw(p.as_ptr().cast::<S>()) });
}

impl<O: 'static> Callback<O> {
    /// A callback that runs `step` (no allocation if `step` captures nothing).
    #[inline]
    pub(crate) fn new<S: RunIn<O> + 'static>(step: S) -> Callback<O> {
        let p = Box::into_raw(Box::new(step));
        Callback {
            // SAFETY: `Box::into_raw` never returns null.
            step: unsafe { NonNull::new_unchecked(p.cast::<u8>()) },
            table: &<S as HasTable<O>>::TABLE,
            _owns: PhantomData,
        }
    }

    /// Runs the step on the result in `slot`, leaving its outcome there.
    #[inline(always)]
    pub(crate) fn run(self, slot: &mut O) {
        let this = ManuallyDrop::new(self);
        // SAFETY: `step` was made by `new` for the type `table` was made for,
        // and is used up here once: `this` is not dropped (ManuallyDrop).
        unsafe { (this.table.run)(this.step, slot) }
    }
}

impl<O: 'static> Drop for Callback<O> {
    fn drop(&mut self) {
        // SAFETY: as in `run`: a callback is run or dropped, never both.
        unsafe { (self.table.drop)(self.step) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// The slot of these tests: a number, `None` once taken.
    type Outcome = Option<u64>;

    /// A step of these tests: a function of the slot's number.
    struct Step<F>(F);

    impl<F: FnOnce(u64) -> u64> RunIn<Outcome> for Step<F> {
        fn run_in(self, slot: &mut Outcome) {
            let x = slot.take().expect("an input");
            *slot = Some((self.0)(x));
        }
    }

    struct Counted(Rc<Cell<u32>>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    fn slot(n: u64) -> Outcome {
        Some(n)
    }

    fn value(o: Outcome) -> u64 {
        o.expect("an outcome")
    }

    /// A step that captures nothing, one that captures a word, one that
    /// captures more than a box's worth of words: each runs once, and what
    /// it captured is dropped once whether it ran or not.
    #[test]
    fn steps_of_every_size_run_or_drop_once() {
        let zst = Callback::new(Step(|x| x));
        let mut s = slot(1);
        zst.run(&mut s);
        assert_eq!(value(s), 1);

        let drops = Rc::new(Cell::new(0));
        let small = Counted(drops.clone());
        let f = Callback::new(Step(move |x| {
            let _keep = &small;
            x + 1
        }));
        let mut s = slot(1);
        f.run(&mut s);
        assert_eq!((value(s), drops.get()), (2, 1));

        let big = (Counted(drops.clone()), [3u64; 16]);
        let f = Callback::new(Step(move |x| {
            let all = &big;
            x + all.1[0]
        }));
        let mut s = slot(1);
        f.run(&mut s);
        assert_eq!((value(s), drops.get()), (4, 2));

        let unrun = Counted(drops.clone());
        drop(Callback::<Outcome>::new(Step(move |x| {
            let _keep = &unrun;
            x
        })));
        assert_eq!(drops.get(), 3);
    }

    /// A panicking step: what it captured is dropped once, by the unwinding.
    #[test]
    fn a_panicking_step_drops_what_it_captured_once() {
        let drops = Rc::new(Cell::new(0));
        let c = Counted(drops.clone());
        let f = Callback::new(Step(move |_x| -> u64 {
            let _keep = &c;
            panic!("kaput")
        }));
        let mut s = slot(1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.run(&mut s)));
        assert!(caught.is_err());
        assert_eq!(drops.get(), 1);
        // The input was taken; the slot owns nothing now.
        assert!(s.is_none());
    }
}
