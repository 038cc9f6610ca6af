//! The FIFO of a node's links, stored beside the node while it is short.
//!
//! Owns `Links` and `InlineLinks`. A chain is typically filled, then
//! drained, and only then extended again, so the queue is a block of slots
//! written at `len` and read at `head`, rewound to the start whenever it runs
//! empty: no wrapping arithmetic on either side. The block is the node's
//! `INLINE_LINKS` slots (most Deferreds never queue more than one or two
//! links: one to a list, a CONTINUE marker) until more are needed; then a
//! heap block of [`FIRST_SPILL`] slots, which doubles when full, so a chain
//! of up to 10 links allocates once besides its node, and a node reused from
//! the pool keeps its block. If links keep arriving while the queue is read
//! (a callback that adds to its own chain), the read slots are reclaimed once
//! they are at least half, so the queue holds only the live links.
//!
//! Why a pointer to the block, even when it is the inline one: the push and
//! the pop of every step then find their slot with one load and an add. With
//! the inline slots and a spill vector side by side, each access chose
//! between the two (about ten instructions more per step of a 10-step chain,
//! with an `Option` tag written on every read). The inline slots are an
//! `UnsafeCell` next to the node's `RefCell`, in the same `Rc` (`NodeCell`),
//! not inside the node: a pointer into the node itself would be invalidated
//! by every `&mut` borrow of it (Miri says so), one beside it is not.
//! Tests: below; behaviour through tests/deferred_*.rs.

use super::node::{Callback, Link, StepFn};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::Location;
use std::ptr;

/// Slots stored beside the node.
const INLINE_LINKS: usize = 2;
/// Slots of the first heap block.
const FIRST_SPILL: usize = 10;

/// A node's inline slots: written only through the `Links` they were given
/// to (see [`Links::use_inline`]).
pub(crate) struct InlineLinks(UnsafeCell<[MaybeUninit<Link>; INLINE_LINKS]>);

impl InlineLinks {
    pub(crate) fn new() -> InlineLinks {
        InlineLinks(UnsafeCell::new(
            [const { MaybeUninit::uninit() }; INLINE_LINKS],
        ))
    }
}

/// A FIFO of links: slots `head..len` of the block are queued (initialised),
/// the others hold nothing.
pub(crate) struct Links {
    /// Slot 0 of the block: `INLINE_LINKS` slots given by `use_inline` when
    /// `cap` is `INLINE_LINKS`, a heap block of `cap` slots when it is more
    /// (heap blocks are at least `FIRST_SPILL`); unset while `cap` is 0.
    base: *mut Link,
    cap: u32,
    head: u32,
    len: u32,
}

impl Links {
    #[inline]
    pub(crate) fn new() -> Links {
        Links {
            base: ptr::NonNull::dangling().as_ptr(),
            cap: 0,
            head: 0,
            len: 0,
        }
    }

    /// Makes `inline` the block, until more slots are needed.
    ///
    /// # Safety
    /// Nothing was pushed yet, and `inline` outlives this `Links` and is
    /// used by nothing else (it sits beside it in its node's `NodeCell`).
    pub(crate) unsafe fn use_inline(&mut self, inline: &InlineLinks) {
        debug_assert_eq!(self.cap, 0);
        self.base = inline.0.get().cast::<Link>();
        self.cap = INLINE_LINKS as u32;
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.len
    }

