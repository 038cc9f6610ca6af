//! The event loop: `EventLoop` (the owner), `Loop` (the handle callbacks get),
//! `Handle` (one scheduled call). The turn itself is in `turn.rs`.
//!
//! State lives in `Inner`, one `RefCell` per module-owned part (ready queue,
//! timers, I/O registry), each borrowed only for the length of one operation and
//! never while user code runs, so a callback can call back into the loop freely.
//! Tests: tests/loop_*.rs.

mod callback;
pub(crate) mod io;
pub(crate) mod monitor;
mod ready;
mod remote;
mod threads;
pub(crate) mod timers;
mod turn;

use crate::clock::{Clock, Timer};
use crate::context::Context;
use crate::deferred::failure::Failure;
use crate::Error;
use io::Registry;
use ready::{Callback, Job, ReadyQueue, Task};
use remote::{RemoteJob, Shared};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Deref;
use std::panic::{self, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};
use timers::{TimerHeap, TimerId};

pub use monitor::{CurrentCallback, IoInfo, Monitor, Snapshot, TimerInfo};

pub use remote::Remote;

/// Step 2 never sleeps longer than this ("avoid OS limitations", as asyncio).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const WAKER: mio::Token = mio::Token(usize::MAX);
const DEFAULT_SLOW_CALLBACK: Duration = Duration::from_millis(100);

pub(crate) struct Inner {
    ready: RefCell<ReadyQueue>,
    timers: RefCell<TimerHeap<Task>>,
    io: RefCell<Registry>,
    poll: RefCell<mio::Poll>,
    events: RefCell<mio::Events>,
    shared: Arc<Shared>,
    /// The spare buffer the remote queue is swapped with (no allocation per drain).
    spare: RefCell<Vec<RemoteJob>>,
    running: Cell<bool>,
    stopping: Cell<bool>,
    closed: Cell<bool>,
    close_after_run: Cell<bool>,
    debug: Cell<bool>,
    slow_callback: Cell<Duration>,
    /// Whether a monitor or watchdog watches: record the current callback.
    instrumented: Cell<bool>,
    last_publish: Cell<Option<Instant>>,
    turns: Cell<u64>,
    handler: RefCell<Option<ExceptionHandler>>,
    pool: RefCell<threads::Pool>,
    /// The one read buffer every transport reads into (net/), taken for the
    /// length of a dispatch.
    read_buf: RefCell<Vec<u8>>,
}

