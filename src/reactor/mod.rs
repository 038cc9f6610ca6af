//! The event loop: `EventLoop` (the owner), `Loop` (the handle callbacks get),
//! `Handle` (one scheduled call). The turn is in `turn.rs`; the public
//! constructors, which read the environment for `ps`, in `src/env.rs`.
//! `Inner` holds one `RefCell` per part (ready queue, timers, I/O registry),
//! each borrowed only for one operation and never while user code runs.
//! Tests: tests/loop_*.rs.

mod as_clock;
mod callback;
mod decay;
mod embed;
mod exceptions;
pub(crate) mod give_back;
mod handle;
mod key;
pub(crate) mod monitor;
mod published;
mod raw;
mod ready;
mod remote;
mod remote_queue;
mod run;
pub(crate) mod source;
mod stats;
mod threads;
mod turn;
mod waits;

use crate::clock::{Clock, ManualClock};
use crate::context::Context;
use crate::deferred::failure::Failure;
use crate::timers::{self, TimerWheel};
use crate::Error;
use exceptions::ExceptionHandler;
use handle::HandleId;
use ready::{Callback, Job, ReadyQueue, Task};
use remote::CrossThread;
use source::Registry;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Deref;
use std::os::unix::io::{AsRawFd, RawFd};
use std::panic::{self, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use monitor::{CurrentCallback, Monitor, Snapshot};
pub use published::{IoInfo, TimerInfo};

pub use exceptions::{default_exception_handler, ExceptionContext};
pub use handle::{Handle, HandleState};
pub(crate) use key::SourceKey;
pub use remote::Remote;
pub(crate) use source::{PostAction, Ready, Source};
pub use stats::Stats;
pub use threads::DEFAULT_POOL_CLOSE_TIMEOUT;

/// Step 2 never sleeps longer than this ("avoid OS limitations", as asyncio).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const WAKER: mio::Token = mio::Token(usize::MAX);
const DEFAULT_SLOW_CALLBACK: Duration = Duration::from_millis(100);

pub(crate) struct Inner {
    ready: RefCell<ReadyQueue>,
    timers: RefCell<TimerWheel<Task>>,
    io: RefCell<Registry>,
    poll: RefCell<mio::Poll>,
    /// The selector's descriptor (embed.rs): valid as long as `poll` is.
    poll_fd: RawFd,
    events: RefCell<mio::Events>,
    /// The last poll filled `events`: more may be waiting (embed.rs).
    events_full: Cell<bool>,
    /// A host watches the poll fd (embed.rs): work scheduled between turns
    /// must then make the fd readable.
    watched: Cell<bool>,
    shared: Arc<CrossThread>,
    /// The last drain of the remote queue stopped at a call still being
    /// written: the next turn drains again and its poll does not wait.
    remote_behind: Cell<bool>,
    running: Cell<bool>,
    /// What `Remote`s were last told about `running` (the embedded turns
    /// keep it set between turns; see run.rs).
    remote_running: Cell<bool>,
    stopping: Cell<bool>,
    closed: Cell<bool>,
    /// `closed || (watched && !running)`: a push onto the ready queue must do
    /// more than queue (fail, or wake the host). One flag, so a push tests
    /// one (embed.rs, `refresh_push_check`).
    push_check: Cell<bool>,
    close_after_run: Cell<bool>,
    debug: Cell<bool>,
    slow_callback: Cell<Duration>,
    /// Whether a monitor or watchdog watches: record the current callback.
    instrumented: Cell<bool>,
    /// Told at the start of step 6 of each turn of an instrumented loop: set
    /// by a layer above (`ps`) through [`Loop::observe_turns`].
    turn_observer: Cell<Option<fn(&Loop)>>,
    last_publish: Cell<Option<Instant>>,
    turns: Cell<u64>,
    counters: stats::Counters,
    handler: RefCell<Option<ExceptionHandler>>,
    pool: RefCell<threads::Pool>,
    /// Time stands still unless this clock is advanced (`with_manual_clock`).
    manual: Option<ManualClock>,
}

/// A handle to an event loop: what every callback receives, cheap to clone.
///
/// All methods take `&self`; a callback may schedule, cancel or stop from
/// inside the loop. `Loop` is `!Send`: only a [`Remote`] crosses threads.
///
/// Clones are strong references. A clone captured by a callback that sits in
/// one of the loop's own queues would form a reference cycle; closing the loop
/// (which dropping its [`EventLoop`] does) drops every queue and so breaks them.
/// Prefer the `&Loop` passed to each callback over captured clones.
///
/// # Examples
/// A countdown: each callback schedules the next with the `&Loop` it is given.
/// ```
/// use deferloop::{EventLoop, Loop};
/// use std::time::Duration;
///
/// fn tick(lp: &Loop, n: u32) {
///     if n == 0 {
///         return lp.stop();
///     }
///     println!("{n}");
///     lp.call_later(Duration::from_millis(1), move |lp| tick(lp, n - 1))
///         .unwrap();
/// }
///
/// let ev = EventLoop::new()?;
/// let start = ev.time();
/// ev.call_soon(|lp| tick(lp, 3))?;
/// ev.run()?; // until `stop`
/// assert!(ev.time() - start >= Duration::from_millis(3));
/// # Ok::<(), deferloop::Error>(())
/// ```
#[derive(Clone)]
pub struct Loop {
    inner: Rc<Inner>,
}

/// The owner of an event loop. Dereferences to [`Loop`]; dropping it closes the loop.
///
/// # Examples
/// ```
/// use deferloop::EventLoop;
/// use std::time::Duration;
///
/// let ev = EventLoop::new()?;
/// ev.call_later(Duration::from_millis(5), |lp| {
///     println!("five milliseconds later");
///     lp.stop();
/// })?;
/// ev.call_soon(|_| println!("first"))?;
/// ev.run()?;
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct EventLoop {
    lp: Loop,
}

thread_local! {
    static CURRENT_LOOP: RefCell<Option<Weak<Inner>>> = const { RefCell::new(None) };
}

impl EventLoop {
    /// A new loop, before the layers above the reactor have looked at the
    /// environment: the public constructors (`new`, `with_manual_clock`) are
    /// in `src/env.rs`, above `ps`, which they may switch on.
    pub(crate) fn with_time(manual: Option<ManualClock>) -> std::io::Result<EventLoop> {
        let poll = mio::Poll::new()?;
        let poll_fd = poll.as_raw_fd();
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let debug = std::env::var_os("DEFERLOOP_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
        // The loop's time never goes back past this (a manual clock only advances).
        let now = manual.as_ref().map_or_else(Instant::now, |c| c.now());
        let inner = Inner {
            ready: RefCell::new(ReadyQueue::default()),
            timers: RefCell::new(TimerWheel::new(now)),
            io: RefCell::new(Registry::default()),
            poll: RefCell::new(poll),
            poll_fd,
            events: RefCell::new(mio::Events::with_capacity(1024)),
            events_full: Cell::new(false),
            watched: Cell::new(false),
            shared: Arc::new(CrossThread::new(waker)),
            remote_behind: Cell::new(false),
            running: Cell::new(false),
            remote_running: Cell::new(false),
            stopping: Cell::new(false),
            closed: Cell::new(false),
            push_check: Cell::new(false),
            close_after_run: Cell::new(false),
            debug: Cell::new(debug),
            slow_callback: Cell::new(DEFAULT_SLOW_CALLBACK),
            instrumented: Cell::new(false),
            turn_observer: Cell::new(None),
            last_publish: Cell::new(None),
            turns: Cell::new(0),
            counters: stats::Counters::default(),
            handler: RefCell::new(None),
            pool: RefCell::new(threads::Pool::new()),
            manual,
        };
        let ev = EventLoop {
            lp: Loop {
                inner: Rc::new(inner),
            },
        };
        Ok(ev)
    }

    /// The loop as a [`Loop`], the cheap strong handle callbacks get (the
    /// same as `(*ev).clone()`). Not a [`Handle`], which is one scheduled call.
    pub fn to_loop(&self) -> Loop {
        self.lp.clone()
    }
}

impl Deref for EventLoop {
    type Target = Loop;
    fn deref(&self) -> &Loop {
        &self.lp
    }
}

impl Drop for EventLoop {
    fn drop(&mut self) {
        if self.lp.inner.running.get() {
            self.lp.inner.close_after_run.set(true);
        } else {
            let _ = self.lp.close();
        }
    }
}

impl fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.lp.fmt(f)
    }
}

