//! Giving a burst's freed memory back to the system. Owns the thread's count
//! of bytes freed since the last trim.
//!
//! Buffers freed after a burst (a quiet connection's write buffer) go back
//! to the allocator, but glibc's malloc keeps freed pages resident for
//! reuse: past its first few mmap-sized frees its threshold rises, so large
//! buffers come from the heap and stay there. After at least `TRIM_AFTER`
//! bytes were freed, a turn about to wait calls `malloc_trim(0)`, which
//! hands every free page of every arena back; a loop that is busy does not
//! pay for it, nor does one with work already waiting (turn.rs: a poll that
//! does not wait comes first). Other allocators (jemalloc, musl's) decay on their own:
//! nothing is done there. Tests: tests/net_memory_burst.rs.

use std::cell::Cell;

/// Bytes freed on this thread before a waiting turn trims the heap.
pub(crate) const TRIM_AFTER: usize = 1 << 20;

thread_local! {
    static FREED: Cell<usize> = const { Cell::new(0) };
}

/// Notes that a buffer of `bytes` was freed on this thread.
pub(crate) fn freed(bytes: usize) {
    let _ = FREED.try_with(|f| f.set(f.get().saturating_add(bytes)));
}

/// Whether enough was freed on this thread for a turn about to wait to
/// [`trim`] the heap.
pub(crate) fn due() -> bool {
    FREED.try_with(|f| f.get() >= TRIM_AFTER).unwrap_or(false)
}

/// Hands the free pages of every arena back, and starts the count again.
pub(crate) fn trim() {
    let _ = FREED.try_with(|f| f.set(0));
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