type ExceptionHandler = Box<dyn FnMut(&Loop, &ExceptionContext<'_>)>;

/// A handle to an event loop: what every callback receives, cheap to clone.
///
/// All methods take `&self`; a callback may schedule, cancel or stop from
/// inside the loop. `Loop` is `!Send`: only a [`Remote`] crosses threads.
///
/// Clones are strong references. A clone captured by a callback that sits in
/// one of the loop's own queues would form a reference cycle; closing the loop
/// (which dropping its [`EventLoop`] does) drops every queue and so breaks them.
/// Prefer the `&Loop` passed to each callback over captured clones.
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
    /// Creates a loop with its own selector.
    ///
    /// Debug mode starts on if the environment variable `DEFERLOOP_DEBUG` is
    /// set to anything but `0` or the empty string.
    ///
    /// # Errors
    /// The selector or its waker could not be created (file descriptor limit).
    pub fn new() -> std::io::Result<EventLoop> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let debug = std::env::var_os("DEFERLOOP_DEBUG").is_some_and(|v| !v.is_empty() && v != "0");
        let inner = Inner {
            ready: RefCell::new(ReadyQueue::default()),
            timers: RefCell::new(TimerHeap::new()),
            io: RefCell::new(Registry::default()),
            poll: RefCell::new(poll),
            events: RefCell::new(mio::Events::with_capacity(1024)),
            shared: Arc::new(Shared::new(waker)),
            spare: RefCell::new(Vec::new()),
            running: Cell::new(false),
            stopping: Cell::new(false),
            closed: Cell::new(false),
            close_after_run: Cell::new(false),
            debug: Cell::new(debug),
            slow_callback: Cell::new(DEFAULT_SLOW_CALLBACK),
            instrumented: Cell::new(false),
            last_publish: Cell::new(None),
            turns: Cell::new(0),
            handler: RefCell::new(None),
            pool: RefCell::new(threads::Pool::new()),
            read_buf: RefCell::new(Vec::new()),
        };
        Ok(EventLoop {
            lp: Loop {
                inner: Rc::new(inner),
            },
        })
    }

    /// A handle to this loop (the same as `(*ev).clone()`).
    pub fn handle(&self) -> Loop {
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

    /// Queues `f` to run in the next step 6 (never inside this call), after
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
            id: HandleId::Ready(seq),
            cancelled: Cell::new(false),
        })
    }

    /// Runs `f` once `delay` has passed: at the first turn whose time is at or
    /// after `time() + delay`. A zero delay means the next turn's step 5.
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
    /// assert!(never.cancel()); // it leaves the heap at once
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
        let when = Instant::now().checked_add(delay).unwrap_or_else(far_future);
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
        let (ctx, loc) = (Context::capture(), Location::caller());
        // The job is made last, as in `push_ready`.
        let id = inner.timers.borrow_mut().insert_with(when, || Task {
            job: Job::Call(Callback::new(f)),
            ctx,
            loc,
        });
        Ok(Handle {
            lp: Rc::downgrade(inner),
            id: HandleId::Timer(id, when),
            cancelled: Cell::new(false),
        })
    }

    /// The loop's clock: monotonic, never adjusted by wall-clock changes.
    #[inline]
    pub fn time(&self) -> Instant {
        Instant::now()
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

    // ---- running ----------------------------------------------------------

    /// Runs turns until [`stop`](Self::stop) is called.
    ///
    /// `stop()` lets the current turn finish; what was queued during it stays
    /// queued for the next `run()`. `stop()` before `run()` makes `run()` do
    /// exactly one turn, with a zero poll timeout.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Running`] if this or another loop is
    /// already running on this thread, or an error from the selector.
    pub fn run(&self) -> Result<(), Error> {
        let _running = RunGuard::enter(self)?;
        loop {
            self.inner.turn(self)?;
            if self.inner.stopping.get() {
                return Ok(());
            }
        }
    }

    /// Runs one turn: the six steps once. It may sleep in poll as a normal turn
    /// does (until I/O, the next timer, or a remote call).
    ///
    /// # Errors
    /// As for [`run`](Self::run).
    pub fn run_once(&self) -> Result<(), Error> {
        let _running = RunGuard::enter(self)?;
        self.inner.turn(self)
    }

    /// Runs until `d` fires, then returns its result (asyncio's
    /// `run_until_complete`).
    ///
    /// The loop's own checks come first, whatever state `d` is in: on a
    /// closed loop or from inside a running one this returns at once with
    /// that error, without touching the running loop, and a `d` that has
    /// already fired returns without running a turn. When it returns, its
    /// hold on `d` ends: if it returned early (the loop was stopped) and `d`
    /// fires later, nothing stops the loop then, and a failure `d` ends with
    /// is reported as unhandled. `d` is never left pending forever by its
    /// producer: a Deferred whose Resolvers are all dropped fails with
    /// [`Abandoned`](crate::deferred::Abandoned).
    ///
    /// # Errors
    /// The Deferred's failure; or a failure wrapping an [`Error`]:
    /// [`Error::Closed`], [`Error::Running`] (this or another loop is running
    /// on this thread), [`Error::Stopped`] (the loop was stopped before `d`
    /// fired), or a selector error. `?` turns it into a `Box<dyn Error>`.
    #[track_caller]
    pub fn run_until<T: 'static>(&self, d: crate::deferred::Deferred<T>) -> Result<T, Failure> {
        let at = Location::caller();
        let loop_error = |e: Error| Failure::with_origin(e, at);
        let running = RunGuard::enter(self).map_err(loop_error)?;
        let slot: Rc<RefCell<Option<Result<T, Failure>>>> = Rc::new(RefCell::new(None));
        let waiting = Rc::new(Cell::new(true));
        let (s, w, inner) = (slot.clone(), waiting.clone(), Rc::downgrade(&self.inner));
        d.add_both(move |r: Result<T, Failure>| {
            if !w.get() {
                // `run_until` has returned: pass a failure on, to be reported.
                return r.map(drop);
            }
            *s.borrow_mut() = Some(r);
            if let Some(inner) = inner.upgrade() {
                inner.stopping.set(true);
            }
            Ok(())
        })
        .detach();
        // As `run()`: a stop ends the run after the current turn.
        let turns = || {
            while slot.borrow().is_none() {
                self.inner.turn(self)?;
                if self.inner.stopping.get() {
                    break;
                }
            }
            Ok(())
        };
        let ran = turns();
        waiting.set(false);
        drop(running); // also clears the stop set above
        ran.map_err(loop_error)?;
        let r = slot.borrow_mut().take();
        r.unwrap_or_else(|| Err(loop_error(Error::Stopped)))
    }

    /// Asks the loop to stop once the current turn is over.
    pub fn stop(&self) {
        self.inner.stopping.set(true);
    }

    /// Closes the loop: drops, without running them, every queued callback,
    /// timer, registered source and remote call. Afterwards every scheduling
    /// call returns [`Error::Closed`]. Closing a closed loop does nothing.
    ///
    /// # Errors
    /// [`Error::Running`] if called while the loop runs.
    pub fn close(&self) -> Result<(), Error> {
        let inner = &self.inner;
        if inner.running.get() {
            return Err(Error::Running);
        }
        if inner.closed.replace(true) {
            return Ok(());
        }
        // Collect first, drop after: dropping a closure can run user code that
        // calls back in (and must then see a closed loop, not a held borrow).
        let remote = inner.shared.close();
        let ready = inner.ready.borrow_mut().drain();
        let timers = inner.timers.borrow_mut().drain();
        let mut sources = inner.io.borrow_mut().drain();
        inner.handler.borrow_mut().take();
        let waiting = inner.shutdown_pool();
        // Open connections hear `connection_lost` (exactly once, as always).
        crate::net::finish_on_close(self, &mut sources);
        drop((remote, ready, timers, sources, waiting));
        Ok(())
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

    /// Timers waiting in the heap. Cancelled timers are removed at once, so
    /// this is the number of live timers.
    pub fn timer_count(&self) -> usize {
        self.inner.timers.borrow().len()
    }

    /// Registered I/O sources.
    pub fn io_source_count(&self) -> usize {
        self.inner.io.borrow().len()
    }

    // ---- errors and diagnostics -------------------------------------------

    /// Installs the function that receives errors the loop cannot hand to
    /// anyone else (a panicking callback, a failing accept); `None` restores
    /// the default, which logs them with `log::error!` (so does
    /// [`reset_exception_handler`](Self::reset_exception_handler), which needs
    /// no type annotation).
    ///
    /// A panic inside the handler is caught and logged; the loop goes on.
    pub fn set_exception_handler(
        &self,
        handler: Option<impl FnMut(&Loop, &ExceptionContext<'_>) + 'static>,
    ) {
        *self.inner.handler.borrow_mut() = handler.map(|h| Box::new(h) as ExceptionHandler);
    }

    /// Restores the default exception handler, [`default_exception_handler`].
    pub fn reset_exception_handler(&self) {
        self.inner.handler.borrow_mut().take();
    }

    /// Passes `ctx` to the exception handler (or the default one).
    pub fn call_exception_handler(&self, ctx: &ExceptionContext<'_>) {
        let taken = self.inner.handler.borrow_mut().take();
        let Some(mut handler) = taken else {
            contained_default_handler(ctx);
            return;
        };
        let r = panic::catch_unwind(AssertUnwindSafe(|| handler(self, ctx)));
        // Put it back unless the handler installed a new one meanwhile.
        let mut slot = self.inner.handler.borrow_mut();
        if slot.is_none() && !self.inner.closed.get() {
            *slot = Some(handler);
        }
        drop(slot);
        if let Err(payload) = r {
            let msg = crate::deferred::failure::panic_message(&*payload);
            log::error!(
                "deferloop: the exception handler panicked ({msg}) while handling: {}",
                ctx.message
            );
            contained_default_handler(ctx);
        }
    }

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

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Sets and resets the running state around `run()`/`run_once()`, even if
/// something unwinds out of a turn.
struct RunGuard<'a> {
    lp: &'a Loop,
    outer: Option<Weak<Inner>>,
}

impl<'a> RunGuard<'a> {
    fn enter(lp: &'a Loop) -> Result<RunGuard<'a>, Error> {
        let inner = &lp.inner;
        inner.check_open()?;
        if inner.running.get()
            || CURRENT_LOOP.with(|c| c.borrow().as_ref().is_some_and(|w| w.strong_count() > 0))
        {
            return Err(Error::Running);
        }
        inner.running.set(true);
        inner.shared.set_running(true);
        let outer = CURRENT_LOOP.with(|c| c.borrow_mut().replace(Rc::downgrade(inner)));
        Ok(RunGuard { lp, outer })
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        let inner = &self.lp.inner;
        inner.stopping.set(false);
        inner.running.set(false);
        inner.shared.set_running(false);
        let outer = self.outer.take();
        CURRENT_LOOP.with(|c| *c.borrow_mut() = outer);
        if inner.close_after_run.get() {
            let _ = self.lp.close();
        }
    }
}

impl Inner {
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
        self.check_open()?;
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
            Job::Io(key) => {
                self.run_contained(lp, loc, ctx, |lp| io_dispatch(lp, key));
                return;
            }
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
        if let (Some(t0), true) = (started, self.debug.get()) {
            let took = t0.elapsed();
            if took >= self.slow_callback.get() {
                log::warn!("deferloop: executing callback scheduled at {loc} took {took:.3?}");
            }
        }
    }
}

fn io_dispatch(lp: &Loop, key: io::IoKey) {
    lp.dispatch_io(key);
}

/// What a [`Loop`]'s exception handler receives.
#[derive(Debug)]
#[non_exhaustive]
pub struct ExceptionContext<'a> {
    /// What happened, e.g. `"Exception in callback"`.
    pub message: &'a str,
    /// The failure, if there is one (for a panic: a [`Panicked`](crate::Panicked) error).
    pub failure: Option<&'a Failure>,
    /// Where the code involved was scheduled or registered.
    pub location: Option<&'static Location<'static>>,
}

