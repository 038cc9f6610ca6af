//! The remote queue: the only way into the loop from other threads. Owns
//! `Remote` and `CrossThread`, the part of the loop's state that is `Send + Sync`.
//!
//! `call_soon_threadsafe` pushes a `Send` closure (stored inline when small,
//! reactor/callback.rs) on a lock-free list of blocks (remote_queue.rs: one
//! compare-and-swap to claim a slot, a release store to publish it) and wakes
//! the loop through a `mio::Waker` — but only if no wake is pending already:
//! an atomic flag coalesces every call made while a wake is in flight into
//! that one `eventfd` write, where asyncio pays one socket write per call. The
//! loop clears the flag *before* it reads the queue's tail, so a call claimed
//! after that read always wakes it again; one claimed before it but not yet
//! written leaves the loop a zero poll timeout, to take it next turn. A call
//! costs that claim, the store and a load of the flag: no lock, so a sender
//! preempted halfway never holds up the others. The loop runs the calls it
//! took in from their slots, all in one task (turn.rs, `run_remote_calls`). `call_blocking`'s waiters, a
//! rare path, keep a mutex of their own. Tests: tests/loop_threadsafe.rs,
//! tests/loop_callbacks.rs, remote_queue.rs.

use super::published::MonitorState;
use super::remote_queue::{Drained, JobQueue, RemoteFn, RemoteJob};
use super::Loop;
use crate::deferred::Deferred;
use crate::Error;
use crate::Failure;
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// What blocking calls need besides the queue: whether the loop runs, and
/// who waits for it.
pub(crate) struct Control {
    pub(crate) running: bool,
    /// Blocking calls waiting for a result, told when the loop stops or closes.
    waiters: Vec<Weak<dyn Waiter>>,
}

/// A blocking call's slot, as seen by the loop when it stops or closes.
trait Waiter: Send + Sync {
    fn abandon(&self, why: fn() -> Error);
}

struct Slot<T> {
    value: Mutex<Option<Result<T, Error>>>,
    filled: Condvar,
}

impl<T: Send> Slot<T> {
    fn fill(&self, r: Result<T, Error>) {
        let mut v = self.value.lock().unwrap_or_else(|e| e.into_inner());
        if v.is_none() {
            *v = Some(r);
            self.filled.notify_all();
        }
    }
}

impl<T: Send> Waiter for Slot<T> {
    fn abandon(&self, why: fn() -> Error) {
        self.fill(Err(why()));
    }
}

/// State shared between the loop and its `Remote`s and monitors.
pub(crate) struct CrossThread {
    jobs: JobQueue,
    control: Mutex<Control>,
    wake_pending: AtomicBool,
    waker: mio::Waker,
    wakes: AtomicU64,
    pub(crate) monitor: MonitorState,
    /// The thread that made the loop, the only one it runs on (`EventLoop`
    /// is `!Send`): a blocking call from it could never be answered.
    owner: ThreadId,
}

impl CrossThread {
    pub(crate) fn new(waker: mio::Waker) -> CrossThread {
        CrossThread {
            jobs: JobQueue::new(),
            control: Mutex::new(Control {
                running: false,
                waiters: Vec::new(),
            }),
            wake_pending: AtomicBool::new(false),
            waker,
            wakes: AtomicU64::new(0),
            monitor: MonitorState::default(),
            owner: std::thread::current().id(),
        }
    }

