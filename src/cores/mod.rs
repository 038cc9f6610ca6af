//! One loop per core: [`Cores`] starts N threads, each with its own
//! [`EventLoop`], spreads a listener's connections over them, lets them call
//! each other ([`Peers`]), and stops them together.
//!
//! The shape of nginx's workers and of thread-per-core servers: the loops
//! share nothing. Everything a loop owns (its `Loop`, transports, protocols,
//! Deferreds) stays `!Send` on its thread; only [`Remote`]s, [`Peers`] and
//! `Send` closures cross. A listener is spread one of two ways ([`Spread`]):
//! each loop accepts from its own `SO_REUSEPORT` socket on the same port and
//! the kernel balances new connections (Linux); or loop 0 accepts and hands
//! each socket to the next loop in turn through its `Remote` (portable).
//!
//! Shutdown is coordinated: [`Cores::shutdown`] (or [`Peers::shutdown`], or
//! any loop ending — a failed setup, a selector error, a `stop()`) asks every
//! loop to drain: stop accepting, call the `on_drain` hook, wait up to the
//! grace period for the connections it accepted to close, abort the rest,
//! stop. [`Cores::wait`] returns the first loop's error.

mod local;
mod pin;

use crate::net::{bind_reuseport, Protocol, SockAddr};
use crate::{Error, EventLoop, Failure, Loop, Remote};
use local::{drain, install, Local, LOCAL};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How a listener's connections reach the loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// Each loop listens on its own `SO_REUSEPORT` socket on the same
    /// address; the kernel spreads connections by a hash of the peer (Linux;
    /// other systems share the port without balancing it).
    ReusePort,
    /// Loop 0 accepts, and hands each connection to the next loop in turn
    /// (itself included) through its `Remote`. Works everywhere.
    HandOff,
}

impl Default for Spread {
    /// `ReusePort` on Linux and Android, `HandOff` elsewhere.
    fn default() -> Spread {
        if cfg!(any(target_os = "linux", target_os = "android")) {
            Spread::ReusePort
        } else {
            Spread::HandOff
        }
    }
}

type Factory = Arc<dyn Fn(&SockAddr) -> Box<dyn Protocol> + Send + Sync>;
type Setup = dyn Fn(&Loop, &Peers) -> Result<(), Error> + Send + Sync;
type First = Box<dyn FnOnce(&Loop, &Peers) -> Result<(), Error> + Send>;
type Hook = Arc<dyn Fn(&Loop) + Send + Sync>;

/// The default time a drain waits for connections to close.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// A listener's sockets, bound before the loops start (so its port is known).
struct Spec {
    factory: Factory,
    spread: Spread,
    /// `ReusePort`: one per loop; `HandOff`: one, for loop 0.
    socks: Mutex<Vec<Option<TcpListener>>>,
}

/// Configures a [`Cores`] pool; [`start`](Self::start) starts it.
pub struct CoresBuilder {
    loops: usize,
    pin: bool,
    grace: Duration,
    listens: Vec<(SocketAddr, Spread, Factory)>,
    first: Option<First>,
    on_drain: Option<Hook>,
}

/// N threads, each with its own event loop. See the [module](self) docs.
///
/// # Examples
/// ```
/// use deferloop::cores::Cores;
/// use deferloop::net::{Protocol, Transport};
///
/// struct Echo;
/// impl Protocol for Echo {
///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
///         t.write(data);
///     }
/// }
///
/// let cores = Cores::builder()
///     .loops(2)
///     .listen_tcp("127.0.0.1:0".parse().unwrap(), |_| Echo)
///     .start(|_lp, peers| {
///         println!("loop {} of {} is up", peers.index(), peers.len());
///         Ok(())
///     })?;
/// let addr = cores.local_addrs()[0];
/// # let _ = addr;
/// cores.shutdown();
/// cores.wait()?;
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct Cores {
    shared: Arc<Pool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
}

/// What the loops of a pool share: `Send + Sync`, held by [`Peers`].
struct Pool {
    st: Mutex<Progress>,
    changed: Condvar,
}