impl<'a> ExceptionContext<'a> {
    /// A context with a message only.
    pub fn new(message: &'a str) -> Self {
        ExceptionContext {
            message,
            failure: None,
            location: None,
        }
    }
}

/// Runs the default handler; if it panics (a logger that fails), says so on
/// stderr instead of letting the panic out of `run()` (asyncio's
/// "Exception in default exception handler").
fn contained_default_handler(ctx: &ExceptionContext<'_>) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| default_exception_handler(ctx))) {
        let msg = crate::deferred::failure::panic_message(&*payload);
        eprintln!(
            "deferloop: the default exception handler panicked ({msg}) while handling: {}",
            ctx.message
        );
    }
}

/// Logs `ctx` with `log::error!`: message, failure, location.
pub fn default_exception_handler(ctx: &ExceptionContext<'_>) {
    match (ctx.failure, ctx.location) {
        (Some(f), Some(loc)) => log::error!(
            "deferloop: {} scheduled at {loc}: {f} (raised at {})",
            ctx.message,
            f.origin()
        ),
        (Some(f), None) => {
            log::error!("deferloop: {}: {f} (raised at {})", ctx.message, f.origin())
        }
        (None, Some(loc)) => log::error!("deferloop: {} (at {loc})", ctx.message),
        (None, None) => log::error!("deferloop: {}", ctx.message),
    }
}

