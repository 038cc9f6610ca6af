//! The FIFO of a node's links, stored beside the node while it is short.
//!
//! Owns `Links` and `InlineLinks`, generic over what they queue (a node's
//! `Link`, see `node.rs`, which adds the link-aware reads and the in-place
//! push of a callback). A chain is typically filled, then
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

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;

/// Slots stored beside the node.
const INLINE_LINKS: usize = 2;
/// Slots of the first heap block.
const FIRST_SPILL: usize = 10;

/// A node's inline slots: written only through the `Links` they were given
/// to (see [`Links::use_inline`]).
pub(crate) struct InlineLinks<T>(UnsafeCell<[MaybeUninit<T>; INLINE_LINKS]>);

impl<T> InlineLinks<T> {
    pub(crate) fn new() -> InlineLinks<T> {
        InlineLinks(UnsafeCell::new(
            [const { MaybeUninit::uninit() }; INLINE_LINKS],
        ))
    }
}

/// A FIFO of links: slots `head..len` of the block are queued (initialised),
/// the others hold nothing.
pub(crate) struct Links<T> {
    /// Slot 0 of the block: `INLINE_LINKS` slots given by `use_inline` when
    /// `cap` is `INLINE_LINKS`, a heap block of `cap` slots when it is more
    /// (heap blocks are at least `FIRST_SPILL`); unset while `cap` is 0.
    base: *mut T,
    cap: u32,
    head: u32,
    len: u32,
}

impl<T> Links<T> {
    #[inline]
    pub(crate) fn new() -> Links<T> {
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
    pub(crate) unsafe fn use_inline(&mut self, inline: &InlineLinks<T>) {
        debug_assert_eq!(self.cap, 0);
        self.base = inline.0.get().cast::<T>();
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

    /// Whether the queue is empty and rewound to the start of its block.
    #[cfg(test)]
    pub(crate) fn is_rewound(&self) -> bool {
        (self.head, self.len) == (0, 0)
    }

    /// Points the block anew at `inline`, if it is the inline block: the
    /// owner of both is being dropped, with a `&mut` over them (see
    /// `NodeCell`'s drop).
    pub(crate) fn rebase(&mut self, inline: &mut InlineLinks<T>) {
        if self.cap as usize == INLINE_LINKS {
            self.base = inline.0.get_mut().as_mut_ptr().cast::<T>();
        }
    }

    /// Slot `i` of the block, which must be below `cap`.
    #[inline(always)]
    fn slot(&self, i: u32) -> *mut T {
        debug_assert!(i < self.cap);
        // SAFETY: `i < cap`, and `base` points to a block of `cap` slots
        // (the struct's invariant).
        unsafe { self.base.add(i as usize) }
    }

    /// Appends `link`.
    #[inline]
    pub(crate) fn push_back(&mut self, link: T) {
        // SAFETY: the slot is written at once.
        unsafe { self.vacant().write(link) };
    }

    /// The slot at the back, already counted as queued.
    ///
    /// # Safety
    /// The caller writes a link to it (without reading or dropping what is
    /// there) before anything else uses the queue.
    #[inline(always)]
    pub(crate) unsafe fn vacant(&mut self) -> *mut T {
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
            let layout = block_layout::<T>(cap);
            // SAFETY: `layout` has a non-zero size (`Links` is used only for
            // non-zero-sized `T`, checked below; `cap` is at least `FIRST_SPILL`).
            let block = unsafe { alloc(layout) }.cast::<T>();
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
            unsafe { dealloc(self.base.cast::<u8>(), block_layout::<T>(self.cap as usize)) };
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
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.head == self.len {
            return None;
        }
        // SAFETY: slot `head < len` is initialised; it is read once and
        // counted as read at once, so it is neither dropped twice nor leaked.
        let link = unsafe { self.slot(self.head).read() };
        self.advance();
        Some(link)
    }

    /// The link at the front, if any: for a reader that moves part of it out
    /// and then calls [`Links::forget_front`].
    #[inline(always)]
    pub(crate) fn front(&self) -> Option<*mut T> {
        (self.head != self.len).then(|| self.slot(self.head))
    }

    /// Counts the front link as read without dropping it.
    ///
    /// # Safety
    /// The queue is not empty, and what the front link owns was moved out
    /// (by the caller, through [`Links::front`]) or is meant to be leaked.
    #[inline(always)]
    pub(crate) unsafe fn forget_front(&mut self) {
        debug_assert!(self.head != self.len);
        self.advance();
    }

    /// Whether any queued link satisfies `f`.
    pub(crate) fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        (self.head..self.len).any(|i| {
            // SAFETY: slots `head..len` are initialised (`base` is set, as
            // `len > 0`).
            f(unsafe { &*self.base.add(i as usize) })
        })
    }

    /// Removes and returns every queued link, in order.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = T> {
        let mut out = Vec::with_capacity((self.len - self.head) as usize);
        while let Some(link) = self.pop_front() {
            out.push(link);
        }
        out.into_iter()
    }
}

/// The layout of a heap block of `cap` slots, for its allocation and its
/// free alike.
fn block_layout<T>(cap: usize) -> Layout {
    const { assert!(size_of::<T>() > 0, "Links of a zero-sized type") };
    Layout::array::<T>(cap).expect("link block size")
}

impl<T> Drop for Links<T> {
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

    /// A queued item that owns memory (as a link does).
    struct Link(Box<u64>);

    fn call(k: u64) -> Link {
        Link(Box::new(k))
    }

    fn tag(l: Link) -> u64 {
        *l.0
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
}
