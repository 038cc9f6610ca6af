//! A global allocator that counts, per thread (the tests of one binary run
//! in parallel, each on its own thread): the allocations and reallocations
//! made, and the bytes live (allocated by the thread, not yet freed by it)
//! with their peak. Not part of `util`: a test binary that wants it says
//! `#[path = "util/alloc_count.rs"] mod alloc_count;` and installs it with
//! `#[global_allocator] static ALLOC: alloc_count::Counting = alloc_count::Counting;`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    /// Allocations (and reallocations) made by this thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// (bytes live, their peak since `reset_peak`), by this thread's count.
    static LIVE: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

/// Allocations (and reallocations) this thread has made so far.
pub fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// Bytes this thread allocated and has not freed (what another thread
/// frees counts there: compare differences, on one thread).
pub fn live() -> isize {
    LIVE.with(|c| c.get().0)
}

/// Starts a new peak at what is live now, and returns that.
pub fn reset_peak() -> isize {
    LIVE.with(|c| {
        let (live, _) = c.get();
        c.set((live, live));
        live
    })
}

/// The most bytes live since the last `reset_peak`.
pub fn peak() -> isize {
    LIVE.with(|c| c.get().1)
}

fn note(count: bool, delta: isize) {
    if count {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }
    let _ = LIVE.try_with(|c| {
        let (live, peak) = c.get();
        c.set((live + delta, peak.max(live + delta)));
    });
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counters are statistics (const thread-locals, which do not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(true, l.size() as isize);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(false, -(l.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(true, new as isize - l.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}
