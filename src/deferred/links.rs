//! The FIFO of a node's links, stored in the node itself while it is short.
//!
//! Owns `Links`. A chain is typically filled, then drained, and only then
//! extended again, so the queue is a sequence of slots written at `len` and
//! read at `head`, rewound to the start whenever it runs empty: no wrapping
//! arithmetic on either side. Slots `0..INLINE_LINKS` are in the node (most
//! Deferreds never queue more than one or two links: one to a list, a
//! CONTINUE marker); later ones in a vector that reserves [`FIRST_SPILL`]
//! slots when first needed, then doubles, so a chain of up to 10 links
//! allocates once besides its node. If links keep arriving while the queue is
//! read (a callback that adds to its own chain), the read slots are reclaimed
//! once they are at least half, so the queue holds only the live links.
//! Tests: below; behaviour through tests/deferred_*.rs.

use super::node::{Callback, Link, StepFn};
use std::panic::Location;

/// Slots stored inside the node.
const INLINE_LINKS: usize = 2;
/// Room reserved by the first spill to the heap.
const FIRST_SPILL: usize = 8;

/// A FIFO of links: slots `head..len` are queued, slots before `head` read.
pub(crate) struct Links {
    head: u32,
    len: u32,
    inline: [Option<Link>; INLINE_LINKS],
    /// Slots `INLINE_LINKS..`; its length is `len - INLINE_LINKS` when `len`
    /// is past the inline slots, else it is empty.
    spilled: Vec<Option<Link>>,
}

impl Links {
    #[inline]
    pub(crate) fn new() -> Links {
        Links {
            head: 0,
            len: 0,
            inline: [const { None }; INLINE_LINKS],
            spilled: Vec::new(),
        }
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

    /// Slot `i`, which must be below `len`.
    #[inline(always)]
    fn slot(&mut self, i: u32) -> &mut Option<Link> {
        debug_assert!(i < self.len);
        let i = i as usize;
        match self.inline.get_mut(i) {
            Some(slot) => slot,
            // SAFETY: `i < len` (every caller reads at `head < len`), and
            // while `len` is past the inline slots `spilled` holds exactly
            // `len - INLINE_LINKS` slots (the struct's invariant), so
            // `i - INLINE_LINKS` is in bounds.
            None => unsafe { self.spilled.get_unchecked_mut(i - INLINE_LINKS) },
        }
    }

    /// Appends `link`.
    #[inline]
    pub(crate) fn push_back(&mut self, link: Link) {
        let slot = self.vacant();
        // SAFETY: `vacant` hands out a slot to write at once (see there).
        unsafe { slot.write(Some(link)) };
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
        unsafe { slot.write(Some(Link::Call(f, at))) };
    }

    /// The slot at the back, already counted as queued: the caller must
    /// write a link to it (without reading or dropping what is there) before
    /// anything else uses the queue.
    #[inline(always)]
    fn vacant(&mut self) -> *mut Option<Link> {
        if self.len as usize >= INLINE_LINKS && self.spilled.len() == self.spilled.capacity() {
            self.make_room();
        }
        let i = self.len as usize;
        self.len += 1;
        if i < INLINE_LINKS {
            // Inline slots from `len` on hold `None`, which owns nothing:
            // writing over it without a drop leaks nothing.
            debug_assert!(self.inline[i].is_none());
            &mut self.inline[i]
        } else {
            let j = self.spilled.len();
            debug_assert!(j < self.spilled.capacity());
            // SAFETY: `j < capacity` (room was made above), so slot `j` is
            // allocated; the caller initialises it before the vector is used
            // again. (`push` copies the link through the stack once more.)
            unsafe {
                self.spilled.set_len(j + 1);
                self.spilled.as_mut_ptr().add(j)
            }
        }
    }

    /// The spilled slots are full: reclaim the read slots if they are at least
    /// half of all (then there is room), else grow.
    #[cold]
    fn make_room(&mut self) {
        if self.head > 0 && self.head >= self.len / 2 {
            let queued: Vec<Link> = self.take_all().collect();
            for link in queued {
                self.push_back(link);
            }
            debug_assert!(
                (self.len as usize) < INLINE_LINKS || self.spilled.len() < self.spilled.capacity()
            );
        } else if self.spilled.capacity() == 0 {
            self.spilled = Vec::with_capacity(FIRST_SPILL);
        } else {
            self.spilled.reserve(self.spilled.capacity());
        }
    }

    /// Called after a read: rewinds the queue if it is now empty.
    #[inline(always)]
    fn advance(&mut self) {
        self.head += 1;
        if self.head == self.len {
            self.head = 0;
            self.len = 0;
            // SAFETY: every slot below `len` has been read, so every spilled
            // slot is `None`, which owns nothing: forgetting them leaks
            // nothing, and 0 is within capacity. (`clear` would visit each.)
            unsafe { self.spilled.set_len(0) };
        }
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Link> {
        if self.head == self.len {
            return None;
        }
        let link = self.slot(self.head).take();
        self.advance();
        link
    }

    /// Pops the next link if it is a user callback. Always inlined: it is
    /// the per-step read of the runner.
    #[inline(always)]
    pub(crate) fn pop_call(&mut self) -> Option<(Callback, &'static Location<'static>)> {
        if self.head == self.len {
            return None;
        }
        let slot = self.slot(self.head);
        let Some(Link::Call(f, at)) = slot else {
            return None;
        };
        // SAFETY: the callback is moved out of the slot exactly once, and
        // the slot is overwritten with `None` without dropping what it held
        // (`write` drops nothing), so the link is neither dropped twice nor
        // leaked. (`take` would copy the whole link out and test it again.)
        let out = unsafe {
            let out = (std::ptr::read(f), *at);
            std::ptr::write(slot, None);
            out
        };
        self.advance();
        Some(out)
    }

    /// Whether any queued link points to another node.
    pub(crate) fn has_node_links(&self) -> bool {
        self.inline
            .iter()
            .chain(&self.spilled)
            .flatten()
            .any(|l| matches!(l, Link::Continue(_) | Link::Forward(..)))
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
    fn fifo_across_the_inline_spill_and_growth() {
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
        assert!(q.spilled.capacity() <= FIRST_SPILL);
    }

    #[test]
    fn a_drained_queue_rewinds_and_keeps_its_buffer() {
        let mut q = Links::new();
        for k in 0..10 {
            q.push_back(call(k));
        }
        let cap = q.spilled.capacity();
        assert_eq!(cap, FIRST_SPILL);
        for _ in 0..10 {
            q.pop_front();
        }
        assert_eq!((q.head, q.len, q.spilled.len()), (0, 0, 0));
        assert_eq!(q.spilled.capacity(), cap);
    }

    /// The rewind forgets the read (`None`) spilled slots without visiting
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
        assert_eq!((q.head, q.len, q.spilled.len()), (0, 0, 0));
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
