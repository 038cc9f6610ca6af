//! One turn of the loop: the six steps, in order, one line each.
//!
//! ```text
//! [1 cancelled timers] → [2 timeout] → [3 poll] → [4 I/O → ready] → [5 due timers → ready] → [6 run snapshot] ↺
//! ```
//! Order within a turn is therefore: callbacks queued before the turn, then I/O
//! callbacks (and remote calls), then due timers. Anything scheduled during
//! step 6 waits for the next turn, whose poll then has a zero timeout.
//! Tests: tests/loop_order.rs, tests/loop_timers.rs.

use super::decay::DECAY;
use super::give_back;
use super::key::SourceKey;
use super::published::{Published, LIST_AT_MOST, PUBLISH_EVERY};
use super::ready::{Job, Task};
use super::source::Ready;
use super::ExceptionContext;
use super::{Inner, Loop, MAX_TIMEOUT, WAKER};
use crate::context::Context;
use crate::{Error, Failure};
use std::cell::Cell;
use std::io;
use std::panic::{self, AssertUnwindSafe, Location};
use std::time::{Duration, Instant};

impl Inner {
    /// One turn. `max_wait` caps step 2 for a host that embeds the loop
    /// (embed.rs); `run()` passes `None`.
    pub(crate) fn turn(&self, lp: &Loop, max_wait: Option<Duration>) -> Result<(), Error> {
        // 1. Cancelled timers: none to drop (`Handle::cancel` took them out of
        //    the wheel at once, where asyncio drops them lazily here); only
        //    the buffer space they left is given back (timers/mod.rs), and
        //    that of a burst of callbacks or remote calls.
        self.trim();
        let timeout = self.poll_timeout(max_wait); // 2. 0 | next deadline (≤ 24 h) | block; ≤ 100 ms after a burst, ≤ max_wait
        self.poll(timeout)?; //                 3. the only place the loop sleeps; a burst's freed pages go back first
        self.queue_io_callbacks(); //           4. ready sources and remote calls → ready queue
        self.queue_due_timers(); //             5. deadline <= now, FIFO among equals
        self.run_ready(lp); //                  6. only what was queued when this step began
        self.turns.set(self.turns.get() + 1);
        Ok(())
    }

    /// Step 1: gives back the buffer space of cancelled timers, and of a
    /// past burst in the ready queue, kept at a few times what recent turns
    /// used. (The remote queue frees its blocks as it drains them.)
    fn trim(&self) {
        self.timers.borrow_mut().trim();
        self.ready.borrow_mut().trim(|| self.now());
    }

    /// Whether a buffer holds a past burst's room that a later step 1 may
    /// give back (decay.rs).
    fn holds_burst(&self) -> bool {
        self.ready.borrow().holds_burst()
    }