impl Loop {
    // ---- scheduling -------------------------------------------------------

    /// Queues `f` to run in the loop's next turn (never inside this call), after
    /// everything already queued.
    ///
    /// The context ([`ContextVar`](crate::ContextVar)s) current now is the one
    /// `f` sees; the caller's location is recorded for diagnostics.
    ///
    /// # Errors
    /// [`Error::Closed`] after [`close`](Self::close); `f` is dropped.
    #[track_caller]
    pub fn call_soon(&self, f: impl FnOnce(&Loop) + 'static) -> Result<Handle, Error> {
        let seq = self
            .inner
            .push_ready(|| Job::Call(Callback::new(f)), Location::caller())?;
        Ok(Handle {
            lp: Rc::downgrade(&self.inner),
            id: Cell::new(HandleId::Ready(seq)),
            cancelled: Cell::new(false),
        })
    }

    /// Runs `f` once `delay` has passed: at the first turn whose time is at or
    /// after `time() + delay`. A zero delay means the next turn, after its I/O callbacks;
    /// one too long to represent (`Duration::MAX`) never comes (no panic).
    ///
    /// # Guarantees
    /// - `f` never runs before its deadline: inside it, `time() >= deadline`.
    /// - Equal deadlines run in the order they were scheduled.
    ///
    /// *Not guaranteed, just today:* lateness is about the selector's
    /// granularity (mio rounds poll timeouts up to whole milliseconds).
    ///
    /// # Examples
    /// A timer that fires, and one cancelled before it is due:
    /// ```
    /// use deferloop::{EventLoop, HandleState};
    /// use std::time::Duration;
    ///
    /// let ev = EventLoop::new()?;
    /// let never = ev.call_later(Duration::from_secs(60), |_| unreachable!())?;
    /// let stop = ev.call_later(Duration::from_millis(5), |lp| lp.stop())?;
    /// assert!(never.cancel()); // it leaves the timer wheel at once
    /// assert_eq!(ev.timer_count(), 1);
    /// ev.run()?;
    /// assert_eq!(stop.state(), HandleState::Done);
    /// assert_eq!(never.state(), HandleState::Cancelled);
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Closed`] after [`close`](Self::close).
    #[track_caller]
    pub fn call_later(
        &self,
        delay: Duration,
        f: impl FnOnce(&Loop) + 'static,
    ) -> Result<Handle, Error> {
        let when = timers::later(self.time(), delay);
        self.call_at(when, f)
    }

    /// Runs `f` at `when` (or at the next turn if `when` has passed); see
    /// [`call_later`](Self::call_later).
    ///
    /// # Errors
    /// [`Error::Closed`] after [`close`](Self::close).
    #[track_caller]
    pub fn call_at(&self, when: Instant, f: impl FnOnce(&Loop) + 'static) -> Result<Handle, Error> {
        let inner = &self.inner;
        inner.check_open()?;
        inner.wake_host();
        let (ctx, loc) = (Context::capture(), Location::caller());
        // The job is made last, as in `push_ready`.
        let id = inner.timers.borrow_mut().insert_with(when, || Task {
            job: Job::Call(Callback::new(f)),
            ctx,
            loc,
        });
        Ok(Handle {
            lp: Rc::downgrade(inner),
            id: Cell::new(HandleId::Timer(id, when)),
            cancelled: Cell::new(false),
        })
    }

    /// The loop's clock: monotonic, never adjusted by wall-clock changes.
    #[inline]
    pub fn time(&self) -> Instant {
        self.inner.now()
    }

    /// A handle for other threads.
    pub fn remote(&self) -> Remote {
        Remote {
            shared: self.inner.shared.clone(),
        }
    }

    /// The loop running on this thread, for code that was not handed one (a
    /// Deferred callback, say).
    ///
    /// # Errors
    /// [`Error::NoRunningLoop`] outside `run()`/`run_once()`: no loop is ever
    /// created behind your back.
    pub fn current() -> Result<Loop, Error> {
        CURRENT_LOOP.with(|c| {
            c.borrow()
                .as_ref()
                .and_then(Weak::upgrade)
                .map(|inner| Loop { inner })
                .ok_or(Error::NoRunningLoop)
        })
    }

    /// Whether the loop is inside `run()` or `run_once()`.
    pub fn is_running(&self) -> bool {
        self.inner.running.get()
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get()
    }

    /// How many turns this loop has completed.
    pub fn turn_count(&self) -> u64 {
        self.inner.turns.get()
    }

    /// Callbacks in the ready queue (cancelled ones included until skipped).
    pub fn ready_len(&self) -> usize {
        self.inner.ready.borrow().len()
    }

    /// Timers waiting in the wheel. Cancelled timers are removed at once, so
    /// this is the number of live timers.
    pub fn timer_count(&self) -> usize {
        self.inner.timers.borrow().len()
    }

    /// Registered I/O sources.
    pub fn io_source_count(&self) -> usize {
        self.inner.io.borrow().len()
    }

    // ---- errors and diagnostics -------------------------------------------

    /// Turns debug mode on or off: when on, every callback that runs longer
    /// than [`slow_callback_duration`](Self::set_slow_callback_duration) is
    /// reported with `log::warn!`, naming where it was scheduled.
    pub fn set_debug(&self, on: bool) {
        self.inner.debug.set(on);
    }

    /// Whether debug mode is on.
    pub fn debug(&self) -> bool {
        self.inner.debug.get()
    }

    /// The threshold for debug mode's slow-callback warning (default 100 ms).
    pub fn set_slow_callback_duration(&self, d: Duration) {
        self.inner.slow_callback.set(d);
    }

    /// A `Send + Sync` monitor for inspecting this loop from another thread,
    /// even while it is blocked. Turns on the (small) bookkeeping it reads.
    pub fn monitor(&self) -> Monitor {
        self.inner.instrument();
        Monitor {
            shared: self.inner.shared.clone(),
        }
    }

    /// Calls `observe` at the start of step 6 of every turn from now on, and
    /// turns on the monitor's bookkeeping (as [`monitor`](Self::monitor)
    /// does): how `ps` publishes its report without the reactor knowing it.
    /// A loop nobody instruments pays nothing for it: the test sits behind
    /// the branch on `instrumented` each turn already takes.
    pub(crate) fn observe_turns(&self, observe: fn(&Loop)) {
        self.inner.turn_observer.set(Some(observe));
        self.inner.instrument();
    }

    /// The monitor's snapshot, published now (for `ps`, on the loop's thread).
    pub(crate) fn monitor_now(&self) -> Snapshot {
        self.inner.instrument();
        self.inner.last_publish.set(None);
        self.inner.publish();
        self.monitor().snapshot()
    }

    /// Starts a watchdog thread that logs (`log::warn!`), while it is still
    /// blocked, a loop that has been inside one callback for `threshold` or
    /// longer, naming where that callback was scheduled and for how long; it
    /// reports again each time the block doubles, and ends with the loop.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::InvalidInput`] for a zero threshold, or the
    /// thread could not be spawned.
    pub fn enable_watchdog(&self, threshold: Duration) -> Result<(), Error> {
        self.inner.check_open()?;
        if threshold.is_zero() {
            return Err(Error::InvalidInput("watchdog threshold must be positive"));
        }
        self.inner.instrument();
        monitor::spawn_watchdog(self.inner.shared.clone(), threshold)?;
        Ok(())
    }
}