/// The state of a [`Handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleState {
    /// Waiting to run.
    Pending,
    /// Cancelled before it ran.
    Cancelled,
    /// Ran, or was dropped by `close()`.
    Done,
}

#[derive(Debug, Clone, Copy)]
enum HandleId {
    Ready(u64),
    Timer(TimerId, Instant),
}

/// One call scheduled with `call_soon`, `call_later` or `call_at`.
///
/// Dropping the handle does not cancel the call. It holds only a weak
/// reference to the loop.
pub struct Handle {
    lp: Weak<Inner>,
    id: HandleId,
    cancelled: Cell<bool>,
}

impl Handle {
    /// Cancels the call if it has not run; returns whether it was pending.
    /// Idempotent. A cancelled timer leaves the heap at once (O(log n)); the
    /// callback and what it captured are dropped before `cancel` returns.
    pub fn cancel(&self) -> bool {
        let Some(inner) = self.lp.upgrade() else {
            return false;
        };
        // What was cancelled is dropped here, outside every borrow (dropping
        // a closure may run arbitrary code).
        let dropped: Option<Job> = match self.id {
            HandleId::Ready(seq) => inner.ready.borrow_mut().cancel(seq),
            HandleId::Timer(id, _) => {
                let c = inner.timers.borrow_mut().cancel(id);
                match c {
                    timers::Cancelled::Pending(task) => Some(task.job),
                    timers::Cancelled::Ready(seq) => inner.ready.borrow_mut().cancel(seq),
                    timers::Cancelled::Gone => None,
                }
            }
        };
        let was_pending = dropped.is_some();
        drop(dropped);
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
