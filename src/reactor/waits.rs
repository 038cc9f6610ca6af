//! Who waits for whom: the deadlock check of `Remote::call_blocking`. Owns
//! the process-wide waits-for list, touched only by blocking calls.
//!
//! A loop runs only on the thread that made it (`EventLoop` is `!Send`), so
//! a thread blocked in `call_blocking` stops every loop it owns. Each
//! blocking call records "this thread waits for the target loop's thread"
//! while it waits; before waiting it walks that list from the target's
//! thread, and finding its own thread there means the wait could never end:
//! the call fails at once instead. Tests: tests/threads_blocking_call.rs.

use crate::Error;
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, ThreadId};

/// `(waiting thread, thread it waits for)`, one entry per blocking call in
/// progress: a thread waits for one thing at a time, so it is a list of
/// edges with at most one out of each thread.
static WAITS: Mutex<Vec<(ThreadId, ThreadId)>> = Mutex::new(Vec::new());

fn waits() -> MutexGuard<'static, Vec<(ThreadId, ThreadId)>> {
    WAITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// What `call_blocking` returns when called on the target loop's own thread.
pub(crate) const OWN_THREAD: &str =
    "call_blocking on the loop's own thread: the loop cannot run while it waits";

/// What `call_blocking` returns when the wait would close a cycle.
pub(crate) const CYCLE: &str = "call_blocking would deadlock: the loop's thread is itself \
     blocked in a call that waits, directly or through other loops, for this thread";

/// The current thread's wait for `owner`'s loop, recorded until dropped.
pub(crate) struct Waiting(ThreadId);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = waits();
        if let Some(i) = w.iter().position(|(t, _)| *t == self.0) {
            w.swap_remove(i);
        }
    }
}

/// Records that this thread is about to wait for the loop owned by `owner`,
/// unless that wait could never end.
pub(crate) fn begin(owner: ThreadId) -> Result<Waiting, Error> {
    let me = thread::current().id();
    if owner == me {
        return Err(Error::InvalidInput(OWN_THREAD));
    }
    let mut w = waits();
    // Each thread has at most one edge out, so the walk is a path; bounded
    // by the list's length all the same.
    let mut at = owner;
    for _ in 0..=w.len() {
        if at == me {
            return Err(Error::InvalidInput(CYCLE));
        }
        match w.iter().find(|(t, _)| *t == at) {
            Some((_, next)) => at = *next,
            None => break,
        }
    }
    w.push((me, owner));
    Ok(Waiting(me))
}
