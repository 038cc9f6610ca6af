//! `Handle`: one call scheduled with `call_soon`, `call_later` or `call_at`,
//! and its state. Tests: tests/loop_callbacks.rs, tests/loop_timers.rs.

use super::Inner;
use crate::clock::Timer;
use crate::reactor::ready::Job;
use crate::timers::{self, TimerId};
use std::cell::Cell;
use std::fmt;
use std::rc::Weak;
use std::time::Instant;

/// The state of a [`Handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandleState {
    /// Waiting to run.
    Pending,
    /// Cancelled before it ran.
    Cancelled,
    /// Ran, or was dropped by `close()`.
    Done,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum HandleId {
    Ready(u64),
    Timer(TimerId, Instant),
}

/// One call scheduled with `call_soon`, `call_later` or `call_at`.
///
/// Dropping the handle does not cancel the call. It holds only a weak
/// reference to the loop.
pub struct Handle {
    pub(crate) lp: Weak<Inner>,
    pub(crate) id: HandleId,
    pub(crate) cancelled: Cell<bool>,
}

impl Handle {
    /// Cancels the call if it has not run; returns whether it was pending.
    /// Idempotent. A cancelled timer leaves the timer wheel at once (O(1)); the
    /// callback and what it captured are dropped before `cancel` returns.
    pub fn cancel(&self) -> bool {
        let Some(inner) = self.lp.upgrade() else {
            return false;
        };
        // What was cancelled is dropped here, outside every borrow (dropping
        // a closure may run arbitrary code). A pending timer's task is dropped
        // where it lies, not moved out first: copying it through temporaries
        // stalled on store-to-load forwarding.
        let cancel_ready = |seq| -> bool {
            let dropped: Option<Job> = inner.ready.borrow_mut().cancel(seq);
            dropped.is_some()
        };
        let was_pending = match self.id {
            HandleId::Ready(seq) => cancel_ready(seq),
            HandleId::Timer(id, _) => {
                let c = inner.timers.borrow_mut().cancel(id);
                match c {
                    timers::Removed::Pending(task) => {
                        drop(task);
                        true
                    }
                    timers::Removed::Ready(seq) => cancel_ready(seq),
                    timers::Removed::Gone => false,
                }
            }
        };
        if was_pending {
            self.cancelled.set(true);
        }
        was_pending
    }

    /// Whether the call is pending, cancelled, or done.
    pub fn state(&self) -> HandleState {
        if self.cancelled.get() {
            return HandleState::Cancelled;
        }
        let Some(inner) = self.lp.upgrade() else {
            return HandleState::Done;
        };
        let pending = match self.id {
            HandleId::Ready(seq) => inner.ready.borrow().is_pending(seq),
            HandleId::Timer(id, _) => inner.timers.borrow().contains(id),
        };
        if pending {
            HandleState::Pending
        } else {
            HandleState::Done
        }
    }

    /// Whether [`cancel`](Self::cancel) succeeded on this handle.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }

    /// The deadline, for `call_later`/`call_at` handles.
    pub fn deadline(&self) -> Option<Instant> {
        match self.id {
            HandleId::Timer(_, when) => Some(when),
            HandleId::Ready(_) => None,
        }
    }
}

impl Timer for Handle {
    fn cancel(&self) -> bool {
        Handle::cancel(self)
    }
    fn is_active(&self) -> bool {
        self.state() == HandleState::Pending
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("state", &self.state())
            .field("deadline", &self.deadline())
            .finish()
    }
}
