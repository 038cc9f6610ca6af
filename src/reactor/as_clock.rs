//! The loop as a [`Clock`]: its time and its timers, for the helpers that
//! take a clock (`add_timeout`, `defer_later`, `LoopingCall`); the timer is
//! a [`Handle`]. The loop, a reference to it, and the [`EventLoop`] that owns
//! it are each an [`AsClock`]. Tests: tests/clock_helpers_accept_event_loop.rs.

use super::{EventLoop, Handle, Loop};
use crate::clock::{AsClock, Clock};
use crate::Error;
use std::time::{Duration, Instant};

impl Clock for Loop {
    type Timer = Handle;

    fn now(&self) -> Instant {
        self.time()
    }

    #[track_caller]
    fn call_later<F: FnOnce() + 'static>(&self, delay: Duration, f: F) -> Result<Handle, Error> {
        Loop::call_later(self, delay, move |_| f())
    }
}

impl AsClock for EventLoop {
    type Clock = Loop;

    fn as_clock(&self) -> &Loop {
        self
    }
}

impl AsClock for &EventLoop {
    type Clock = Loop;

    fn as_clock(&self) -> &Loop {
        self
    }
}

impl AsClock for &Loop {
    type Clock = Loop;

    fn as_clock(&self) -> &Loop {
        self
    }
}