    /// The blocking calls' state, even if a thread panicked while holding
    /// the lock (a flag and a list of weak references: always consistent).
    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job` and wakes the loop. Inlined into the caller, as the
    /// queue's own `push` is: a call is then a few loads, a compare-and-swap
    /// and two stores, with no call out.
    #[inline]
    fn push(&self, job: RemoteJob) -> Result<(), Error> {
        if self.jobs.push(job).is_err() {
            return Err(Error::Closed);
        }
        self.wake();
        Ok(())
    }

    /// Wakes the loop unless a wake is already pending.
    #[inline]
    pub(crate) fn wake(&self) {
        // A plain load first: while a wake is pending, callers only read the
        // shared cache line instead of bouncing it with a read-modify-write.
        // `SeqCst`, as the sender's claim of its slot and the loop's clear of
        // the flag and read of the tail are: a claim the loop's read missed
        // comes after its clear in that one order, so this load sees `false`
        // (or a later `true` whose setter wakes the loop).
        if !self.wake_pending.load(Ordering::SeqCst) {
            self.wake_now();
        }
    }

    #[inline(never)]
    fn wake_now(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.waker.wake() {
                log::error!("deferloop: waking the loop failed: {e}");
            }
        }
    }

    /// Whether a wake is pending (some call may be queued).
    #[inline]
    pub(crate) fn wake_pending(&self) -> bool {
        self.wake_pending.load(Ordering::Acquire)
    }

    /// Notes the calls queued so far (step 4): the next `take_jobs` takes
    /// them and no later ones, which wake the loop again.
    pub(crate) fn mark_jobs(&self) {
        self.wake_pending.swap(false, Ordering::SeqCst);
        self.jobs.mark();
    }

    /// Hands the calls noted by the last `mark_jobs` to `each`, in order, up
    /// to one still being written by its sender. Returns whether it stopped
    /// there: the loop then takes the rest in its next turn, without a
    /// wake-up. `each` may run the call, and panic: the next `take_jobs`
    /// goes on from the call after it.
    pub(crate) fn take_jobs(&self, each: impl FnMut(RemoteJob)) -> bool {
        self.jobs.take_marked(false, each) == Drained::Behind
    }

    /// Refuses further calls and returns what was queued, to be dropped.
    pub(crate) fn close(&self) -> Vec<RemoteJob> {
        self.jobs.close();
        let mut jobs = Vec::new();
        // Waits for the sends that claimed a slot before the close.
        self.jobs.drain(true, |j| jobs.push(j));
        let waiters = std::mem::take(&mut self.control().waiters);
        for w in waiters.iter().filter_map(Weak::upgrade) {
            w.abandon(|| Error::Closed);
        }
        jobs
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.jobs.is_closed()
    }

    /// Blocks allocated by the queue (one at rest).
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> usize {
        self.jobs.blocks()
    }

    pub(crate) fn set_running(&self, running: bool) {
        let waiters = {
            let mut c = self.control();
            c.running = running;
            if running {
                return;
            }
            std::mem::take(&mut c.waiters)
        };
        for w in waiters.iter().filter_map(Weak::upgrade) {
            w.abandon(|| Error::Stopped);
        }
    }
}

/// A `Send + Sync + Clone` handle for reaching a loop from other threads.
///
/// It can only queue `Send` closures, which run on the loop thread with the
/// loop passed in; everything else about the loop is `!Send`, so calling the
/// single-threaded API from another thread does not compile:
/// ```compile_fail
/// let ev = deferloop::EventLoop::new().unwrap();
/// let lp = ev.to_loop();
/// std::thread::spawn(move || lp.stop()); // `Loop` is not `Send`
/// ```
///
/// # Examples
/// ```
/// use deferloop::EventLoop;
///
/// let ev = EventLoop::new()?;
/// let remote = ev.remote();
/// let t = std::thread::spawn(move || {
///     remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
/// });
/// ev.run()?; // sleeps in poll until the other thread's call wakes it
/// t.join().unwrap();
/// # Ok::<(), deferloop::Error>(())
/// ```
#[derive(Clone)]
pub struct Remote {
    pub(crate) shared: Arc<CrossThread>,
}

impl Remote {
    /// Queues `f` to run on the loop thread in a later turn, and wakes the loop.
    ///
    /// Calls from one thread run in the order they were made. A burst of calls
    /// costs one wake-up system call, not one per call. A closure capturing up
    /// to two words is queued without allocating.
    ///
    /// `f` must be `Send`: it is made on one thread and run on the loop's.
    /// ```compile_fail
    /// use deferloop::EventLoop;
    /// use std::rc::Rc;
    ///
    /// let ev = EventLoop::new().unwrap();
    /// let not_send = Rc::new(1);
    /// ev.remote().call_soon_threadsafe(move |_| drop(not_send)).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Closed`] if the loop is closed or dropped; `f` is dropped.
    #[track_caller]
    pub fn call_soon_threadsafe(
        &self,
        f: impl FnOnce(&Loop) + Send + 'static,
    ) -> Result<(), Error> {
        self.shared.push(RemoteJob {
            f: RemoteFn::new(f),
            loc: Location::caller(),
        })
    }

