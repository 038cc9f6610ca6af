//! The hierarchical wheel: 8 levels of 64 slots over ticks of 2^20 ns (about
//! 1.05 ms), tokio's layout. A timer `t` ticks away from `elapsed` sits at the
//! level of the highest 6-bit digit in which `t` and `elapsed` differ, in the
//! slot of `t`'s digit there: level 0 slots are one tick wide, level 1 slots 64
//! ticks (67 ms), level 2 4,096 (4.3 s), ... level 7 covers all of `u64` ns.
//! Each slot is an intrusive doubly linked list through the nodes (O(1) link
//! and unlink), and a bitmap per level says which slots are occupied.
//!
//! Every timer in the wheel is strictly after `elapsed` (a tick); everything
//! at or before it is in the near heap. `advance` walks the occupied slots that
//! start by the target tick, earliest first, and re-files each timer: into the
//! near heap if its tick is now reached, else at a lower level (a *cascade*).
//! A slot only bounds its timers' ticks; the exact order is the near heap's.

use super::{Node, Place, NONE};

/// log2 of the tick in ns.
pub(super) const TICK_SHIFT: u32 = 20;
const LEVELS: usize = 8;
const BITS: u32 = 6;
const SLOTS: usize = 1 << BITS;
const DIGIT: u64 = SLOTS as u64 - 1;

pub(super) struct Wheel {
    /// Ticks up to here are done: every timer in a slot is after it.
    elapsed: u64,
    occupied: [u64; LEVELS],
    heads: [u32; LEVELS * SLOTS],
}

impl Wheel {
    pub(super) fn new(elapsed: u64) -> Self {
        Wheel {
            elapsed,
            occupied: [0; LEVELS],
            heads: [NONE; LEVELS * SLOTS],
        }
    }

    #[inline]
    pub(super) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Files node `key` (its tick is after `elapsed`) at the head of its slot.
    #[inline]
    pub(super) fn link(&mut self, nodes: &mut [Node], key: u32, tick: u64) {
        debug_assert!(tick > self.elapsed);
        let level = level_for(self.elapsed, tick);
        let slot = ((tick >> (BITS * level as u32)) & DIGIT) as usize;
        let idx = level * SLOTS + slot;
        let head = self.heads[idx];
        if head == NONE {
            self.occupied[level] |= 1 << slot;
        } else {
            nodes[head as usize].prev = key;
        }
        let node = &mut nodes[key as usize];
        node.prev = NONE;
        node.next = head;
        node.place = Place::Wheel(idx as u16);
        self.heads[idx] = key;
    }

    /// Takes node `key` out of slot `idx` (its `Place::Wheel`).
    #[inline]
    pub(super) fn unlink(&mut self, nodes: &mut [Node], key: u32, idx: u16) {
        let Node { prev, next, .. } = nodes[key as usize];
        if prev == NONE {
            let idx = idx as usize;
            self.heads[idx] = next;
            if next == NONE {
                self.occupied[idx / SLOTS] &= !(1 << (idx % SLOTS));
            }
        } else {
            nodes[prev as usize].next = next;
        }
        if next != NONE {
            nodes[next as usize].prev = prev;
        }
    }

    /// The earliest occupied slot: its index and the tick it starts at (no
    /// timer in the wheel is before that tick). Lower levels come first: a
    /// level's timers all fall before the next slot of the level above.
    pub(super) fn earliest(&self) -> Option<(usize, u64)> {
        for level in 0..LEVELS {
            let shift = BITS * level as u32;
            let digit = (self.elapsed >> shift) & DIGIT;
            // Occupied slots are always past `elapsed`'s own digit.
            let later = self.occupied[level] & (!0u64 << digit << 1);
            if later != 0 {
                let slot = u64::from(later.trailing_zeros());
                let window = self.elapsed & !((1u64 << (shift + BITS)) - 1);
                return Some((level * SLOTS + slot as usize, window | (slot << shift)));
            }
        }
        None
    }

    /// The first node of slot `idx`, then follow `next`.
    #[inline]
    pub(super) fn head(&self, idx: usize) -> u32 {
        self.heads[idx]
    }

    /// Moves time to tick `target`: every slot starting by then is emptied,
    /// each of its timers handed to `due` if its tick is reached, else filed
    /// again lower down. Each timer cascades at most once per level.
    pub(super) fn advance(
        &mut self,
        nodes: &mut [Node],
        target: u64,
        mut due: impl FnMut(&mut [Node], u32),
    ) {
        if target <= self.elapsed {
            return;
        }
        while let Some((idx, start)) = self.earliest() {
            if start > target {
                break;
            }
            self.elapsed = start;
            let mut key = self.heads[idx];
            self.heads[idx] = NONE;
            self.occupied[idx / SLOTS] &= !(1 << (idx % SLOTS));
            while key != NONE {
                let next = nodes[key as usize].next;
                let tick = nodes[key as usize].when >> TICK_SHIFT;
                if tick <= start {
                    due(nodes, key);
                } else {
                    self.link(nodes, key, tick);
                }
                key = next;
            }
        }
        self.elapsed = target;
    }

    /// Empties every slot (the nodes are dropped by the caller).
    pub(super) fn clear(&mut self) {
        self.occupied = [0; LEVELS];
        self.heads = [NONE; LEVELS * SLOTS];
    }

    /// Checks the lists, bitmaps and levels against the nodes; returns how
    /// many nodes the wheel holds.
    #[cfg(test)]
    pub(super) fn check(&self, nodes: &[Node]) -> usize {
        let mut n = 0;
        for (idx, &head) in self.heads.iter().enumerate() {
            let (level, slot) = (idx / SLOTS, idx % SLOTS);
            assert_eq!(
                self.occupied[level] >> slot & 1 == 1,
                head != NONE,
                "bitmap {idx}"
            );
            let (mut prev, mut key) = (NONE, head);
            while key != NONE {
                let node = &nodes[key as usize];
                assert_eq!(node.place, Place::Wheel(idx as u16), "place of {key}");
                assert_eq!(node.prev, prev, "prev of {key}");
                let tick = node.when >> TICK_SHIFT;
                assert!(
                    tick > self.elapsed,
                    "{key} at tick {tick} is not after {}",
                    self.elapsed
                );
                assert_eq!(level_for(self.elapsed, tick), level, "level of {key}");
                n += 1;
                (prev, key) = (key, node.next);
            }
        }
        n
    }
}

/// The level of a timer at tick `t` seen from `elapsed`: the highest 6-bit
/// digit in which they differ (0 if only the lowest does).
#[inline]
fn level_for(elapsed: u64, t: u64) -> usize {
    let differ = (elapsed ^ t) | DIGIT;
    ((63 - differ.leading_zeros()) / BITS) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_highest_differing_digit() {
        assert_eq!(level_for(0, 1), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(63, 64), 1);
        assert_eq!(level_for(64, 100), 0);
        assert_eq!(level_for(0, 1 << 12), 2);
        // The largest tick (u64::MAX ns) still has a level.
        assert_eq!(level_for(0, u64::MAX >> TICK_SHIFT), LEVELS - 1);
    }
}
