//! Timers: the pending `call_later`s of a loop and of a `ManualClock`. Owns
//! `TimerWheel`, `TimerId` and `later` (an instant plus a delay, saturating).
//! Below both `clock.rs` and `reactor/`, importing neither.
//!
//! A hierarchical timing wheel ([`wheel`], tokio's layout: 8 levels of 64
//! slots, ticks of about 1 ms) in front of a small exact heap ([`near`]). The
//! wheel files a timer in O(1) by its tick, and a cancel unlinks it in O(1):
//! the nodes a set-then-cancel touches are its own and its list neighbours,
//! not a heap path. When time reaches a slot its timers cascade down, and those
//! whose tick is reached go into the near heap, ordered by `(deadline, seq)`:
//! deadlines are compared exactly (in ns), so a timer is never due early, and
//! `seq` (a per-wheel counter) makes equal deadlines leave in the order they
//! were set, across ticks and cascades alike. A cancelled timer leaves at once
//! (asyncio instead marks it and waits for it to reach the head or a 50 %
//! rebuild), so the wheel always holds exactly the live timers.
//!
//! A pending timer moves ([`TimerWheel::reset`]) as cheaply as it cancels:
//! unlinked and filed again in place, with a new `seq`.
//!
//! A due timer can be taken out but kept *reserved*
//! ([`TimerWheel::pop_due_reserved`]): its node then records where it went (the
//! loop's ready queue), so that cancelling it before it runs still works.
//!
//! Memory: a 32-byte node per *peak* timer (the ids handed out name nodes, so
//! nodes cannot move; all are freed once none is in use); the payloads are a
//! dense vector of exactly the live timers, swap-removed, whose buffer
//! [`TimerWheel::trim`] (step 1 of each turn) shrinks below a quarter of its
//! capacity, as it does the near heap's. `next_deadline` is exact unless more
//! than [`SCAN`] timers share the earliest slot. Not here: reading the time
//! (callers pass `now`). Tests: tests.rs, wheel.rs, tests/timers_model.rs,
//! tests/loop_timers.rs.

mod near;
mod wheel;

use near::Near;
use std::time::{Duration, Instant};
use wheel::{Wheel, TICK_SHIFT};

/// How far [`later`] puts a deadline too far to represent: never, in practice.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `t + d`, for any `d`: a delay too long for an `Instant` (`Duration::MAX` is
/// the usual way to say "no limit") gives a deadline about 100 years out, not
/// a panic. Every deadline the crate computes from a caller's delay goes
/// through here.
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(FOREVER))
        .unwrap_or(t)
}

/// No node: the end of a list, or an empty free list.
const NONE: u32 = u32::MAX;
/// How long before its creation a wheel's origin (ns 0) lies: deadlines
/// earlier than that all count as the origin, so among them (all long due)
/// only `seq` orders.
const BEFORE: Duration = Duration::from_secs(366 * 24 * 3600);
/// [`TimerWheel::next_deadline`] reads at most this many timers of the
/// earliest slot for the exact minimum; past that it answers the slot's start.
const SCAN: usize = 32;

/// Identifies one timer in one wheel; stale ids (fired or cancelled) are harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerId {
    key: u32,
    seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Free,
    /// In the wheel's slot with this index.
    Wheel(u16),
    /// In the near heap, at position `prev`.
    Near,
    /// Taken out as due; `when` is now its ready-queue sequence number.
    Ready,
}

/// One timer (32 bytes). Its payload is in `TimerWheel::payloads`.
#[derive(Clone, Copy)]
struct Node {
    /// Deadline in ns since the origin; the ready-queue number once `Ready`.
    when: u64,
    seq: u64,
    /// Slot list links; `prev` is the position in the near heap while
    /// `Near`, `next` the free list's link while `Free`.
    prev: u32,
    next: u32,
    /// Index in `payloads` while pending.
    payload: u32,
    place: Place,
}

/// What [`TimerWheel::cancel`] found.
pub(crate) enum Removed<T> {
    /// The timer was pending; here is its payload.
    Pending(T),
    /// The timer is due and waiting in the ready queue at this sequence number.
    Ready(u64),
    /// Unknown id: already fired, cancelled, or never existed.
    Gone,
}