#[derive(Default)]
struct Progress {
    remotes: Vec<Option<Remote>>,
    /// Loops that finished their setup (well or not).
    set_up: usize,
    /// Loops whose thread has ended.
    ended: usize,
    shutting_down: bool,
    error: Option<Error>,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, Progress>) -> MutexGuard<'a, Progress> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Records the first error; a later one is dropped.
    fn fail(&self, e: Error) {
        let mut st = self.lock();
        if st.error.is_none() {
            st.error = Some(e);
        }
        self.changed.notify_all();
    }

    /// Asks every loop to drain and stop (once).
    fn shutdown(&self) {
        let remotes: Vec<Remote> = {
            let mut st = self.lock();
            if std::mem::replace(&mut st.shutting_down, true) {
                return;
            }
            self.changed.notify_all();
            st.remotes.iter().flatten().cloned().collect()
        };
        for r in remotes {
            let _ = r.call_soon_threadsafe(drain); // a loop already gone: fine
        }
    }
}

/// A loop's view of its pool: its index, and a way to reach every loop.
/// `Send + Sync + Clone`: give it to threads and other loops freely.
#[derive(Clone)]
pub struct Peers {
    index: usize,
    remotes: Arc<[Remote]>,
    shared: Arc<Pool>,
}

impl Peers {
    /// This loop's index, `0..len()`. Loop 0 is the designated one (see
    /// [`CoresBuilder::on_first`]).
    pub fn index(&self) -> usize {
        self.index
    }

    /// How many loops the pool has.
    pub fn len(&self) -> usize {
        self.remotes.len()
    }

    /// Always `false`: a pool has at least one loop.
    pub fn is_empty(&self) -> bool {
        self.remotes.is_empty()
    }

    /// Loop `i`'s remote handle.
    ///
    /// # Panics
    /// If `i >= len()`, as indexing does; [`call`](Self::call) returns an
    /// error instead.
    pub fn remote(&self, i: usize) -> &Remote {
        &self.remotes[i]
    }

    /// Runs `f` on loop `i` in a later turn (`call_soon_threadsafe`); `f`
    /// may be run on this very loop.
    ///
    /// What belongs to one loop stays there: `f` is `Send`, so it cannot
    /// carry this loop's handle, transports or Deferreds to another.
    /// ```compile_fail
    /// # use deferloop::cores::Cores;
    /// let cores = Cores::builder().loops(2).start(|lp, peers| {
    ///     let mine = lp.clone();
    ///     peers.call(1, move |_| mine.stop()) // `Loop` is not `Send`
    /// });
    /// ```
    ///
    /// # Errors
    /// [`Error::Closed`] if loop `i` has ended; [`Error::InvalidInput`] if
    /// there is no loop `i` (`i >= len()`).
    #[track_caller]
    pub fn call(&self, i: usize, f: impl FnOnce(&Loop) + Send + 'static) -> Result<(), Error> {
        let r = self.remotes.get(i);
        r.ok_or(Error::InvalidInput("no such loop in the pool"))?
            .call_soon_threadsafe(f)
    }

    /// Asks every loop to drain and stop (as [`Cores::shutdown`]).
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }

    /// Stops the pool with `e` as its error (what [`Cores::wait`] returns,
    /// unless another loop failed first).
    pub fn fail(&self, e: Error) {
        self.shared.fail(e);
        self.shared.shutdown();
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("index", &self.index)
            .field("len", &self.len())
            .finish()
    }
}

impl std::fmt::Debug for CoresBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<SocketAddr> = self.listens.iter().map(|l| l.0).collect();
        f.debug_struct("CoresBuilder")
            .field("loops", &self.loops)
            .field("pin", &self.pin)
            .field("grace", &self.grace)
            .field("listens", &addrs)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Cores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cores")
            .field("loops", &self.threads.len())
            .field("local_addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

impl Cores {
    /// A builder: one loop per CPU this process may use, not pinned.
    pub fn builder() -> CoresBuilder {
        CoresBuilder {
            loops: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pin: false,
            grace: DEFAULT_GRACE,
            listens: Vec::new(),
            first: None,
            on_drain: None,
        }
    }

    /// How many loops run.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Always `false`: a pool has at least one loop.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// The addresses the listeners bound, in the order of `listen_tcp` calls.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Loop `i`'s remote handle, if it has started and not ended.
    pub fn remote(&self, i: usize) -> Option<Remote> {
        self.shared.lock().remotes.get(i).cloned().flatten()
    }

    /// Asks every loop to drain and stop; returns at once (see [`wait`](Self::wait)).
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }

    /// Whether a shutdown has begun (asked for, or a loop ended).
    pub fn is_shutting_down(&self) -> bool {
        self.shared.lock().shutting_down
    }

    /// Waits until every loop has ended.
    ///
    /// # Errors
    /// The first error of any loop: its setup's, its `run()`'s, one given to
    /// [`Peers::fail`], or [`Error::Failed`] for a thread that panicked.
    pub fn wait(mut self) -> Result<(), Error> {
        self.join()
    }

    fn join(&mut self) -> Result<(), Error> {
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                self.shared
                    .fail(failed("a loop thread panicked outside its loop"));
            }
        }
        self.shared.lock().error.take().map_or(Ok(()), Err)
    }
}

