//! Stopping a service cleanly: [`Shutdown`], Twisted's before/during/after
//! "shutdown" triggers with a deadline on every phase, and the "stop on
//! SIGINT/SIGTERM, force on the second" helper.
//!
//! The sequence [`Shutdown::start`] runs:
//!
//! 1. **before**: the program's triggers (stop taking work, tell peers);
//! 2. **during**: every registered listener stops accepting and its
//!    connections get the drain deadline to finish (then they are aborted),
//!    with the program's triggers;
//! 3. **after**: the thread pool finishes the jobs it has (or the deadline
//!    passes), with the program's triggers;
//! 4. the loop stops; [`done`](Shutdown::done) fires.
//!
//! A trigger returns a `Deferred<()>`; the next phase waits for all of a
//! phase's Deferreds, but no longer than the phase's deadline (then they are
//! cancelled and the sequence goes on). A failed trigger is reported to the
//! exception handler and does not stop the sequence.

use crate::net::Listener;
use crate::reactor::WeakLoop;
use crate::timers::later;
use crate::{
    succeed, Deferred, DeferredList, Error, ExceptionContext, Failure, Loop, Resolver, Signal,
    SignalHandler,
};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::Location;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The default deadline of each phase (and the connections' drain time).
pub const DEFAULT_PHASE_DEADLINE: Duration = Duration::from_secs(10);

/// A phase of the shutdown sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Before anything is closed.
    Before,
    /// While listeners stop and connections drain.
    During,
    /// After the connections are gone, while the thread pool finishes.
    After,
}

impl Phase {
    fn index(self) -> usize {
        self as usize
    }
}

type Trigger = Box<dyn FnOnce(&Loop) -> Deferred<()>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    Running(usize),
    Done,
}

struct Inner {
    lp: WeakLoop,
    at: &'static Location<'static>,
    triggers: RefCell<[Vec<Trigger>; 3]>,
    deadlines: Cell<[Duration; 3]>,
    listeners: RefCell<Vec<Listener>>,
    state: Cell<Stage>,
    forced: Cell<bool>,
    /// The phase's combined Deferred, cancelled by `force`.
    waiting: RefCell<Option<Deferred<()>>>,
    done: RefCell<Vec<Resolver<()>>>,
    handlers: RefCell<Vec<SignalHandler>>,
}

/// A loop's shutdown sequence (see the module's documentation). Cheap to
/// clone; every clone is the same sequence.
///
/// # Examples
/// A service that stops on SIGINT or SIGTERM, gracefully the first time and
/// at once the second:
/// ```no_run
/// use deferloop::net::{Protocol, Transport};
/// use deferloop::shutdown::Shutdown;
/// use deferloop::EventLoop;
/// use std::time::Duration;
///
/// struct Echo;
/// impl Protocol for Echo {
///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
///         t.write(data);
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let listener = ev.listen_tcp("127.0.0.1:7000".parse()?, || Echo)?;
/// let shutdown = Shutdown::new(&ev);
/// shutdown.add_listener(&listener);
/// shutdown.set_deadline(deferloop::shutdown::Phase::During, Duration::from_secs(5));
/// shutdown.stop_on_signals()?; // SIGINT, SIGTERM
/// ev.run()?; // returns once the sequence is over
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Shutdown {
    inner: Rc<Inner>,
}

impl Shutdown {
    /// A sequence for `lp`, with no trigger, no listener and every deadline
    /// [`DEFAULT_PHASE_DEADLINE`].
    #[track_caller]
    pub fn new(lp: &Loop) -> Shutdown {
        Shutdown {
            inner: Rc::new(Inner {
                lp: lp.downgrade(),
                at: Location::caller(),
                triggers: RefCell::new([Vec::new(), Vec::new(), Vec::new()]),
                deadlines: Cell::new([DEFAULT_PHASE_DEADLINE; 3]),
                listeners: RefCell::new(Vec::new()),
                state: Cell::new(Stage::Idle),
                forced: Cell::new(false),
                waiting: RefCell::new(None),
                done: RefCell::new(Vec::new()),
                handlers: RefCell::new(Vec::new()),
            }),
        }
    }

