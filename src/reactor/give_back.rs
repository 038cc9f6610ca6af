//! Giving a burst's freed memory back to the system. Owns the thread's count
//! of bytes freed since the last trim.
//!
//! Buffers freed after a burst (a quiet connection's write buffer) go back
//! to the allocator, but glibc's malloc keeps freed pages resident for
//! reuse: past its first few mmap-sized frees its threshold rises, so large
//! buffers come from the heap and stay there. After at least `TRIM_AFTER`
//! bytes were freed, a turn about to wait calls `malloc_trim(0)`, which
//! hands every free page of every arena back; a loop that is busy does not
//! pay for it. Other allocators (jemalloc, musl's) decay on their own:
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

/// Called by a turn about to wait: trims the heap if enough was freed.
pub(crate) fn before_waiting() {
    let due = FREED
        .try_with(|f| {
            if f.get() >= TRIM_AFTER {
                f.set(0);
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if due {
        trim();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only returns free memory of malloc's arenas to
    // the system; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