impl Drop for Cores {
    /// Shuts the pool down and waits for its threads.
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shared.shutdown();
            let _ = self.join();
        }
    }
}

impl CoresBuilder {
    /// How many loops (threads) to start; at least one.
    pub fn loops(mut self, n: usize) -> Self {
        self.loops = n.max(1);
        self
    }

    /// Pins loop `i` to the `i`-th CPU this process may use (modulo their
    /// number). Linux only; elsewhere it does nothing.
    pub fn pin(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// How long a drain waits for connections to close before aborting them
    /// (default [`DEFAULT_GRACE`]; `Duration::MAX` never aborts them).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Listens on `addr`, spreading connections over the loops in the
    /// [`Spread::default`] way; each gets a protocol from `factory`, called
    /// on the loop that serves it. The socket is bound by
    /// [`start`](Self::start) (port 0: see [`Cores::local_addrs`]).
    pub fn listen_tcp<P: Protocol>(
        self,
        addr: SocketAddr,
        factory: impl Fn(&SockAddr) -> P + Send + Sync + 'static,
    ) -> Self {
        self.listen_tcp_spread(addr, Spread::default(), factory)
    }

    /// As [`listen_tcp`](Self::listen_tcp), spread as `spread` says.
    pub fn listen_tcp_spread<P: Protocol>(
        mut self,
        addr: SocketAddr,
        spread: Spread,
        factory: impl Fn(&SockAddr) -> P + Send + Sync + 'static,
    ) -> Self {
        let f: Factory = Arc::new(move |peer| Box::new(factory(peer)) as Box<dyn Protocol>);
        self.listens.push((addr, spread, f));
        self
    }

    /// Runs `f` on loop 0 only, before its setup: where to install what one
    /// loop must own for the whole process (signal handlers, say).
    pub fn on_first(
        mut self,
        f: impl FnOnce(&Loop, &Peers) -> Result<(), Error> + Send + 'static,
    ) -> Self {
        self.first = Some(Box::new(f));
        self
    }

    /// Runs `f` on each loop when its drain begins, after its listeners
    /// stopped: close or say goodbye to connections of your own.
    pub fn on_drain(mut self, f: impl Fn(&Loop) + Send + Sync + 'static) -> Self {
        self.on_drain = Some(Arc::new(f));
        self
    }

    /// Binds the listeners, starts the loops, runs `setup` on each (on its
    /// own thread, after the listeners are installed), and returns once every
    /// loop is set up and running.
    ///
    /// # Errors
    /// A bind error (nothing started then); or the first setup error or
    /// panic, after every loop has been stopped again.
    pub fn start(
        self,
        setup: impl Fn(&Loop, &Peers) -> Result<(), Error> + Send + Sync + 'static,
    ) -> Result<Cores, Error> {
        let n = self.loops;
        let mut specs = Vec::new();
        let mut addrs = Vec::new();
        for (addr, spread, factory) in self.listens {
            let socks = bind_all(addr, spread, n)?;
            addrs.push(socks[0].local_addr()?);
            specs.push(Spec {
                factory,
                spread,
                socks: Mutex::new(socks.into_iter().map(Some).collect()),
            });
        }
        let shared = Arc::new(Pool {
            st: Mutex::new(Progress {
                remotes: vec![None; n],
                ..Progress::default()
            }),
            changed: Condvar::new(),
        });
        let start = Arc::new(Start {
            specs,
            setup: Box::new(setup),
            first: Mutex::new(self.first),
            on_drain: self.on_drain,
            grace: self.grace,
            pin: self.pin.then(pin::allowed_cpus),
        });
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (start, shared2) = (start.clone(), shared.clone());
            let t = std::thread::Builder::new()
                .name(format!("deferloop-{i}"))
                .spawn(move || loop_thread(i, n, &start, &shared2));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    shared.fail(Error::Io(e));
                    shared.lock().set_up += n - i; // no wait for the rest
                    break;
                }
            }
        }
        let mut cores = Cores {
            shared,
            threads,
            addrs,
        };
        let mut st = cores.shared.lock();
        while st.set_up < n {
            st = cores.shared.wait(st);
        }
        let failed = st.error.is_some();
        drop(st);
        if failed {
            cores.shared.shutdown();
            return Err(cores.join().expect_err("an error was recorded"));
        }
        Ok(cores)
    }
}