    /// Runs `f` in `phase`; the next phase waits for the Deferred it returns
    /// (within the phase's deadline). Triggers of a phase run in the order
    /// they were added. A trigger added once the phase has begun never runs.
    pub fn add_trigger(&self, phase: Phase, f: impl FnOnce(&Loop) -> Deferred<()> + 'static) {
        self.inner.triggers.borrow_mut()[phase.index()].push(Box::new(f));
    }

    /// Sets how long `phase` may take (`Duration::MAX`: no limit). For
    /// [`Phase::During`] it is also how long connections get to finish before
    /// they are aborted.
    pub fn set_deadline(&self, phase: Phase, deadline: Duration) {
        let mut d = self.inner.deadlines.get();
        d[phase.index()] = deadline;
        self.inner.deadlines.set(d);
    }

    /// Stops `listener` in the *during* phase and waits for its connections.
    pub fn add_listener(&self, listener: &Listener) {
        self.inner.listeners.borrow_mut().push(listener.clone());
    }

    /// Whether the sequence has begun (and not finished).
    pub fn is_running(&self) -> bool {
        matches!(self.inner.state.get(), Stage::Running(_))
    }

    /// Whether the sequence is over (the loop was asked to stop).
    pub fn is_done(&self) -> bool {
        self.inner.state.get() == Stage::Done
    }

    /// Whether it was forced ([`force`](Self::force)).
    pub fn was_forced(&self) -> bool {
        self.inner.forced.get()
    }

    /// A Deferred that fires when the sequence is over, just before the
    /// loop stops.
    pub fn done(&self) -> Deferred<()> {
        if self.is_done() {
            return succeed(());
        }
        let (d, r) = Deferred::new();
        self.inner.done.borrow_mut().push(r);
        d
    }

    /// Begins the sequence (a second call does nothing).
    pub fn start(&self) {
        if self.inner.state.get() != Stage::Idle {
            return;
        }
        run_phase(&self.inner, 0);
    }

    /// Ends the sequence now: every listener stops, every connection it
    /// accepted is aborted, the phase being waited for is cancelled, and the
    /// loop stops. The thread pool is not waited for when the loop closes.
    pub fn force(&self) {
        let inner = &self.inner;
        if inner.state.get() == Stage::Done {
            return;
        }
        inner.forced.set(true);
        let listeners = inner.listeners.borrow().clone();
        for l in &listeners {
            let _ = l.stop_listening();
            for t in l.connections() {
                t.abort();
            }
        }
        if let Some(lp) = inner.lp.upgrade() {
            lp.set_thread_pool_wait_on_close(false);
        }
        finish(inner);
        let waiting = inner.waiting.borrow_mut().take();
        if let Some(d) = waiting {
            d.cancel();
        }
    }

    /// Handles SIGINT and SIGTERM: the first starts the sequence, a second
    /// during it forces it. See [`handle_signals`](Self::handle_signals).
    ///
    /// # Errors
    /// As for [`Loop::add_signal_handler`].
    pub fn stop_on_signals(&self) -> Result<(), Error> {
        self.handle_signals(&[Signal::INT, Signal::TERM])
    }

    /// Handles `signals`: the first one starts the sequence, another while
    /// it runs forces it. The handlers are removed when the sequence is
    /// over, which restores the signals' previous dispositions.
    ///
    /// # Errors
    /// As for [`Loop::add_signal_handler`] (handlers already added stay
    /// until the sequence ends).
    pub fn handle_signals(&self, signals: &[Signal]) -> Result<(), Error> {
        let lp = self.inner.lp.upgrade().ok_or(Error::Closed)?;
        for &sig in signals {
            let weak = Rc::downgrade(&self.inner);
            let h = lp.add_signal_handler(sig, move |_, sig| {
                let Some(inner) = weak.upgrade() else { return };
                let s = Shutdown { inner };
                if s.is_running() {
                    log::warn!("deferloop: {sig} again during shutdown: forcing it");
                    s.force();
                } else {
                    log::info!("deferloop: {sig}: shutting down");
                    s.start();
                }
            })?;
            self.inner.handlers.borrow_mut().push(h);
        }
        Ok(())
    }
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shutdown")
            .field("state", &self.inner.state.get())
            .field("forced", &self.inner.forced.get())
            .finish()
    }
}

fn report(lp: &Loop, inner: &Inner, message: &str, failure: &Failure) {
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(failure),
        location: Some(inner.at),
    });
}

