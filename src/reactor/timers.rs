//! Timers: the heap of pending `call_later`s. Owns `TimerHeap` and `TimerId`.
//!
//! A binary min-heap ordered by `(deadline, seq)` — `seq` is a per-heap counter, so
//! equal deadlines leave in the order they were set — plus a slab of slots, one
//! per live timer, holding the timer's current heap position (libuv's design:
//! back-pointers make removal O(log n)). A cancelled timer leaves the heap *at
//! once*; asyncio instead marks it and waits for it to reach the head or for a
//! 50 % rebuild. So the heap always holds exactly the live timers.
//!
//! A due timer can be taken out of the heap but kept *reserved*
//! ([`TimerHeap::pop_due_reserved`]): its slot then records where it went (the
//! loop's ready queue), so that cancelling it before it runs still works.
//!
//! Memory: heap entries (which carry the payload) are exactly the live timers and
//! the heap's buffer is shrunk when it falls below a quarter of its capacity; the
//! slot table keeps one 24-byte slot per *peak* timer (slab keys cannot move).
//! Not here: reading the time (callers pass `now`). Tests: below, tests/loop_timers.rs.

use slab::Slab;
use std::time::Instant;

/// Identifies one timer in one heap; stale ids (fired or cancelled) are harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerId {
    key: u32,
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
enum Place {
    /// In the heap at this index.
    Heap(u32),
    /// Taken out as due, now at this sequence number of the ready queue.
    Ready(u64),
}

#[derive(Debug)]
struct Slot {
    seq: u64,
    place: Place,
}

struct Entry<T> {
    deadline: Instant,
    seq: u64,
    key: u32,
    payload: T,
}

impl<T> Entry<T> {
    #[inline]
    fn before(&self, other: &Entry<T>) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

/// What [`TimerHeap::cancel`] found.
pub(crate) enum Cancelled<T> {
    /// The timer was pending; here is its payload.
    Pending(T),
    /// The timer is due and waiting in the ready queue at this sequence number.
    Ready(u64),
    /// Unknown id: already fired, cancelled, or never existed.
    Gone,
}

pub(crate) struct TimerHeap<T> {
    heap: Vec<Entry<T>>,
    slots: Slab<Slot>,
    next_seq: u64,
}

impl<T> TimerHeap<T> {
    pub(crate) fn new() -> Self {
        TimerHeap {
            heap: Vec::new(),
            slots: Slab::new(),
            next_seq: 0,
        }
    }

    /// Number of timers still in the heap (not due yet, not cancelled).
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Capacity of the heap's buffer, for the memory-bound tests.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.heap.capacity()
    }

