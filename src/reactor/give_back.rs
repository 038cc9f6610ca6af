//! Giving a burst's freed memory back to the system. Owns the thread's count
//! of bytes freed since the last trim.
//!
//! Buffers freed after a burst (a quiet connection's write buffer) go back
//! to the allocator, but glibc's malloc keeps freed pages resident for
//! reuse: past its first few mmap-sized frees its threshold rises, so large
//! buffers come from the heap and stay there. After at least `TRIM_AFTER`
//! bytes were freed, and then none for `QUIET`, a turn about to wait calls
//! `malloc_trim(0)`, which hands every free page of every arena back; a
//! loop that is busy does not pay for it, nor does one with work already
//! waiting (turn.rs: a poll that does not wait comes first). Why the quiet
//! time: a steady flow frees as it goes (the remote queue's blocks, drained
//! while their senders fill new ones); trimmed at every wait, its memory
//! went back to the system and was faulted in again at once: page faults
//! took most of a remote call's time. While a trim is
//! pending the turn waits at most until the quiet time is over, so an idle
//! loop still trims. Other allocators (jemalloc, musl's) decay on their
//! own: nothing is done there. Tests: below, tests/net_memory_burst.rs.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Bytes freed on this thread before a waiting turn trims the heap.
pub(crate) const TRIM_AFTER: usize = 1 << 20;

/// How long nothing may be freed before the trim: a burst is over.
pub(crate) const QUIET: Duration = Duration::from_millis(50);

thread_local! {
    static FREED: Cell<usize> = const { Cell::new(0) };
    /// `FREED` when a waiting turn last saw it change, and when.
    static SEEN: Cell<(usize, Option<Instant>)> = const { Cell::new((0, None)) };
}

/// Notes that a buffer of `bytes` was freed on this thread.
pub(crate) fn freed(bytes: usize) {
    let _ = FREED.try_with(|f| f.set(f.get().saturating_add(bytes)));
}

/// What a turn about to wait does about the freed memory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Before {
    /// Nothing to give back: wait as planned.
    Wait,
    /// Memory to give back once nothing was freed for this long more:
    /// wait at most that.
    WaitAtMost(Duration),
    /// Freed and quiet long enough: [`trim`], unless work is waiting.
    Trim,
}

/// Called by a turn about to wait; reads the clock only if memory is to
/// be given back.
pub(crate) fn before_waiting(now: impl FnOnce() -> Instant) -> Before {
    let freed = FREED.try_with(Cell::get).unwrap_or(0);
    if freed < TRIM_AFTER {
        return Before::Wait;
    }
    let now = now();
    let (seen, at) = SEEN.with(Cell::get);
    match at {
        Some(at) if seen == freed => match QUIET.checked_sub(now.saturating_duration_since(at)) {
            Some(left) if !left.is_zero() => Before::WaitAtMost(left),
            _ => Before::Trim,
        },
        _ => {
            SEEN.with(|s| s.set((freed, Some(now))));
            Before::WaitAtMost(QUIET)
        }
    }
}

/// Hands the free pages of every arena back, and starts the count again.
pub(crate) fn trim() {
    let _ = FREED.try_with(|f| f.set(0));
    let _ = SEEN.try_with(|s| s.set((0, None)));
    trim_heap();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only returns free memory of malloc's arenas to
    // the system; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow that frees between waits never trims; once the frees stop,
    /// the first wait past `QUIET` trims, and the waits before it are
    /// capped at what is left of it.
    #[test]
    fn trims_only_once_the_frees_have_been_quiet() {
        let t0 = Instant::now();
        assert_eq!(before_waiting(|| t0), Before::Wait);
        for i in 0..10u32 {
            freed(TRIM_AFTER);
            let at = t0 + QUIET * i;
            assert_eq!(
                before_waiting(|| at),
                Before::WaitAtMost(QUIET),
                "still freeing"
            );
        }
        let last = t0 + QUIET * 9;
        let half = QUIET / 2;
        assert_eq!(
            before_waiting(|| last + half),
            Before::WaitAtMost(QUIET - half)
        );
        assert_eq!(before_waiting(|| last + QUIET), Before::Trim);
        trim();
        assert_eq!(before_waiting(|| last + QUIET * 3), Before::Wait);
    }
}