/// Runs phase `i` (3: the end), then, once its Deferreds are done or its
/// deadline passed, the next.
fn run_phase(inner: &Rc<Inner>, i: usize) {
    if inner.state.get() == Stage::Done {
        return;
    }
    let Some(lp) = inner.lp.upgrade() else {
        return finish(inner);
    };
    if i == 3 {
        return finish(inner);
    }
    inner.state.set(Stage::Running(i));
    let deadline = inner.deadlines.get()[i];
    let triggers = std::mem::take(&mut inner.triggers.borrow_mut()[i]);
    let mut waits = Vec::new();
    if i == 1 {
        let listeners = inner.listeners.borrow().clone();
        for l in listeners {
            waits.push(l.shutdown(deadline));
        }
    }
    if i == 2 {
        waits.push(wait_for_pool(&lp, deadline));
    }
    for t in triggers {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t(&lp))) {
            Ok(d) => waits.push(d),
            Err(p) => report(
                &lp,
                inner,
                "Exception in shutdown trigger",
                &Failure::from_panic(p, inner.at),
            ),
        }
    }
    // A little past the deadline: listeners abort their connections at it.
    let slack = deadline.saturating_add(Duration::from_millis(100));
    let weak = Rc::downgrade(inner);
    let lp2 = lp.clone();
    let d = DeferredList::new(waits)
        .consume_errors(true)
        .build()
        .add_timeout(slack, &lp)
        .add_both(move |r| {
            let Some(inner) = weak.upgrade() else {
                return Ok(());
            };
            inner.waiting.borrow_mut().take();
            if inner.state.get() == Stage::Done {
                return Ok(()); // forced
            }
            match r {
                Ok(crate::ListResult::All(results)) => {
                    for f in results.into_iter().filter_map(Result::err) {
                        report(&lp2, &inner, "shutdown trigger failed", &f);
                    }
                }
                Ok(_) => {}
                Err(f) => report(&lp2, &inner, "shutdown phase passed its deadline", &f),
            }
            // Next phase in a later callback: not inside this chain.
            let weak = Rc::downgrade(&inner);
            let _ = lp2.call_soon(move |_| {
                if let Some(inner) = weak.upgrade() {
                    run_phase(&inner, i + 1);
                }
            });
            Ok(())
        });
    if !d.is_called() {
        *inner.waiting.borrow_mut() = Some(d);
    }
}

/// The end: the loop stops, `done` fires, the signal handlers go.
fn finish(inner: &Inner) {
    if inner.state.replace(Stage::Done) == Stage::Done {
        return;
    }
    if let Some(lp) = inner.lp.upgrade() {
        lp.stop();
    }
    let handlers = std::mem::take(&mut *inner.handlers.borrow_mut());
    for h in handlers {
        h.remove();
    }
    let done = std::mem::take(&mut *inner.done.borrow_mut());
    for r in done {
        r.callback_if_pending(());
    }
}

/// Fires once every thread of the pool has finished the jobs submitted
/// before this call, or `deadline` passed (then closing the loop will not
/// wait for them either).
///
/// Each of the pool's `n` threads is handed one "gate" job (the pool is kept
/// at `n` threads meanwhile, so no new thread takes one): a gate opens when
/// all `n` have arrived, which means no thread is still in an older job.
fn wait_for_pool(lp: &Loop, deadline: Duration) -> Deferred<()> {
    let n = lp.pool_thread_count();
    if n == 0 {
        return succeed(());
    }
    if lp.set_max_threads(n).is_err() {
        return succeed(());
    }
    let until = later(Instant::now(), deadline);
    let gate = Arc::new((Mutex::new(0usize), Condvar::new()));
    let jobs: Vec<Deferred<bool>> = (0..n)
        .map(|_| {
            let gate = gate.clone();
            lp.defer_to_thread(move || {
                let (count, cv) = &*gate;
                let mut c = count.lock().unwrap_or_else(|e| e.into_inner());
                *c += 1;
                cv.notify_all();
                while *c < n {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    c = cv
                        .wait_timeout(c, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                true
            })
        })
        .collect();
    let lp2 = lp.clone();
    crate::gather_results(jobs).add_both(move |r| {
        if !matches!(&r, Ok(v) if v.iter().all(|&ok| ok)) {
            log::warn!(
                "deferloop: the thread pool did not finish its jobs before the shutdown deadline"
            );
            lp2.set_thread_pool_wait_on_close(false);
        }
        Ok(())
    })
}
