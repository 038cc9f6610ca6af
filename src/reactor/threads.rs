//! Blocking work on a thread pool: `Loop::defer_to_thread`. Owns `Pool` and the
//! loop-side table of waiting resolvers. The only place the loop spawns threads.
//!
//! A job is a `Send` closure; its `Resolver` is `!Send` and stays on the loop
//! thread in a slab, keyed by the job's id. The pool thread sends back only the
//! id and the `Send` result, through the loop's `Remote` (the threadsafe path), and
//! the loop fires the Deferred. Threads start lazily up to a maximum (default
//! `min(32, cores + 4)`, as asyncio's executor); beyond that jobs queue.
//! Cancelling a job's Deferred removes the job if it has not started; a thread
//! cannot be stopped, so a running job finishes and its late result is dropped
//! quietly. Tests: tests/threads_pool.rs.

use super::remote::CrossThread;
use super::{Inner, Loop};
use crate::deferred::{Deferred, Resolver};
use crate::timers::later;
use crate::{Error, Failure};
use slab::Slab;
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe, Location};
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

struct PoolQueue {
    jobs: VecDeque<(usize, Job)>,
    idle: usize,
    /// Jobs a thread is running now.
    running: usize,
    shutdown: bool,
}

struct PoolShared {
    queue: Mutex<PoolQueue>,
    ready: Condvar,
    /// Signalled when a job ends (for a closing loop's wait).
    ended: Condvar,
}

/// How long closing the loop waits for running pool jobs, unless set
/// otherwise (asyncio's `shutdown_default_executor` waits as long).
pub const DEFAULT_POOL_CLOSE_TIMEOUT: Duration = Duration::from_secs(300);

pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
    /// Resolvers of jobs not yet delivered, as `Box<Resolver<T>>`.
    waiting: Slab<Box<dyn Any>>,
    pub(crate) max_threads: usize,
    /// How long `shutdown` waits for running jobs (zero: not at all).
    pub(crate) close_timeout: Duration,
}

