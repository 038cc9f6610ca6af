//! Host names: [`Target`] (`"host:port"` or a `SocketAddr`) and
//! [`HostResolver`], a small pool of threads of its own that runs
//! `getaddrinfo` — not the `defer_to_thread` pool, so a busy pool never shows
//! up as slow name lookups (asyncio's gh-112169). Each lookup has a timeout
//! and can be cancelled. Owns `HostResolver`, `Target`. Connecting to what a
//! lookup returns is `eyeballs.rs`. Tests: tests/net_resolve.rs.

use crate::deferred::Cancelled;
use crate::{fail, succeed, Deferred, Failure, Loop, Resolver};
use slab::Slab;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Default limit on one lookup.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Threads of the shared resolver pool, at most.
pub const DEFAULT_RESOLVER_THREADS: usize = 4;
/// A resolver thread with nothing to do for this long ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

/// Where to connect: an address, or a host name (or address text) and a
/// port. Built from a [`SocketAddr`], a `(host, port)` pair, or a
/// `"host:port"` string (`"db.internal:5432"`, `"[::1]:80"`).
#[derive(Clone, PartialEq, Eq)]
pub struct Target(TargetKind);

#[derive(Clone, PartialEq, Eq)]
enum TargetKind {
    Addr(SocketAddr),
    Host(String, u16),
    Invalid(String),
}

impl Target {
    /// A host name (or IP address text) and a port.
    pub fn host(host: impl Into<String>, port: u16) -> Target {
        let host = host.into();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => Target(TargetKind::Addr(SocketAddr::new(ip, port))),
            Err(_) => Target(TargetKind::Host(host, port)),
        }
    }

    /// The address, when no lookup is needed.
    pub fn as_addr(&self) -> Option<SocketAddr> {
        match &self.0 {
            TargetKind::Addr(a) => Some(*a),
            _ => None,
        }
    }

    pub(crate) fn parts(&self) -> Result<(String, u16), io::Error> {
        match &self.0 {
            TargetKind::Addr(a) => Ok((a.ip().to_string(), a.port())),
            TargetKind::Host(h, p) => Ok((h.clone(), *p)),
            TargetKind::Invalid(s) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{s:?} is not \"host:port\" or an address"),
            )),
        }
    }
}

impl From<SocketAddr> for Target {
    fn from(a: SocketAddr) -> Target {
        Target(TargetKind::Addr(a))
    }
}

impl From<(&str, u16)> for Target {
    fn from((h, p): (&str, u16)) -> Target {
        Target::host(h, p)
    }
}

impl From<&str> for Target {
    fn from(s: &str) -> Target {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Target(TargetKind::Addr(a));
        }
        match s.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !h.contains(':') => match p.parse() {
                Ok(port) => Target::host(h, port),
                Err(_) => Target(TargetKind::Invalid(s.to_owned())),
            },
            _ => Target(TargetKind::Invalid(s.to_owned())),
        }
    }
}