/// What [`TimerWheel::unlink`] found, for a cancel or a reset.
enum Unlinked {
    Pending(Node),
    Ready(u64),
    Gone,
}

/// What [`TimerWheel::reset`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The timer was pending and is filed again at its new deadline, with a
    /// new `seq` (as if set anew): its new id. The old one is stale.
    Moved(TimerId),
    /// The timer is due and waiting in the ready queue at this sequence
    /// number; its node is freed (as by a cancel), for the caller to take the
    /// task back and insert it anew.
    Ready(u64),
    /// Unknown id: already fired, cancelled, or never existed.
    Gone,
}

pub(crate) struct TimerWheel<T> {
    nodes: Vec<Node>,
    /// Head of the free nodes (linked by `next`).
    free: u32,
    /// Nodes in use: pending plus reserved.
    used: usize,
    /// The pending timers' payloads, and beside them (same index) their nodes.
    payloads: Vec<T>,
    owners: Vec<u32>,
    wheel: Wheel,
    near: Near,
    origin: Instant,
    next_seq: u64,
}

impl<T> TimerWheel<T> {
    /// A wheel whose callers never pass a `now` earlier than this `now`.
    pub(crate) fn new(now: Instant) -> Self {
        let origin = now.checked_sub(BEFORE).unwrap_or(now);
        let mut w = TimerWheel {
            nodes: Vec::new(),
            free: NONE,
            used: 0,
            payloads: Vec::new(),
            owners: Vec::new(),
            wheel: Wheel::new(0),
            near: Near::default(),
            origin,
            next_seq: 0,
        };
        w.wheel = Wheel::new(w.ns(now) >> TICK_SHIFT);
        w
    }

