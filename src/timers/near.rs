//! The near heap: the timers whose tick the wheel has reached (due, or due
//! within the current tick), as a binary min-heap of `(deadline, seq, node)`
//! — exact order, `seq` breaking ties so equal deadlines leave FIFO. Each node
//! keeps its heap position (in `prev`), so a cancel removes it at once. It
//! holds what one tick brings, plus timers set for a time already reached.

use super::{Node, Place};

#[derive(Clone, Copy)]
struct Entry {
    when: u64,
    seq: u64,
    key: u32,
}

impl Entry {
    #[inline]
    fn before(&self, other: &Entry) -> bool {
        (self.when, self.seq) < (other.when, other.seq)
    }
}

#[derive(Default)]
pub(super) struct Near {
    heap: Vec<Entry>,
}

impl Near {
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.heap.capacity()
    }

    /// Room for one more, so that a `push` right after it does not allocate.
    #[inline]
    pub(super) fn reserve_one(&mut self) {
        if self.heap.len() == self.heap.capacity() {
            self.heap.reserve(1);
        }
    }

    /// The earliest: its deadline and node.
    #[inline]
    pub(super) fn first(&self) -> Option<(u64, u32)> {
        self.heap.first().map(|e| (e.when, e.key))
    }

    pub(super) fn push(&mut self, nodes: &mut [Node], key: u32) {
        let node = &mut nodes[key as usize];
        node.place = Place::Near;
        let pos = self.heap.len();
        self.heap.push(Entry {
            when: node.when,
            seq: node.seq,
            key,
        });
        self.sift_up(nodes, pos);
    }

    /// Removes the entry at `pos` (a node's `prev` while `Place::Near`).
    pub(super) fn remove(&mut self, nodes: &mut [Node], pos: usize) {
        self.heap.swap_remove(pos);
        if pos < self.heap.len() {
            // The moved-in last entry may belong above or below `pos`.
            if pos > 0 && self.heap[pos].before(&self.heap[(pos - 1) / 2]) {
                self.sift_up(nodes, pos);
            } else {
                self.sift_down(nodes, pos);
            }
        }
    }

    /// Shrinks the buffer when below a quarter used.
    pub(super) fn trim(&mut self) {
        let cap = self.heap.capacity();
        if cap > 64 && self.heap.len() < cap / 4 {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }

    pub(super) fn clear(&mut self) {
        self.heap = Vec::new();
    }

    #[inline]
    fn set_pos(&self, nodes: &mut [Node], pos: usize) {
        nodes[self.heap[pos].key as usize].prev = pos as u32;
    }

    fn sift_up(&mut self, nodes: &mut [Node], mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.heap[pos].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(pos, parent);
            self.set_pos(nodes, pos);
            pos = parent;
        }
        self.set_pos(nodes, pos);
    }

    fn sift_down(&mut self, nodes: &mut [Node], mut pos: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            if !self.heap[child].before(&self.heap[pos]) {
                break;
            }
            self.heap.swap(pos, child);
            self.set_pos(nodes, pos);
            pos = child;
        }
        self.set_pos(nodes, pos);
    }

    /// Checks heap order and back-pointers; returns the number of entries.
    #[cfg(test)]
    pub(super) fn check(&self, nodes: &[Node]) -> usize {
        for (i, e) in self.heap.iter().enumerate() {
            if i > 0 {
                assert!(!e.before(&self.heap[(i - 1) / 2]), "near heap order at {i}");
            }
            let node = &nodes[e.key as usize];
            assert_eq!(node.place, Place::Near);
            assert_eq!(node.prev as usize, i);
            assert_eq!((node.when, node.seq), (e.when, e.seq));
        }
        self.heap.len()
    }
}