/// Binds `addr` as `spread` needs: `n` sockets on one port, or one.
fn bind_all(addr: SocketAddr, spread: Spread, n: usize) -> io::Result<Vec<TcpListener>> {
    match spread {
        Spread::HandOff => Ok(vec![TcpListener::bind(addr)?]),
        Spread::ReusePort => {
            let first = bind_reuseport(addr)?;
            let same = first.local_addr()?;
            let mut v = vec![first];
            for _ in 1..n {
                v.push(bind_reuseport(same)?);
            }
            Ok(v)
        }
    }
}

/// What every loop thread starts from.
struct Start {
    specs: Vec<Spec>,
    setup: Box<Setup>,
    first: Mutex<Option<First>>,
    on_drain: Option<Hook>,
    grace: Duration,
    /// CPUs to pin to, if pinning.
    pin: Option<Vec<usize>>,
}

fn failed(msg: impl Into<String>) -> Error {
    Error::Failed(Failure::msg(msg))
}

/// The body of loop `i`'s thread.
fn loop_thread(i: usize, n: usize, start: &Start, shared: &Arc<Pool>) {
    let made = catch_unwind(AssertUnwindSafe(|| set_up(i, n, start, shared)));
    let ev = match made {
        Ok(Ok(ev)) => Some(ev),
        Ok(Err(e)) => {
            shared.fail(e);
            None
        }
        Err(_) => {
            shared.fail(failed(format!("loop {i}: its setup panicked")));
            None
        }
    };
    {
        let mut st = shared.lock();
        st.set_up += 1;
        shared.changed.notify_all();
    }
    if let Some(ev) = ev {
        if shared.lock().shutting_down {
            drain(&ev); // asked before this loop could hear it
        }
        if let Err(e) = ev.run() {
            shared.fail(e);
        }
        LOCAL.with(|l| l.borrow_mut().take());
        drop(ev);
    }
    {
        let mut st = shared.lock();
        st.remotes[i] = None;
        st.ended += 1;
    }
    // One loop ending ends the pool.
    shared.shutdown();
}

/// Makes loop `i`, waits for its peers, installs the listeners, runs the setup.
fn set_up(i: usize, n: usize, start: &Start, shared: &Arc<Pool>) -> Result<EventLoop, Error> {
    if let Some(cpus) = &start.pin {
        if let Some(&cpu) = cpus.get(i % cpus.len().max(1)) {
            pin::pin_self(cpu)?;
        }
    }
    let ev = EventLoop::new()?;
    let mut st = shared.lock();
    st.remotes[i] = Some(ev.remote());
    shared.changed.notify_all();
    while st.remotes.iter().any(Option::is_none) && st.error.is_none() && !st.shutting_down {
        st = shared.wait(st);
    }
    if let Some(e) = st.error.as_ref() {
        return Err(failed(format!("loop {i}: another loop failed first: {e}")));
    }
    let remotes: Arc<[Remote]> = st.remotes.iter().flatten().cloned().collect();
    drop(st);
    if remotes.len() < n {
        return Err(failed(format!("loop {i}: the pool stopped while starting")));
    }
    let peers = Peers {
        index: i,
        remotes,
        shared: shared.clone(),
    };
    LOCAL.with(|l| *l.borrow_mut() = Some(Local::new(start.grace, start.on_drain.clone())));
    for spec in &start.specs {
        install(&ev, &peers, spec)?;
    }
    if i == 0 {
        let first = start.first.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(first) = first {
            first(&ev, &peers)?;
        }
    }
    (start.setup)(&ev, &peers)?;
    Ok(ev)
}