    /// Number of slots in use: heap entries plus due-but-reserved timers.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn insert(&mut self, deadline: Instant, payload: T) -> TimerId {
        self.insert_with(deadline, || payload)
    }

    /// [`insert`](Self::insert), with the payload made by `payload` once
    /// there is room for it: nothing that can panic or grow a buffer runs
    /// after it is made (see `Loop::call_at`).
    #[inline]
    pub(crate) fn insert_with(
        &mut self,
        deadline: Instant,
        payload: impl FnOnce() -> T,
    ) -> TimerId {
        if self.heap.len() == self.heap.capacity() {
            self.heap.reserve(1);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let pos = self.heap.len();
        let key = self.slots.insert(Slot {
            seq,
            place: Place::Heap(pos as u32),
        });
        let key = u32::try_from(key).expect("more than 2^32 live timers");
        self.heap.push(Entry {
            deadline,
            seq,
            key,
            payload: payload(),
        });
        self.sift_up(pos);
        TimerId { key, seq }
    }

    /// The earliest deadline, if any timer is pending.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.first().map(|e| e.deadline)
    }

    /// Whether `id` is still pending in the heap or reserved as due.
    pub(crate) fn contains(&self, id: TimerId) -> bool {
        self.slot(id).is_some()
    }

    /// The deadline of a timer still in the heap.
    pub(crate) fn deadline(&self, id: TimerId) -> Option<Instant> {
        match self.slot(id)?.place {
            Place::Heap(pos) => Some(self.heap[pos as usize].deadline),
            Place::Ready(_) => None,
        }
    }

    /// Removes the earliest timer if its deadline is `<= now`; its slot is freed.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        let (id, payload) = self.take_due(now)?;
        self.slots.remove(id.key as usize);
        Some((id, payload))
    }

    /// Removes the earliest timer if it is due, keeping its slot reserved until
    /// [`release`](Self::release); `place` says where the caller put it.
    pub(crate) fn pop_due_reserved(
        &mut self,
        now: Instant,
        place: impl FnOnce(&T) -> u64,
    ) -> Option<(TimerId, T)> {
        let (id, payload) = self.take_due(now)?;
        self.slots[id.key as usize].place = Place::Ready(place(&payload));
        Some((id, payload))
    }

    /// Frees the slot of a due timer taken with [`pop_due_reserved`](Self::pop_due_reserved).
    /// Does nothing to a timer still in the heap: freeing its slot would leave
    /// a heap entry whose back-pointer names nobody.
    pub(crate) fn release(&mut self, id: TimerId) {
        if let Some(Place::Ready(_)) = self.slot(id).map(|s| s.place) {
            self.slots.remove(id.key as usize);
        }
    }

    /// Cancels `id`: removes it from the heap in O(log n), or says where it went.
    pub(crate) fn cancel(&mut self, id: TimerId) -> Cancelled<T> {
        let Some(slot) = self.slot(id) else {
            return Cancelled::Gone;
        };
        match slot.place {
            Place::Ready(rseq) => {
                self.slots.remove(id.key as usize);
                Cancelled::Ready(rseq)
            }
            Place::Heap(pos) => {
                self.slots.remove(id.key as usize);
                let entry = self.remove_at(pos as usize);
                self.maybe_shrink();
                Cancelled::Pending(entry.payload)
            }
        }
    }

    /// Takes every pending and reserved timer out (for `close()`).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.slots.clear();
        let out = self.heap.drain(..).map(|e| e.payload).collect();
        self.heap.shrink_to_fit();
        out
    }

    /// Pending timers in heap order (not sorted), for diagnostics.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Instant, &T)> {
        self.heap.iter().map(|e| (e.deadline, &e.payload))
    }

    fn slot(&self, id: TimerId) -> Option<&Slot> {
        self.slots.get(id.key as usize).filter(|s| s.seq == id.seq)
    }

    fn take_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        if self.heap.first()?.deadline > now {
            return None;
        }
        let entry = self.remove_at(0);
        self.maybe_shrink();
        Some((
            TimerId {
                key: entry.key,
                seq: entry.seq,
            },
            entry.payload,
        ))
    }

    fn remove_at(&mut self, pos: usize) -> Entry<T> {
        let entry = self.heap.swap_remove(pos);
        if pos < self.heap.len() {
            self.set_place(pos);
            // The moved-in last element may belong above or below `pos`.
            if pos > 0 && self.heap[pos].before(&self.heap[(pos - 1) / 2]) {
                self.sift_up(pos);
            } else {
                self.sift_down(pos);
            }
        }
        entry
    }

    fn maybe_shrink(&mut self) {
        let cap = self.heap.capacity();
        if cap > 64 && self.heap.len() < cap / 4 {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }

    #[inline]
    fn set_place(&mut self, pos: usize) {
        let key = self.heap[pos].key as usize;
        self.slots[key].place = Place::Heap(pos as u32);
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.heap[pos].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(pos, parent);
            self.set_place(pos);
            pos = parent;
        }
        self.set_place(pos);
    }

    fn sift_down(&mut self, mut pos: usize) {
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
            self.set_place(pos);
            pos = child;
        }
        self.set_place(pos);
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        for (i, e) in self.heap.iter().enumerate() {
            if i > 0 {
                assert!(!e.before(&self.heap[(i - 1) / 2]), "heap order at {i}");
            }
            let slot = &self.slots[e.key as usize];
            assert_eq!(slot.seq, e.seq);
            assert!(matches!(slot.place, Place::Heap(p) if p as usize == i));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn equal_deadlines_leave_in_insertion_order() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        for i in 0..20 {
            h.insert(at(base, 5), i);
        }
        let out: Vec<_> = std::iter::from_fn(|| h.pop_due(at(base, 5)).map(|(_, v)| v)).collect();
        assert_eq!(out, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn a_timer_is_not_due_before_its_deadline() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        h.insert(at(base, 10), ());
        assert!(h.pop_due(at(base, 9)).is_none());
        assert!(h.pop_due(at(base, 10)).is_some());
    }

    #[test]
    fn cancel_removes_from_the_middle_and_keeps_order() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        let ids: Vec<_> = (0..100u64)
            .map(|i| h.insert(at(base, (i * 37) % 101), i))
            .collect();
        for id in ids.iter().step_by(3) {
            assert!(matches!(h.cancel(*id), Cancelled::Pending(_)));
            h.check_invariants();
        }
        assert!(matches!(h.cancel(ids[0]), Cancelled::Gone));
        let mut last = None;
        while let Some((_, v)) = h.pop_due(at(base, 1000)) {
            assert!(v % 3 != 0);
            let key = ((v * 37) % 101, v);
            assert!(last < Some(key));
            last = Some(key);
        }
        assert_eq!(h.reserved(), 0);
    }

    #[test]
    fn reserved_timers_can_be_cancelled_until_released() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        let id = h.insert(base, "a");
        let (got, _) = h.pop_due_reserved(base, |_| 42).unwrap();
        assert_eq!(got, id);
        assert!(h.contains(id));
        assert!(matches!(h.cancel(id), Cancelled::Ready(42)));
        assert!(!h.contains(id));
        let id = h.insert(base, "b");
        h.pop_due_reserved(base, |_| 7).unwrap();
        h.release(id);
        assert!(matches!(h.cancel(id), Cancelled::Gone));
    }

    #[test]
    fn release_leaves_a_pending_timer_alone() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        let early = h.insert(at(base, 1), "early");
        let late = h.insert(at(base, 2), "late");
        h.release(late);
        h.check_invariants();
        assert!(h.contains(late));
        assert_eq!(h.len(), 2);
        assert!(matches!(h.cancel(late), Cancelled::Pending("late")));
        h.release(early);
        assert!(matches!(h.pop_due(at(base, 5)), Some((id, "early")) if id == early));
        assert!(h.pop_due(at(base, 5)).is_none());
    }

    #[test]
    fn stale_ids_do_not_touch_reused_slots() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        let old = h.insert(base, 1);
        h.pop_due(base).unwrap();
        let new = h.insert(base, 2);
        assert!(matches!(h.cancel(old), Cancelled::Gone));
        assert!(h.contains(new));
    }

    #[test]
    fn heap_buffer_shrinks_after_mass_cancellation() {
        let base = Instant::now();
        let mut h = TimerHeap::new();
        let ids: Vec<_> = (0..10_000u64).map(|i| h.insert(at(base, i), ())).collect();
        for (i, id) in ids.iter().enumerate() {
            if i % 100 != 0 {
                let _ = h.cancel(*id);
            }
        }
        assert_eq!(h.len(), 100);
        assert!(h.capacity() <= 400, "capacity {}", h.capacity());
        h.check_invariants();
    }
}