impl Loop {
    /// A weak reference, for cancellers, timers and handles that must not
    /// keep the loop alive.
    pub(crate) fn downgrade(&self) -> WeakLoop {
        WeakLoop(Rc::downgrade(&self.inner))
    }

    /// What tells this loop from the others on its thread while it lives:
    /// how the simulation finds the host a loop belongs to.
    #[cfg(feature = "sim")]
    pub(crate) fn addr_id(&self) -> usize {
        Rc::as_ptr(&self.inner) as usize
    }

    /// When the earliest timer is due (a bound at or before it, see
    /// `TimerWheel::next_deadline`): where the simulation moves time to.
    #[cfg(feature = "sim")]
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.inner.timers.borrow().next_deadline()
    }
}

/// A loop that may be gone: what handles held by user objects keep, so that
/// they form no cycle with the loop.
#[derive(Clone, Default)]
pub(crate) struct WeakLoop(Weak<Inner>);

impl WeakLoop {
    /// The loop, if it still exists.
    pub(crate) fn upgrade(&self) -> Option<Loop> {
        self.0.upgrade().map(|inner| Loop { inner })
    }
}

impl fmt::Debug for Loop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loop")
            .field("running", &self.is_running())
            .field("closed", &self.is_closed())
            .field("ready", &self.ready_len())
            .field("timers", &self.timer_count())
            .finish()
    }
}