impl From<String> for Target {
    fn from(s: String) -> Target {
        Target::from(s.as_str())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            TargetKind::Addr(a) => a.fmt(f),
            TargetKind::Host(h, p) => write!(f, "{h}:{p}"),
            TargetKind::Invalid(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;
type Job = Box<dyn FnOnce(&Lookup) + Send>;

struct Queue {
    jobs: VecDeque<(u64, Job)>,
    next_id: u64,
    threads: usize,
    idle: usize,
}

struct Pool {
    lookup: Box<Lookup>,
    max_threads: usize,
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// A pool of name-lookup threads (see the module doc). Cheap to clone.
///
/// [`HostResolver::system`] is the process's shared one, over the system's
/// `getaddrinfo` (so `/etc/hosts` and `nsswitch.conf` apply);
/// [`with_lookup`](Self::with_lookup) makes one over your own function (a
/// fixed table, a service registry, a test double).
#[derive(Clone)]
pub struct HostResolver {
    pool: Arc<Pool>,
}

thread_local! {
    /// Resolvers of lookups in flight on this (loop) thread, by job id.
    static WAITING: RefCell<Slab<(u64, Resolver<Vec<SocketAddr>>)>> = const { RefCell::new(Slab::new()) };
}

impl HostResolver {
    /// The process's shared resolver: `getaddrinfo` on up to
    /// [`DEFAULT_RESOLVER_THREADS`] threads of its own.
    pub fn system() -> HostResolver {
        static SYSTEM: OnceLock<HostResolver> = OnceLock::new();
        SYSTEM
            .get_or_init(|| {
                HostResolver::with_lookup(DEFAULT_RESOLVER_THREADS, |host, port| {
                    (host, port).to_socket_addrs().map(Iterator::collect)
                })
            })
            .clone()
    }

    /// A resolver that answers with `lookup`, run on up to `threads`
    /// threads (at least one) of its own.
    pub fn with_lookup(
        threads: usize,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> HostResolver {
        HostResolver {
            pool: Arc::new(Pool {
                lookup: Box::new(lookup),
                max_threads: threads.max(1),
                queue: Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    next_id: 0,
                    threads: 0,
                    idle: 0,
                }),
                ready: Condvar::new(),
            }),
        }
    }

    /// Looks `host` up; the Deferred fires on `lp`'s thread with its
    /// addresses (in the order the system gave them), or fails with an
    /// `io::Error` naming the host: not found, no address, or no answer
    /// within `timeout` (`TimedOut`). An IP address is answered at once.
    /// Cancelling the Deferred abandons the lookup (a lookup already running
    /// finishes on its thread; its answer is dropped).
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::HostResolver;
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// let ev = EventLoop::new()?;
    /// let d = HostResolver::system().lookup(&ev, "localhost", 80, Duration::from_secs(5));
    /// let addrs = ev.run_until(d)?;
    /// assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lookup(
        &self,
        lp: &Loop,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Deferred<Vec<SocketAddr>> {
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return succeed(vec![SocketAddr::new(ip, port)]);
        }
        if lp.is_closed() {
            return fail(crate::deferred::LoopClosed);
        }
        let named = host.to_owned();
        let pool = self.pool.clone();
        let slot_cell = std::rc::Rc::new(std::cell::Cell::new(usize::MAX));
        let slot_for_cancel = slot_cell.clone();
        let (d, r) = Deferred::with_canceller(move |_| {
            let slot = slot_for_cancel.get();
            let taken = WAITING.with(|w| w.borrow_mut().try_remove(slot));
            if let Some((id, r)) = taken {
                let mut q = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
                q.jobs.retain(|(j, _)| *j != id);
                drop(q);
                drop(r); // the Deferred is being cancelled: it fires Cancelled
            }
        });
        let remote = lp.remote();
        let mut q = self.pool.queue.lock().unwrap_or_else(|e| e.into_inner());
        let id = q.next_id;
        q.next_id += 1;
        let slot = WAITING.with(|w| w.borrow_mut().insert((id, r)));
        slot_cell.set(slot);
        let host_owned = host.to_owned();
        let job: Job = Box::new(move |lookup: &Lookup| {
            // A panicking lookup function fails this lookup with its message
            // (not a silent timeout later).
            let result = catch_unwind(AssertUnwindSafe(|| lookup(&host_owned, port)))
                .unwrap_or_else(|p| {
                    let msg = crate::deferred::failure::panic_message(&*p);
                    Err(io::Error::other(format!(
                        "the lookup function panicked: {msg}"
                    )))
                });
            let _ = remote.call_soon_threadsafe(move |_| {
                let taken = WAITING.with(|w| {
                    let mut w = w.borrow_mut();
                    match w.get(slot) {
                        Some((j, _)) if *j == id => w.try_remove(slot),
                        _ => None,
                    }
                });
                let Some((_, r)) = taken else { return };
                let outcome = match result {
                    Ok(v) if v.is_empty() => Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("resolve {host_owned}: no addresses"),
                    )),
                    Ok(v) => Ok(v),
                    Err(e) => Err(io::Error::new(
                        e.kind(),
                        format!("resolve {host_owned}: {e}"),
                    )),
                };
                r.resolve_if_pending(outcome.map_err(Failure::new));
            });
        });
        q.jobs.push_back((id, job));
        let spawn = q.idle == 0 && q.threads < self.pool.max_threads;
        if spawn {
            q.threads += 1;
        }
        drop(q);
        if spawn {
            let pool = self.pool.clone();
            let started = std::thread::Builder::new()
                .name("deferloop-resolver".into())
                .spawn(move || worker(&pool));
            if started.is_err() {
                self.pool
                    .queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .threads -= 1;
            }
        }
        self.pool.ready.notify_one();
        d.add_timeout_with(timeout, lp, move |r, after| match r {
            Err(f) if f.check::<Cancelled>() => Err(Failure::new(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("resolve {named}: no answer within {after:?}"),
            ))),
            r => r,
        })
    }
}

fn worker(pool: &Pool) {
    loop {
        let job = {
            let mut q = pool.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some((_, job)) = q.jobs.pop_front() {
                    break job;
                }
                q.idle += 1;
                let (g, t) = pool
                    .ready
                    .wait_timeout(q, IDLE_EXIT)
                    .unwrap_or_else(|e| e.into_inner());
                q = g;
                q.idle -= 1;
                if t.timed_out() && q.jobs.is_empty() {
                    q.threads -= 1;
                    return;
                }
            }
        };
        let lookup: &Lookup = &*pool.lookup;
        // The job catches a panicking lookup function itself; this keeps the
        // thread alive should anything else in it panic.
        let _ = catch_unwind(AssertUnwindSafe(|| job(lookup)));
    }
}

impl fmt::Debug for HostResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostResolver")
            .field("max_threads", &self.pool.max_threads)
            .finish()
    }
}
