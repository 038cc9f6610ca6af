//! The FIFO of a node's links, stored in the node itself while it is short.
//!
//! Owns `Links`: a ring of [`INLINE_LINKS`] slots inside the node, and an
//! overflow queue on the heap for the links that arrive while the ring is full.
//! Every overflow link is younger than every ring link (nothing enters the ring
//! while the overflow holds links), so popping the ring first, then the
//! overflow, keeps FIFO order. The overflow starts with room for
//! [`FIRST_SPILL`] links, so a chain longer than the ring allocates once.
//! Tests: below; behaviour through tests/deferred_*.rs.

use super::node::Link;
use std::collections::VecDeque;

/// Links stored inside the node (a power of two: the ring wraps with a mask).
pub(crate) const INLINE_LINKS: usize = 4;
const MASK: usize = INLINE_LINKS - 1;
/// Room reserved by the first overflow.
const FIRST_SPILL: usize = 16;

/// A FIFO of links: a ring in the node, then an overflow queue.
pub(crate) struct Links {
    ring: [Option<Link>; INLINE_LINKS],
    head: u8,
    len: u8,
    overflow: VecDeque<Link>,
}

impl Links {
    #[inline]
    pub(crate) fn new() -> Links {
        Links {
            ring: [const { None }; INLINE_LINKS],
            head: 0,
            len: 0,
            overflow: VecDeque::new(),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && self.overflow.is_empty()
    }

    /// Number of queued links.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len as usize + self.overflow.len()
    }

    #[inline]
    pub(crate) fn push_back(&mut self, link: Link) {
        if (self.len as usize) < INLINE_LINKS && self.overflow.is_empty() {
            let i = (self.head as usize + self.len as usize) & MASK;
            self.ring[i] = Some(link);
            self.len += 1;
        } else {
            self.spill(link);
        }
    }

    #[cold]
    fn spill(&mut self, link: Link) {
        if self.overflow.capacity() == 0 {
            self.overflow.reserve_exact(FIRST_SPILL);
        }
        self.overflow.push_back(link);
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Link> {
        if self.len > 0 {
            let link = self.ring[self.head as usize].take();
            self.head = ((self.head as usize + 1) & MASK) as u8;
            self.len -= 1;
            link
        } else {
            self.overflow.pop_front()
        }
    }

    /// Whether any queued link points to another node.
    pub(crate) fn has_node_links(&self) -> bool {
        self.ring
            .iter()
            .flatten()
            .chain(&self.overflow)
            .any(|l| matches!(l, Link::Continue(_) | Link::Forward(..)))
    }

    /// Removes and returns every queued link, in order.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = Link> {
        let mut ring: Vec<Link> = Vec::with_capacity(self.len as usize);
        while self.len > 0 {
            ring.extend(self.pop_front());
        }
        ring.into_iter().chain(std::mem::take(&mut self.overflow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deferred::node::{Node, Outcome};
    use std::panic::Location;

    fn call(k: u64) -> Link {
        Link::Call(
            Box::new(move |_| Outcome::Done(Ok(super::super::node::Value::new(k)))),
            Location::caller(),
        )
    }

    fn tag(l: Link) -> u64 {
        match l {
            Link::Call(f, _) => match f(Ok(super::super::node::Value::new(()))) {
                Outcome::Done(Ok(v)) => v.take::<u64>(),
                _ => unreachable!(),
            },
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
    fn interleaved_push_and_pop_stays_in_the_ring() {
        // A callback that appends to its own chain while it runs: the queue
        // holds one or two links at a time and never needs the heap.
        let mut q = Links::new();
        q.push_back(call(0));
        for k in 1..10_000 {
            q.push_back(call(k));
            assert_eq!(tag(q.pop_front().unwrap()), k - 1);
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.overflow.capacity(), 0);
    }

    #[test]
    fn the_ring_refills_only_after_the_overflow_drains() {
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