    /// Number of queued links.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        (self.len - self.head) as usize
    }

    /// Points the block anew at `inline`, if it is the inline block: the
    /// owner of both is being dropped, with a `&mut` over them (see
    /// `NodeCell`'s drop).
    pub(crate) fn rebase(&mut self, inline: &mut InlineLinks) {
        if self.cap as usize == INLINE_LINKS {
            self.base = inline.0.get_mut().as_mut_ptr().cast::<Link>();
        }
    }

    /// Slot `i` of the block, which must be below `cap`.
    #[inline(always)]
    fn slot(&mut self, i: u32) -> *mut Link {
        debug_assert!(i < self.cap);
        // SAFETY: `i < cap`, and `base` points to a block of `cap` slots
        // (the struct's invariant).
        unsafe { self.base.add(i as usize) }
    }

    /// Appends `link`.
    #[inline]
    pub(crate) fn push_back(&mut self, link: Link) {
        let slot = self.vacant();
        // SAFETY: `vacant` hands out a slot to write at once (see there).
        unsafe { slot.write(link) };
    }

    /// Appends a callback link: `add_callback`'s path. The link is built
    /// after its slot is found, so it is written there from its parts: built
    /// on the stack first and copied, its 16-byte halves were read back
    /// before the 8-byte stores that wrote them had landed (a failed
    /// store-to-load forwarding, half the time of a chain's `add_callback`).
    /// The callback is made after the slot is found, too: made before, it
    /// was saved to the stack around the (rare) call that makes room.
    #[inline(always)]
    pub(crate) fn push_call(
        &mut self,
        step: impl StepFn + 'static,
        at: &'static Location<'static>,
    ) {
        let slot = self.vacant();
        let f = Callback::new(step);
        // SAFETY: `vacant` hands out a slot to write at once (see there).
        unsafe { slot.write(Link::Call(f, at)) };
    }

    /// The slot at the back, already counted as queued: the caller must
    /// write a link to it (without reading or dropping what is there) before
    /// anything else uses the queue.
    #[inline(always)]
    fn vacant(&mut self) -> *mut Link {
        if self.len == self.cap {
            self.make_room();
        }
        let i = self.len;
        self.len += 1;
        self.slot(i)
    }

    /// The block is full (or was never set): reclaim the read slots if they
    /// are at least half of it (then there is room), else move to a heap
    /// block twice its size (at least `FIRST_SPILL`).
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        let queued = (self.len - self.head) as usize;
        // The first queued slot (none is, if the block was never set).
        let from = self.base.wrapping_add(self.head as usize);
        if self.head > 0 && self.head >= self.len / 2 {
            // SAFETY: slots `head..len` are initialised and move to
            // `0..queued`, within the block (the ranges may overlap:
            // `copy` allows that); the slots they leave hold nothing.
            unsafe { ptr::copy(from, self.base, queued) };
        } else {
            let cap = (self.cap as usize * 2).max(FIRST_SPILL);
            let cap32 = u32::try_from(cap).expect("a Deferred with 2^31 links queued");
            let layout = block_layout(cap);
            // SAFETY: `layout` has a non-zero size (a `Link` is not
            // zero-sized, `cap` is at least `FIRST_SPILL`).
            let block = unsafe { alloc(layout) }.cast::<Link>();
            if block.is_null() {
                handle_alloc_error(layout);
            }
            // SAFETY: the queued slots (none if the block was never set)
            // move to the start of the new block, which has room for
            // `cap > queued` slots and does not overlap the old one; the old
            // block then holds nothing and is freed (if it was a heap block).
            unsafe {
                ptr::copy_nonoverlapping(from, block, queued);
                self.free_block();
            }
            self.base = block;
            self.cap = cap32;
        }
        self.head = 0;
        self.len = queued as u32;
    }

    /// Frees the heap block, if there is one; it must hold nothing.
    ///
    /// # Safety
    /// No slot of the block is initialised, and `base` is not used again
    /// before it is set anew.
    unsafe fn free_block(&mut self) {
        if self.cap as usize > INLINE_LINKS {
            // SAFETY: a block of `cap > INLINE_LINKS` slots was allocated
            // by `make_room` with `block_layout(cap)`.
            unsafe { dealloc(self.base.cast::<u8>(), block_layout(self.cap as usize)) };
        }
    }

    /// Called after a read: rewinds the queue if it is now empty.
    #[inline(always)]
    fn advance(&mut self) {
        self.head += 1;
        if self.head == self.len {
            self.head = 0;
            self.len = 0;
        }
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Link> {
        if self.head == self.len {
            return None;
        }
        // SAFETY: slot `head < len` is initialised; it is read once and
        // counted as read at once, so it is neither dropped twice nor leaked.
        let link = unsafe { self.slot(self.head).read() };
        self.advance();
        Some(link)
    }

    /// Pops the next link if it is a user callback. Always inlined: it is
    /// the per-step read of the runner.
    #[inline(always)]
    pub(crate) fn pop_call(&mut self) -> Option<(Callback, &'static Location<'static>)> {
        if self.head == self.len {
            return None;
        }
        let slot = self.slot(self.head);
        // SAFETY: slot `head < len` is initialised. Its callback is moved
        // out once and the slot counted as read at once, so the link is
        // neither dropped twice nor leaked (a `Call` owns nothing else).
        let out = unsafe {
            let Link::Call(f, at) = &*slot else {
                return None;
            };
            (ptr::read(f), *at)
        };
        self.advance();
        Some(out)
    }

    /// Whether any queued link points to another node.
    pub(crate) fn has_node_links(&self) -> bool {
        (self.head..self.len).any(|i| {
            // SAFETY: slots `head..len` are initialised (`base` is set, as
            // `len > 0`).
            let link = unsafe { &*self.base.add(i as usize) };
            matches!(link, Link::Continue(_) | Link::Forward(..))
        })
    }

    /// Removes and returns every queued link, in order.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = Link> {
        let mut out = Vec::with_capacity((self.len - self.head) as usize);
        while let Some(link) = self.pop_front() {
            out.push(link);
        }
        out.into_iter()
    }
}