    /// `t` in ns since the origin (0 before it, saturating after 584 years).
    #[inline]
    fn ns(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.origin) {
            Some(d) => d
                .as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(d.subsec_nanos())),
            None => 0,
        }
    }

    fn instant(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }

    /// Number of timers pending (not due yet, not cancelled).
    pub(crate) fn len(&self) -> usize {
        self.payloads.len()
    }

    /// Capacity of the payload buffer, for the memory-bound tests.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.payloads.capacity()
    }

    /// Capacity of the near heap's buffer, for the memory-bound tests.
    #[cfg(test)]
    pub(crate) fn near_capacity(&self) -> usize {
        self.near.capacity()
    }

    /// Number of nodes in use: pending plus due-but-reserved timers.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        self.used
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
        if self.payloads.len() == self.payloads.capacity() {
            self.payloads.reserve(1);
        }
        if self.owners.len() == self.owners.capacity() {
            self.owners.reserve(1);
        }
        if self.free == NONE && self.nodes.len() == self.nodes.capacity() {
            self.nodes.reserve(1);
        }
        let when = self.ns(deadline);
        let tick = when >> TICK_SHIFT;
        let near = tick <= self.wheel.elapsed();
        if near {
            self.near.reserve_one();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = self.alloc(Node {
            when,
            seq,
            prev: NONE,
            next: NONE,
            payload: self.payloads.len() as u32,
            place: Place::Free,
        });
        if near {
            self.near.push(&mut self.nodes, key);
        } else {
            self.wheel.link(&mut self.nodes, key, tick);
        }
        self.owners.push(key);
        // Written straight into the room reserved above: `push` would build
        // the payload on the stack first (its capacity check may call out),
        // and copying it from there stalled on store-to-load forwarding.
        let len = self.payloads.len();
        self.payloads.spare_capacity_mut()[0].write(payload());
        // SAFETY: the element at `len` was just initialized (the line above
        // panics if there were no room), so the first `len + 1` are.
        unsafe { self.payloads.set_len(len + 1) };
        TimerId { key, seq }
    }

    /// The earliest deadline, if any timer is pending: exact, unless the
    /// earliest wheel slot holds more than [`SCAN`] timers, when it is that
    /// slot's start (earlier; a `pop_due` at that time cascades the slot,
    /// after which the answer is later).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        // Near timers are at or before `elapsed`, wheel timers after it.
        if let Some((when, _)) = self.near.first() {
            return Some(self.instant(when));
        }
        let (idx, start) = self.wheel.earliest()?;
        let (mut key, mut min) = (self.wheel.head(idx), u64::MAX);
        for _ in 0..SCAN {
            if key == NONE {
                break;
            }
            let node = &self.nodes[key as usize];
            min = min.min(node.when);
            key = node.next;
        }
        Some(self.instant(if key == NONE {
            min
        } else {
            start << TICK_SHIFT
        }))
    }

    /// Whether `id` is still pending or reserved as due.
    pub(crate) fn contains(&self, id: TimerId) -> bool {
        self.node(id).is_some()
    }

    /// The deadline of a timer still pending.
    pub(crate) fn deadline(&self, id: TimerId) -> Option<Instant> {
        let node = self.node(id)?;
        match node.place {
            Place::Wheel(_) | Place::Near => Some(self.instant(node.when)),
            Place::Ready | Place::Free => None,
        }
    }

    /// Removes the earliest timer if its deadline is `<= now`; its node is freed.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        let (key, payload) = self.take_due(now)?;
        let seq = self.nodes[key as usize].seq;
        self.free_node(key);
        Some((TimerId { key, seq }, payload))
    }

    /// Removes the earliest timer if it is due, keeping its node reserved until
    /// [`release`](Self::release); `place` says where the caller put it.
    pub(crate) fn pop_due_reserved(
        &mut self,
        now: Instant,
        place: impl FnOnce(&T) -> u64,
    ) -> Option<(TimerId, T)> {
        let (key, payload) = self.take_due(now)?;
        let node = &mut self.nodes[key as usize];
        node.place = Place::Ready;
        node.when = place(&payload);
        Some((TimerId { key, seq: node.seq }, payload))
    }

    /// Frees the node of a due timer taken with [`pop_due_reserved`](Self::pop_due_reserved).
    /// Does nothing to a pending timer: freeing its node would leave it linked.
    pub(crate) fn release(&mut self, id: TimerId) {
        if self.node(id).is_some_and(|n| n.place == Place::Ready) {
            self.free_node(id.key);
        }
    }

    /// Cancels `id`: unlinks it in O(1) (O(log n) in the near heap), or says
    /// where it went.
    #[inline]
    pub(crate) fn cancel(&mut self, id: TimerId) -> Removed<T> {
        let node = match self.unlink(id) {
            Unlinked::Pending(node) => node,
            Unlinked::Ready(seq) => return Removed::Ready(seq),
            Unlinked::Gone => return Removed::Gone,
        };
        let payload = self.take_payload(node.payload);
        self.free_node(id.key);
        Removed::Pending(payload)
    }

    /// Takes timer `id` out of the wheel or the near heap, for a cancel or
    /// a reset: its node (payload still in place) if it was pending; a due
    /// timer's node is freed, and its ready-queue sequence number returned.
    #[inline]
    fn unlink(&mut self, id: TimerId) -> Unlinked {
        let Some(&node) = self.node(id) else {
            return Unlinked::Gone;
        };
        match node.place {
            Place::Wheel(idx) => self.wheel.unlink(&mut self.nodes, id.key, idx),
            Place::Near => self.near.remove(&mut self.nodes, node.prev as usize),
            Place::Ready => {
                self.free_node(id.key);
                return Unlinked::Ready(node.when);
            }
            Place::Free => return Unlinked::Gone,
        }
        Unlinked::Pending(node)
    }

    /// Moves pending timer `id` to `deadline`, in place: unlinked as by a
    /// cancel (O(1) in the wheel, O(log n) in the near heap) and filed again
    /// as by an insert, its payload untouched. It takes a new `seq`, so among
    /// equal deadlines it leaves after the timers set before the reset.
    pub(crate) fn reset(&mut self, id: TimerId, deadline: Instant) -> Reset {
        match self.unlink(id) {
            Unlinked::Pending(_) => {}
            Unlinked::Ready(seq) => return Reset::Ready(seq),
            Unlinked::Gone => return Reset::Gone,
        }
        let when = self.ns(deadline);
        let tick = when >> TICK_SHIFT;
        let seq = self.next_seq;
        self.next_seq += 1;
        let n = &mut self.nodes[id.key as usize];
        n.when = when;
        n.seq = seq;
        if tick <= self.wheel.elapsed() {
            self.near.push(&mut self.nodes, id.key);
        } else {
            self.wheel.link(&mut self.nodes, id.key, tick);
        }
        Reset::Moved(TimerId { key: id.key, seq })
    }

    /// Gives back buffer space: the payload buffers and the near heap's
    /// shrink when below a quarter used, and the nodes go when none is in use.
    /// Cheap when there is nothing to do. The loop calls it once a turn (step
    /// 1), not per cancel: a burst of cancels then costs no reallocations, and
    /// a burst of sets after it no page faults, while the payloads themselves
    /// were dropped at each cancel.
    pub(crate) fn trim(&mut self) {
        let (len, cap) = (self.payloads.len(), self.payloads.capacity());
        if cap > 64 && len < cap / 4 {
            self.payloads.shrink_to(len * 2);
            self.owners.shrink_to(len * 2);
        }
        self.near.trim();
        if self.used == 0 && self.nodes.capacity() > 64 {
            self.nodes = Vec::new();
            self.free = NONE;
        }
    }

    /// Takes every pending and reserved timer out (for `close()`).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let out = std::mem::take(&mut self.payloads);
        self.owners = Vec::new();
        self.nodes = Vec::new();
        self.free = NONE;
        self.used = 0;
        self.wheel.clear();
        self.near.clear();
        out
    }

    /// Pending timers, in no particular order, for diagnostics.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Instant, &T)> {
        self.payloads
            .iter()
            .zip(&self.owners)
            .map(|(p, key)| (self.instant(self.nodes[*key as usize].when), p))
    }

    fn node(&self, id: TimerId) -> Option<&Node> {
        self.nodes
            .get(id.key as usize)
            .filter(|n| n.seq == id.seq && n.place != Place::Free)
    }

    #[inline]
    fn alloc(&mut self, node: Node) -> u32 {
        self.used += 1;
        if self.free != NONE {
            let key = self.free;
            let slot = &mut self.nodes[key as usize];
            self.free = slot.next;
            *slot = node;
            key
        } else {
            let key = u32::try_from(self.nodes.len())
                .ok()
                .filter(|&k| k != NONE)
                .expect("more than 2^32 - 1 timers");
            self.nodes.push(node);
            key
        }
    }

    #[inline]
    fn free_node(&mut self, key: u32) {
        let node = &mut self.nodes[key as usize];
        node.place = Place::Free;
        node.next = self.free;
        self.free = key;
        self.used -= 1;
    }

    /// Swap-removes payload `idx`, repointing the node of the one moved in.
    #[inline]
    fn take_payload(&mut self, idx: u32) -> T {
        let idx = idx as usize;
        let payload = self.payloads.swap_remove(idx);
        self.owners.swap_remove(idx);
        if let Some(&moved) = self.owners.get(idx) {
            self.nodes[moved as usize].payload = idx as u32;
        }
        payload
    }

    /// Moves the wheel to `now`, then takes the earliest near timer if due.
    fn take_due(&mut self, now: Instant) -> Option<(u32, T)> {
        let now = self.ns(now);
        if now >> TICK_SHIFT > self.wheel.elapsed() {
            let near = &mut self.near;
            self.wheel
                .advance(&mut self.nodes, now >> TICK_SHIFT, |nodes, key| {
                    near.push(nodes, key)
                });
        }
        let (when, key) = self.near.first()?;
        if when > now {
            return None;
        }
        self.near.remove(&mut self.nodes, 0);
        let payload = self.take_payload(self.nodes[key as usize].payload);
        Some((key, payload))
    }

    /// Checks lists, levels, heap order, back-pointers and the free list.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let filed = self.wheel.check(&self.nodes) + self.near.check(&self.nodes);
        assert_eq!(
            filed,
            self.payloads.len(),
            "filed timers are the pending ones"
        );
        assert_eq!(self.owners.len(), self.payloads.len());
        for (i, &key) in self.owners.iter().enumerate() {
            assert_eq!(
                self.nodes[key as usize].payload as usize, i,
                "payload of {key}"
            );
        }
        let in_use = self.nodes.iter().filter(|n| n.place != Place::Free).count();
        assert_eq!(in_use, self.used);
        let (mut free, mut key) = (0, self.free);
        while key != NONE {
            assert_eq!(self.nodes[key as usize].place, Place::Free);
            free += 1;
            key = self.nodes[key as usize].next;
        }
        assert_eq!(free + self.used, self.nodes.len(), "free list");
    }
}

#[cfg(test)]
mod tests;