    /// Step 2: zero if there is work, a pending stop, events the last poll
    /// had no room for, or a remote call its sender was still writing; else until the earliest timer (capped at 24 h;
    /// with manual time, none: no timer comes due by waiting); else `None`
    /// (block). At most `DECAY` while a buffer holds a past burst's room, so
    /// an idle loop gives it back too (not with manual time: waiting moves
    /// no clock). Never more than `max_wait`, if given.
    pub(crate) fn poll_timeout(&self, max_wait: Option<Duration>) -> Option<Duration> {
        let own = if self.stopping.get()
            || self.events_full.get()
            || self.remote_behind.get()
            || !self.ready.borrow().is_empty()
        {
            Some(Duration::ZERO)
        } else {
            self.timers.borrow().next_deadline().and_then(|next| {
                let wait = next.saturating_duration_since(self.now());
                if self.manual.is_some() && !wait.is_zero() {
                    return None;
                }
                Some(wait.min(MAX_TIMEOUT))
            })
        };
        let own = if self.manual.is_none() && self.holds_burst() {
            Some(own.map_or(DECAY, |t| t.min(DECAY)))
        } else {
            own
        };
        match (own, max_wait) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        }
    }

    /// Step 3. mio rounds a sub-millisecond timeout *up*, so a timer is never
    /// polled for in a busy loop; an interrupted poll counts as no events.
    ///
    /// Before a wait, a burst's freed pages go back to the system once the
    /// frees have stopped (give_back.rs; until then the wait is capped) —
    /// and only if a poll that does not wait finds nothing: after a large
    /// burst the trim takes milliseconds, which work already waiting (a
    /// remote call's wake, a readable socket) must not wait for. The pages
    /// then go back before a later wait.
    fn poll(&self, timeout: Option<Duration>) -> Result<(), Error> {
        if timeout == Some(Duration::ZERO) {
            return self.poll_once(timeout);
        }
        match give_back::before_waiting(Instant::now) {
            give_back::Before::Wait => self.poll_once(timeout),
            give_back::Before::WaitAtMost(most) => {
                self.poll_once(Some(timeout.map_or(most, |t| t.min(most))))
            }
            give_back::Before::Trim => {
                self.poll_once(Some(Duration::ZERO))?;
                if !self.events.borrow().is_empty() {
                    return Ok(());
                }
                give_back::trim();
                self.poll_once(timeout)
            }
        }
    }

    fn poll_once(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let mut events = self.events.borrow_mut();
        match self.poll.borrow_mut().poll(&mut events, timeout) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                events.clear();
                self.events_full.set(false);
                Ok(())
            }
            Err(e) => Err(Error::Io(e)),
        }
    }

    /// Step 4: one dispatch task per ready source, then the remote calls.
    fn queue_io_callbacks(&self) {
        let events = self.events.borrow();
        let mut io = self.io.borrow_mut();
        let mut ready = self.ready.borrow_mut();
        let mut n = 0;
        for ev in events.iter() {
            n += 1;
            if ev.token() == WAKER {
                continue;
            }
            let key = SourceKey::from_token(ev.token());
            if let Some(loc) = io.note(key, Ready::from_event(ev)) {
                ready.push(Task {
                    job: Job::Io(key),
                    ctx: Context::default(),
                    loc,
                });
            }
        }
        // A full buffer: the selector may hold more (the next step 2 is 0).
        self.events_full.set(n == events.capacity());
        drop((io, events));
        // Remote calls: checked every turn (one atomic load), taken in only
        // if some thread queued one since the last time. Those queued so far
        // are noted, and one task runs them in step 6 straight from the
        // remote queue (`run_remote_calls`); timed or watched, each gets a
        // task of its own instead, as every other callback does.
        if self.shared.wake_pending() || self.remote_behind.get() {
            self.shared.mark_jobs();
            if self.debug.get() || self.instrumented.get() {
                let behind = self.shared.take_jobs(|job| {
                    ready.push(Task {
                        job: Job::Call(job.f.into_local()),
                        ctx: Context::default(),
                        loc: job.loc,
                    });
                });
                self.remote_behind.set(behind);
            } else {
                ready.push(Task {
                    job: Job::Io(SourceKey::REMOTE_CALLS),
                    ctx: Context::default(),
                    loc: Location::caller(),
                });
            }
        }
    }

    /// Step 6's remote calls: those step 4 noted, in order, each run as it
    /// is taken from its slot in the remote queue (not copied to the ready
    /// queue first: about a hundred instructions a call less). One
    /// `catch_unwind` serves the whole batch: a panicking call is reported
    /// with its location, as a callback's panic is, and the batch goes on
    /// from the next call (the queue's head had moved past it), so a panic
    /// loses none of the others. Each call is counted and leaves the empty
    /// context behind it, as `run_contained` does for a callback.
    pub(super) fn run_remote_calls(&self, lp: &Loop) {
        let at = Cell::new(Location::caller());
        loop {
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                self.shared.take_jobs(|job| {
                    at.set(job.loc);
                    job.f.into_local().call(lp);
                    self.counters.callback_ran();
                    Context::reset();
                })
            }));
            match r {
                Ok(behind) => return self.remote_behind.set(behind),
                Err(payload) => {
                    self.counters.callback_ran();
                    Context::reset();
                    let loc = at.get();
                    lp.call_exception_handler(&ExceptionContext {
                        message: "Exception in callback",
                        failure: Some(&Failure::from_panic(payload, loc)),
                        location: Some(loc),
                    });
                }
            }
        }
    }

    /// Step 5: every timer due by `now` moves to the ready queue, in
    /// (deadline, seq) order, keeping its node so it can still be cancelled
    /// until it runs.
    /// The clock is read only if there is a timer (a loop without timers
    /// reads it never, as before a poll that blocks).
    fn queue_due_timers(&self) {
        let mut timers = self.timers.borrow_mut();
        if timers.len() == 0 {
            return;
        }
        let now = self.now();
        let mut ready = self.ready.borrow_mut();
        while let Some((id, task)) = timers.pop_due_reserved(now, |_| ready.next_seq()) {
            ready.push_timer(task, id);
        }
    }

    /// Step 6: run exactly the tasks queued when this step began.
    fn run_ready(&self, lp: &Loop) {
        if self.instrumented.get() {
            self.publish();
            if let Some(observe) = self.turn_observer.get() {
                observe(lp);
            }
        }
        let n = self.ready.borrow().len();
        for _ in 0..n {
            let mut ready = self.ready.borrow_mut();
            let Some(task) = ready.pop() else {
                break;
            };
            let timer = ready.popped_timer();
            drop(ready);
            if let Some(id) = timer {
                self.timers.borrow_mut().release(id);
            }
            self.run_task(lp, task);
        }
    }

    /// Publishes a summary for monitors, at most every 10 ms.
    pub(super) fn publish(&self) {
        let now = Instant::now();
        if self
            .last_publish
            .get()
            .is_some_and(|t| now - t < PUBLISH_EVERY)
        {
            return;
        }
        self.last_publish.set(Some(now));
        let ready = self.ready.borrow();
        let timers = self.timers.borrow();
        let mut listed: Vec<_> = timers
            .iter()
            .map(|(deadline, t)| super::TimerInfo {
                deadline,
                scheduled_at: t.loc,
            })
            .collect();
        listed.sort_by_key(|t| t.deadline);
        listed.truncate(LIST_AT_MOST);
        let p = Published {
            at: Some(now),
            turns: self.turns.get(),
            ready: ready.len(),
            ready_sites: ready.locations().take(LIST_AT_MOST).collect(),
            timer_count: timers.len(),
            timers: listed,
            io_sources: self.io.borrow().infos(LIST_AT_MOST),
        };
        drop((ready, timers));
        *self
            .shared
            .monitor
            .published
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = p;
    }
}