    /// Runs `f` on the loop and blocks this thread until the Deferred it
    /// returns fires, for at most `timeout` (asyncio's
    /// `run_coroutine_threadsafe(...).result(timeout)`).
    ///
    /// A `timeout` of `Duration::MAX` waits without limit.
    ///
    /// Called on the loop's own thread (from one of its callbacks), it fails
    /// at once: the loop cannot run the call while its thread waits. Loops
    /// that block on each other in a cycle — loop A's callback blocks on B
    /// while B's blocks on A, as two [`Cores`](crate::cores::Cores) loops
    /// may — would wait forever; a call that would close such a cycle fails
    /// at once too (each blocking call records which loop's thread it waits
    /// for, and the check walks those records). A loop's callback that needs
    /// another loop's answer is better off with `call_soon_threadsafe` and a
    /// reply queued back, which never blocks a loop.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] on the loop's own thread, or if the wait would
    /// close a cycle of loops blocked on each other (nothing is queued);
    /// [`Error::Failed`] with the failure itself if the Deferred failed;
    /// [`Error::TimedOut`]; [`Error::Closed`] if the loop is or becomes closed;
    /// [`Error::NotRunning`] if the loop is not inside `run()`/`run_once()`
    /// when called (a loop driven by a host through
    /// [`Loop::run_once_timeout`] counts as running from its first turn until
    /// a turn ends stopped); [`Error::Stopped`] if it stops before the result
    /// arrives.
    #[track_caller]
    pub fn call_blocking<T: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&Loop) -> Deferred<T> + Send + 'static,
    ) -> Result<T, Error> {
        let _waiting = super::waits::begin(self.shared.owner)?;
        let slot = Arc::new(Slot::<T> {
            value: Mutex::new(None),
            filled: Condvar::new(),
        });
        let loop_slot = slot.clone();
        let job = RemoteJob {
            f: RemoteFn::new(move |lp: &Loop| {
                let d = f(lp);
                d.add_both(move |r: Result<T, Failure>| {
                    loop_slot.fill(r.map_err(Error::Failed));
                    Ok(())
                })
                .detach();
            }),
            loc: Location::caller(),
        };
        {
            // Under the lock, so a close or stop (which take the waiters
            // under it) either sees this waiter or comes before the checks.
            let mut c = self.shared.control();
            if self.shared.is_closed() {
                return Err(Error::Closed);
            }
            if !c.running {
                return Err(Error::NotRunning);
            }
            let weak: Weak<dyn Waiter> = Arc::downgrade(&(slot.clone() as Arc<dyn Waiter>));
            c.waiters.retain(|w| w.strong_count() > 0);
            c.waiters.push(weak);
            self.shared.jobs.push(job).map_err(|_| Error::Closed)?;
        }
        self.shared.wake();
        let deadline = crate::timers::later(Instant::now(), timeout);
        let mut v = slot.value.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = v.take() {
                return r;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::TimedOut);
            }
            v = slot
                .filled
                .wait_timeout(v, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Asks the loop to stop after its current turn (a `call_soon_threadsafe` of `stop`).
    ///
    /// # Errors
    /// [`Error::Closed`] if the loop is closed.
    #[track_caller]
    pub fn stop(&self) -> Result<(), Error> {
        self.call_soon_threadsafe(|lp| lp.stop())
    }

    /// Whether the loop has been closed (or dropped).
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// How many calls were queued, and how many wake-up system calls they cost.
    pub fn wake_stats(&self) -> (u64, u64) {
        let calls = self.shared.jobs.calls();
        (calls, self.shared.wakes.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("closed", &self.is_closed())
            .finish()
    }
}