impl Inner {
    /// The loop's time: the monotonic clock, or the manual clock's.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(clock) => clock.now(),
        }
    }

    #[inline]
    fn check_open(&self) -> Result<(), Error> {
        if self.closed.get() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    #[inline(always)]
    pub(crate) fn push_ready(
        &self,
        job: impl FnOnce() -> Job,
        loc: &'static Location<'static>,
    ) -> Result<u64, Error> {
        if self.push_check.get() {
            self.checked_push()?;
        }
        debug_assert_eq!(
            self.push_check.get(),
            self.closed.get() || (self.watched.get() && !self.running.get())
        );
        let ctx = Context::capture();
        let mut ready = self.ready.borrow_mut();
        ready.reserve_one();
        // The job is made last, after everything that can return early,
        // panic or grow the queue. Made first, it had to be dropped through
        // its vtable on those paths, so it lived in stack memory and was
        // copied piecewise into the slot (push side, cache-resident: ~19 ->
        // ~12 ns per callback).
        Ok(ready.push(Task {
            job: job(),
            ctx,
            loc,
        }))
    }

    fn instrument(&self) {
        self.instrumented.set(true);
        self.shared.monitor.enable();
    }

    /// Runs one task from the ready queue, containing any panic.
    #[inline]
    fn run_task(&self, lp: &Loop, task: Task) {
        let Task { job, ctx, loc, .. } = task;
        let f = match job {
            Job::Call(f) if f.is_cancelled() => return,
            Job::Call(f) => f,
            Job::Io(SourceKey::REMOTE_CALLS) => return self.run_remote_calls(lp),
            Job::Io(key) => return self.run_contained(lp, loc, ctx, |lp| lp.dispatch_source(key)),
        };
        self.run_contained(lp, loc, ctx, |lp| f.call(lp));
    }

    #[inline]
    fn run_contained(
        &self,
        lp: &Loop,
        loc: &'static Location<'static>,
        ctx: Context,
        f: impl FnOnce(&Loop),
    ) {
        let instrumented = self.instrumented.get();
        let timed = self.debug.get() || instrumented;
        let started = if timed { Some(Instant::now()) } else { None };
        if instrumented {
            self.shared
                .monitor
                .set_current(Some((loc, started.unwrap())));
        }
        let plain = ctx.is_empty();
        let outer = if plain { None } else { Some(ctx.enter()) };
        let result = panic::catch_unwind(AssertUnwindSafe(|| f(lp)));
        self.counters.callback_ran();
        if let Some(outer) = outer {
            outer.enter();
        } else {
            // The callback may have set a variable: drop its context.
            Context::reset();
        }
        if instrumented {
            self.shared.monitor.set_current(None);
        }
        if let Err(payload) = result {
            let failure = Failure::from_panic(payload, loc);
            lp.call_exception_handler(&ExceptionContext {
                message: "Exception in callback",
                failure: Some(&failure),
                location: Some(loc),
            });
        }
        if let Some(t0) = started {
            stats::timed(self, loc, t0.elapsed());
        }
    }
}