impl Pool {
    pub(crate) fn new() -> Pool {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Pool {
            shared: Arc::new(PoolShared {
                queue: Mutex::new(PoolQueue {
                    jobs: VecDeque::new(),
                    idle: 0,
                    running: 0,
                    shutdown: false,
                }),
                ready: Condvar::new(),
                ended: Condvar::new(),
            }),
            threads: Vec::new(),
            waiting: Slab::new(),
            max_threads: (cores + 4).min(32),
            close_timeout: DEFAULT_POOL_CLOSE_TIMEOUT,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolQueue> {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn submit(&mut self, id: usize, job: Job) -> std::io::Result<()> {
        let spawn = {
            let mut q = self.lock();
            q.jobs.push_back((id, job));
            q.idle == 0 && self.threads.len() < self.max_threads
        };
        if spawn {
            let shared = self.shared.clone();
            let t = std::thread::Builder::new()
                .name("deferloop-pool".into())
                .spawn(move || worker(shared))?;
            self.threads.push(t);
        }
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Removes job `id` if it has not started; returns whether it was removed.
    fn unqueue(&self, id: usize) -> bool {
        let mut q = self.lock();
        match q.jobs.iter().position(|(j, _)| *j == id) {
            Some(pos) => {
                q.jobs.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Number of threads started so far.
    pub(crate) fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// Stops the pool: queued jobs are dropped; running ones are waited for
    /// up to `close_timeout`, then left to finish on their threads (with a
    /// warning). Returns what must be dropped.
    pub(crate) fn shutdown(&mut self) -> Vec<Box<dyn Any>> {
        let dropped: Vec<_> = {
            let mut q = self.lock();
            q.shutdown = true;
            q.jobs.drain(..).collect()
        };
        self.shared.ready.notify_all();
        drop(dropped);
        let deadline = later(Instant::now(), self.close_timeout);
        let mut q = self.lock();
        while q.running > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            q = self
                .shared
                .ended
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let running = q.running;
        drop(q);
        if running == 0 {
            // Each thread is leaving its loop: joined at once.
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        } else {
            if !self.close_timeout.is_zero() {
                log::warn!(
                    "deferloop: {running} thread pool jobs still running {:?} after the loop \
                     closed: left to finish, their results dropped",
                    self.close_timeout
                );
            }
            self.threads.clear();
        }
        self.waiting.drain().collect()
    }
}

fn worker(shared: Arc<PoolShared>) {
    loop {
        let job = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if q.shutdown {
                    return;
                }
                if let Some((_, job)) = q.jobs.pop_front() {
                    q.running += 1;
                    break job;
                }
                q.idle += 1;
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                q.idle -= 1;
            }
        };
        // Counted out even if the job unwinds (its result's `drop` may
        // panic where the closed loop drops it): a close must not wait for
        // a job that is gone.
        let _ended = Ended(&shared);
        job();
    }
}

/// Counts a running job out when dropped.
struct Ended<'a>(&'a PoolShared);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.running -= 1;
        drop(q);
        self.0.ended.notify_all();
    }
}

impl Loop {
    /// Runs the blocking `f` on a pool thread and returns a Deferred fired, on
    /// the loop thread, with its value — or with a failure if it panicked.
    ///
    /// Cancelling the Deferred removes the job if no thread has started it.
    /// A started job cannot be stopped: it runs to the end and its result is
    /// dropped quietly. The pool is shut down when the loop closes (queued jobs
    /// are dropped; running ones are waited for, at most
    /// [`DEFAULT_POOL_CLOSE_TIMEOUT`] unless
    /// [set otherwise](Self::set_thread_pool_close_timeout)).
    ///
    /// A closed loop, or a thread that cannot be spawned, gives a failed Deferred.
    ///
    /// # Examples
    /// ```
    /// use deferloop::{EventLoop, Failure};
    ///
    /// let ev = EventLoop::new()?;
    /// let d = ev
    ///     .defer_to_thread(|| (1..=10u64).product::<u64>()) // on a pool thread
    ///     .add_callback(|n| Ok(n / 10)); // back on the loop thread
    /// assert_eq!(ev.run_until(d).unwrap(), 362_880);
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn defer_to_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Deferred<T> {
        let loc = Location::caller();
        if let Err(e) = self.inner.check_open() {
            return crate::deferred::fail(crate::deferred::errors::loop_failure(e, loc));
        }
        let weak = Rc::downgrade(&self.inner);
        let id_cell = Rc::new(std::cell::Cell::new(usize::MAX));
        let id_for_cancel = id_cell.clone();
        let (d, r) = Deferred::<T>::with_canceller(move |_r: &Resolver<T>| {
            let Some(inner) = weak.upgrade() else { return };
            let mut pool = inner.pool.borrow_mut();
            let id = id_for_cancel.get();
            if pool.unqueue(id) {
                let resolver = pool.waiting.try_remove(id);
                drop(pool);
                drop(resolver);
            }
            // Otherwise the job runs on; `Cancelled` follows, and the late
            // result finds the Deferred already fired and is dropped.
        });
        d.tag_wait(|| crate::deferred::registry::Wait::ThreadJob);
        let mut pool = self.inner.pool.borrow_mut();
        let id = pool.waiting.insert(Box::new(r));
        id_cell.set(id);
        let shared: Arc<CrossThread> = self.inner.shared.clone();
        let job: Job = Box::new(move || {
            let result = panic::catch_unwind(AssertUnwindSafe(f));
            let remote = super::Remote { shared };
            // A closed loop refuses the call: the result has nowhere to go.
            let _ =
                remote.call_soon_threadsafe(move |lp| lp.deliver_thread_result(id, result, loc));
        });
        if let Err(e) = pool.submit(id, job) {
            let r = pool.waiting.try_remove(id);
            drop(pool);
            if let Some(r) = r.and_then(|b| b.downcast::<Resolver<T>>().ok()) {
                r.errback_if_pending(Failure::new(e));
            }
        }
        d
    }

    fn deliver_thread_result<T: 'static>(
        &self,
        id: usize,
        result: std::thread::Result<T>,
        loc: &'static Location<'static>,
    ) {
        let resolver = self.inner.pool.borrow_mut().waiting.try_remove(id);
        let Some(r) = resolver.and_then(|b| b.downcast::<Resolver<T>>().ok()) else {
            return; // cancelled before it started, or the loop was closing
        };
        let r: Resolver<T> = *r;
        let outcome = result.map_err(|p| Failure::from_panic(p, loc));
        // Already fired means cancelled: the late result is dropped quietly.
        r.resolve_if_pending(outcome);
    }

    /// The most threads the pool may start (default `min(32, cores + 4)`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for zero.
    pub fn set_max_threads(&self, n: usize) -> Result<(), Error> {
        if n == 0 {
            return Err(Error::InvalidInput("the pool needs at least one thread"));
        }
        self.inner.pool.borrow_mut().max_threads = n;
        Ok(())
    }

    /// Whether closing the loop waits for running pool jobs (default `true`,
    /// for at most the [close timeout](Self::set_thread_pool_close_timeout)).
    /// `false` is a close timeout of zero; `true` after it restores the
    /// default, and keeps a timeout set otherwise.
    pub fn set_thread_pool_wait_on_close(&self, wait: bool) {
        let mut pool = self.inner.pool.borrow_mut();
        if !wait {
            pool.close_timeout = Duration::ZERO;
        } else if pool.close_timeout.is_zero() {
            pool.close_timeout = DEFAULT_POOL_CLOSE_TIMEOUT;
        }
    }

    /// How long closing the loop waits for running pool jobs (default
    /// [`DEFAULT_POOL_CLOSE_TIMEOUT`], 300 s; `Duration::MAX`: until they
    /// end). Jobs still running then are left to finish on their threads,
    /// their results dropped, with a warning in the log. A job cannot be
    /// stopped, so this is what keeps a stuck one from holding `close`
    /// (and the program's exit) forever.
    pub fn set_thread_pool_close_timeout(&self, timeout: Duration) {
        self.inner.pool.borrow_mut().close_timeout = timeout;
    }

    /// Pool threads started so far.
    pub fn pool_thread_count(&self) -> usize {
        self.inner.pool.borrow().thread_count()
    }
}

impl Inner {
    pub(crate) fn shutdown_pool(&self) -> Vec<Box<dyn Any>> {
        self.pool.borrow_mut().shutdown()
    }
}
