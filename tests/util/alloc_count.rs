//! A global allocator that counts, per thread, the allocations and
//! reallocations made (the tests of one binary run in parallel, each on its
//! own thread). Not part of `util`: a test binary that wants it says
//! `#[path = "util/alloc_count.rs"] mod alloc_count;` and installs it with
//! `#[global_allocator] static ALLOC: alloc_count::Counting = alloc_count::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct Counting;

thread_local! {
    /// Allocations (and reallocations) made by this thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations (and reallocations) this thread has made so far.
pub fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn note() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counter is a statistic (a const thread-local, which does not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}