#[cfg(test)]
mod tests {
    use crate::EventLoop;
    use std::time::Duration;

    /// Cancels keep the payload buffer (no reallocation in a burst); the next
    /// turn's step 1 gives it back.
    #[test]
    fn a_turn_gives_back_the_buffer_of_cancelled_timers() {
        let ev = EventLoop::new().unwrap();
        let handles: Vec<_> = (0..10_000u64)
            .map(|i| ev.call_later(Duration::from_secs(60 + i), |_| {}).unwrap())
            .collect();
        for h in &handles[10..] {
            assert!(h.cancel());
        }
        let capacity = || ev.lp.inner.timers.borrow().capacity();
        assert!(capacity() >= 10_000);
        ev.run_once_timeout(Duration::ZERO).unwrap();
        assert!(capacity() <= 64, "capacity {} after a turn", capacity());
        assert_eq!(ev.timer_count(), 10);
    }

    /// A burst of remote calls, and a second one queued while the first
    /// runs: the queue's blocks are freed as each drain takes them, so one
    /// is left once the calls are taken, with no quiet time needed.
    #[test]
    fn a_burst_s_remote_blocks_are_freed_as_drained() {
        let clock = crate::ManualClock::new();
        let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
        let remote = ev.remote();
        for _ in 0..100_000 {
            remote.call_soon_threadsafe(|_| {}).unwrap();
        }
        let blocks = || ev.lp.inner.shared.blocks();
        assert!(blocks() >= 100_000 / 63);
        let r2 = remote.clone();
        remote
            .call_soon_threadsafe(move |_| {
                for _ in 0..100_000 {
                    r2.call_soon_threadsafe(|_| {}).unwrap();
                }
            })
            .unwrap();
        let turn = || ev.run_once_timeout(Duration::ZERO).unwrap();
        turn();
        assert!(blocks() >= 100_000 / 63, "the second burst, queued");
        turn();
        assert_eq!(blocks(), 1);
        turn();
        assert!(ev.lp.inner.ready.borrow().is_empty());
        assert_eq!(remote.wake_stats().0, 200_001);
    }

    /// A loop that goes idle after a burst gives its memory back by itself:
    /// while a buffer holds a burst's room its poll waits at most `DECAY`;
    /// the turn that gives it back blocks again (here until its 2.5 s).
    /// The ready queue's room comes from the callbacks (remote calls run
    /// from their own blocks, which are freed as they are taken).
    #[test]
    fn an_idle_loop_gives_a_burst_s_buffers_back() {
        use std::time::Instant;
        let ev = EventLoop::new().unwrap();
        let remote = ev.remote();
        for _ in 0..100_000 {
            remote.call_soon_threadsafe(|_| {}).unwrap();
            ev.call_soon(|_| {}).unwrap();
        }
        ev.run_once_timeout(Duration::ZERO).unwrap();
        ev.run_once_timeout(Duration::ZERO).unwrap();
        let holds = || ev.lp.inner.holds_burst();
        assert!(holds());
        let start = Instant::now();
        let mut last_turn = start;
        while holds() && start.elapsed() < Duration::from_secs(10) {
            last_turn = Instant::now();
            ev.run_once_timeout(Duration::from_millis(2500)).unwrap();
        }
        assert!(!holds());
        // Without the cap, each turn would wait its 2.5 s.
        let gave_back = last_turn - start;
        assert!(gave_back < Duration::from_millis(1500), "{gave_back:?}");
        assert_eq!(ev.lp.inner.shared.blocks(), 1);
        assert_eq!(ev.lp.inner.poll_timeout(None), None, "blocks again");
    }
}