/// The layout of a heap block of `cap` slots, for its allocation and its
/// free alike.
fn block_layout(cap: usize) -> Layout {
    Layout::array::<Link>(cap).expect("link block size")
}

impl Drop for Links {
    fn drop(&mut self) {
        while let Some(link) = self.pop_front() {
            drop(link);
        }
        // SAFETY: every slot was read above; `base` is not used again.
        unsafe { self.free_block() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::node::{Callback, Node, Outcome, Value};
    use std::panic::Location;

    fn call(k: u64) -> Link {
        Link::Call(
            Callback::new(move |_| Outcome::Done(Ok(Value::new(k)))),
            Location::caller(),
        )
    }

    fn tag(l: Link) -> u64 {
        let Link::Call(f, _) = l else { unreachable!() };
        let mut slot = Outcome::Done(Ok(Value::new(())));
        f.run(&mut slot);
        match slot {
            Outcome::Done(Ok(v)) => v.take::<u64>(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn fifo_across_block_growth() {
        let mut q = Links::new();
        for k in 0..40 {
            q.push_back(call(k));
        }
        assert_eq!(q.len(), 40);
        for k in 0..40 {
            assert_eq!(tag(q.pop_front().unwrap()), k);
        }
        assert!(q.is_empty());
        assert!(q.pop_front().is_none());
    }

    #[test]
    fn inline_slots_first_then_one_heap_block() {
        let inline = InlineLinks::new();
        let mut q = Links::new();
        // SAFETY: `inline` outlives `q` (declared before it) and nothing
        // else uses it.
        unsafe { q.use_inline(&inline) };
        let block = inline.0.get().cast::<Link>();
        q.push_back(call(0));
        q.push_back(call(1));
        assert_eq!((q.cap as usize, q.base), (INLINE_LINKS, block));
        assert_eq!(tag(q.pop_front().unwrap()), 0);
        // Full with a read slot at least half: reclaimed, still inline.
        q.push_back(call(2));
        assert_eq!((q.cap as usize, q.base), (INLINE_LINKS, block));
        for k in 3..11 {
            q.push_back(call(k));
        }
        assert_eq!(q.cap as usize, FIRST_SPILL);
        assert_ne!(q.base, block);
        for k in 1..11 {
            assert_eq!(tag(q.pop_front().unwrap()), k);
        }
        assert!(q.is_empty());
        // Links still queued inline are dropped with the queue.
        let mut q = Links::new();
        // SAFETY: as above; the first `q` is empty and never used again.
        unsafe { q.use_inline(&inline) };
        q.push_back(call(1));
        drop(q);
    }

    #[test]
    fn interleaved_push_and_pop_stays_bounded() {
        // A callback that appends to its own chain while it runs: the queue
        // holds one or two links at a time and must not grow with the total.
        let mut q = Links::new();
        q.push_back(call(0));
        for k in 1..10_000 {
            q.push_back(call(k));
            assert_eq!(tag(q.pop_front().unwrap()), k - 1);
        }
        assert_eq!(q.len(), 1);
        assert!(q.cap as usize <= FIRST_SPILL);
    }

    #[test]
    fn a_drained_queue_rewinds_and_keeps_its_buffer() {
        let mut q = Links::new();
        for k in 0..10 {
            q.push_back(call(k));
        }
        let (cap, block) = (q.cap, q.base);
        assert_eq!(cap as usize, FIRST_SPILL);
        for _ in 0..10 {
            q.pop_front();
        }
        assert_eq!((q.head, q.len), (0, 0));
        assert_eq!((q.cap, q.base), (cap, block));
    }

    /// The rewind forgets the read slots without visiting
    /// them: every link is still dropped exactly once, whether it was read,
    /// refilled after the rewind, or left queued when the queue is dropped.
    #[test]
    fn links_drop_once_across_rewinds() {
        use std::cell::Cell;
        use std::rc::Rc;
        struct Counted(Rc<Cell<u32>>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let drops = Rc::new(Cell::new(0));
        let counted = |d: &Rc<Cell<u32>>| {
            let c = Counted(d.clone());
            Link::Call(
                Callback::new(move |r| {
                    let _keep = &c;
                    Outcome::Done(r)
                }),
                Location::caller(),
            )
        };
        let mut q = Links::new();
        for _ in 0..10 {
            q.push_back(counted(&drops));
        }
        for k in 0..10 {
            let (f, _) = q.pop_call().expect("a callback");
            drop(f);
            assert_eq!(drops.get(), k + 1);
        }
        assert_eq!((q.head, q.len), (0, 0));
        for _ in 0..7 {
            q.push_back(counted(&drops));
        }
        q.pop_front();
        assert_eq!(drops.get(), 11);
        drop(q);
        assert_eq!(drops.get(), 17);
    }

    #[test]
    fn mixed_pushes_and_pops_keep_fifo_order() {
        let mut q = Links::new();
        let mut next = 0;
        let mut want = 0;
        // Push past the ring, pop a little, push more: order must hold.
        for round in 0..50 {
            for _ in 0..(round % 7 + 1) {
                q.push_back(call(next));
                next += 1;
            }
            for _ in 0..(round % 5 + 1) {
                match q.pop_front() {
                    Some(l) => {
                        assert_eq!(tag(l), want);
                        want += 1;
                    }
                    None => break,
                }
            }
        }
        while let Some(l) = q.pop_front() {
            assert_eq!(tag(l), want);
            want += 1;
        }
        assert_eq!(want, next);
        assert!(q.is_empty());
    }

    #[test]
    fn node_links_are_found_and_taken_in_order() {
        let mut q = Links::new();
        q.push_back(call(1));
        assert!(!q.has_node_links());
        let n = Node::new_ref(Location::caller());
        q.push_back(Link::Continue(n.clone()));
        q.push_back(call(2));
        assert!(q.has_node_links());
        assert_eq!(tag(q.pop_front().unwrap()), 1);
        let all: Vec<Link> = q.take_all().collect();
        assert_eq!(all.len(), 2);
        assert!(matches!(&all[0], Link::Continue(x) if std::rc::Rc::ptr_eq(x, &n)));
        assert!(q.is_empty());
    }
}
