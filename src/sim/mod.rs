//! Deterministic simulation: a whole distributed program — several hosts,
//! their connections, the network's latency, loss, partitions and crashes —
//! run in one thread on simulated time, every random choice drawn from one
//! seeded generator, so that a seed that finds a bug replays it exactly
//! (the technique FoundationDB's simulator made known). Feature `sim`.
//!
//! The program's own code runs unchanged: on a simulated host,
//! [`Loop::connect_tcp`] and [`Loop::listen_tcp`] (and what is built on them:
//! [`Transport`](crate::net::Transport), framers, [`Listener`](crate::net::Listener),
//! [`Stream`](crate::net::Stream)), and [`Loop::listen_udp`] and
//! [`Loop::connect_udp`], open simulated sockets instead of the kernel's; a
//! simulated host's name (`"backup:7001"` in
//! [`Loop::connect_tcp_to`]) is its address. The guide
//! [Testing with simulation](crate::guide::testing_with_simulation) shows how
//! to write a program for it, how to search seeds and replay one, and what is
//! and is not simulated.
//!
//! # Design
//! Each host is its own [`EventLoop`], all on one [`ManualClock`]; the
//! [`Sim`] driver steps them in one thread, in host order: it runs every
//! host until it is idle, applies the network deliveries due, and repeats;
//! when nothing is due it moves the clock straight to the earliest timer or
//! delivery. So simulated time never waits, and nothing depends on the
//! machine: no thread, no executor's scheduling order, no wall clock.
//!
//! A loop per host, rather than the whole cluster on one loop, because a
//! crash must take exactly one host's state with it — its timers, its
//! Deferreds, its sockets, whatever its callbacks captured — and a loop is
//! where that state lives: a crash drops the host's loop (its peers'
//! connections are reset), a restart builds a new loop and calls the host's
//! setup function again. On one shared loop the simulator would have to
//! know which callback belongs to which host, which arbitrary closures do
//! not say. It is still one thread, one clock and one order.
//!
//! The stream sockets are a [`Wire`](crate::net) of their own (no file
//! descriptor; `wire.rs`), the datagram ones a variant of the UDP socket type
//! (`udp.rs`):
//! the connection core — buffering, flow control, `connection_lost` —
//! is the one real connections use, as for [`net::memory`](crate::net::memory).
//! Replacing the `net` types instead (as turmoil does for tokio) would have
//! made a simulated program a different program. A loop finds its host
//! through a thread-local list the driver fills: empty on a thread that runs
//! no simulation, so the check at connect and listen time costs one look;
//! without the feature there is none.
//!
//! # Examples
//! An echo server and a client on two hosts, 10 ms apart:
//! ```
//! use deferloop::net::{Protocol, Transport};
//! use deferloop::sim::{Link, Sim};
//! use std::cell::RefCell;
//! use std::rc::Rc;
//! use std::time::Duration;
//!
//! struct Echo;
//! impl Protocol for Echo {
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         t.write(data);
//!     }
//! }
//! struct Client(Rc<RefCell<Vec<u8>>>);
//! impl Protocol for Client {
//!     fn connection_made(&mut self, t: &Transport) {
//!         t.write(b"ping");
//!     }
//!     fn data_received(&mut self, _: &Transport, data: &[u8]) {
//!         self.0.borrow_mut().extend_from_slice(data);
//!     }
//! }
//!
//! let mut sim = Sim::new(42);
//! sim.set_default_link(Link { latency: Duration::from_millis(10), ..Link::default() });
//! sim.host("server", "10.0.0.1".parse().unwrap(), |lp| {
//!     lp.listen_tcp("0.0.0.0:7".parse().unwrap(), || Echo).unwrap();
//! })?;
//! let got = Rc::new(RefCell::new(Vec::new()));
//! let g = got.clone();
//! sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
//!     lp.connect_tcp("10.0.0.1:7".parse().unwrap(), Client(g.clone()));
//! })?;
//! sim.run_for(Duration::from_secs(1))?;
//! assert_eq!(*got.borrow(), b"ping");
//! assert!(sim.trace().contains("client 10.0.0.2:49152 > 10.0.0.1:7 connect"));
//! # Ok::<(), deferloop::Error>(())
//! ```

mod deliver;
mod net;
mod rng;
pub(crate) mod udp;
pub(crate) mod wire;

pub use net::Link;
pub use rng::Rng;

use crate::{Clock, Error, EventLoop, Loop, ManualClock};
use net::{trace, Net};
use std::cell::RefCell;
use std::fmt;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A simulated host, as [`Sim::host`] named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(usize);

type Setup = Rc<dyn Fn(&Loop)>;

struct Slot {
    setup: Setup,
    ev: Option<EventLoop>,
}

/// The simulation driver: the hosts, the network between them, and the
/// clock. See the [module documentation](self).
pub struct Sim {
    net: Rc<RefCell<Net>>,
    clock: ManualClock,
    hosts: Vec<Slot>,
    seed: u64,
}

/// At most this many turns of one host at one instant before the others
/// run: a host that never goes idle does not starve the simulation.
const TURNS_PER_ROUND: usize = 10_000;

impl Sim {
    /// An empty network whose every random choice follows from `seed`.
    pub fn new(seed: u64) -> Sim {
        let clock = ManualClock::new();
        Sim {
            net: Rc::new(RefCell::new(Net::new(clock.clone(), seed))),
            clock,
            hosts: Vec::new(),
            seed,
        }
    }

    /// The seed the simulation was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds a host named `name` at `ip` and starts it: a new loop on the
    /// simulation's clock, given to `setup`. `setup` runs again, on a new
    /// loop, at each [`restart`](Self::restart).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `ip` is taken; [`Error::Io`] if a loop
    /// cannot be made (out of file descriptors).
    pub fn host(
        &mut self,
        name: &str,
        ip: IpAddr,
        setup: impl Fn(&Loop) + 'static,
    ) -> Result<HostId, Error> {
        if self.net.borrow().hosts.iter().any(|h| h.ip == ip) {
            return Err(Error::InvalidInput("two simulated hosts with one address"));
        }
        let id = self.net.borrow_mut().add_host(name, ip);
        self.hosts.push(Slot {
            setup: Rc::new(setup),
            ev: None,
        });
        self.start(id, "start")?;
        Ok(HostId(id))
    }

    fn start(&mut self, h: usize, why: &str) -> Result<(), Error> {
        let ev = EventLoop::with_manual_clock(self.clock.clone()).map_err(Error::Io)?;
        wire::register(&ev, &self.net, h);
        {
            let mut n = self.net.borrow_mut();
            n.hosts[h].up = true;
            trace!(n, "{} {why}", n.name(h));
        }
        let setup = self.hosts[h].setup.clone();
        let lp = ev.to_loop();
        self.hosts[h].ev = Some(ev);
        setup(&lp);
        Ok(())
    }

    /// Crashes `h`: its loop is dropped with every timer, Deferred and
    /// socket it held, its peers' connections are reset (as a process's
    /// kernel does when the process dies), its ports refuse connections.
    /// Nothing if it is down.
    pub fn crash(&mut self, h: HostId) {
        let Some(ev) = self.hosts[h.0].ev.take() else {
            return;
        };
        {
            let mut n = self.net.borrow_mut();
            let n = &mut *n;
            n.hosts[h.0].up = false;
            trace!(n, "{} crash", n.name(h.0));
            for w in std::mem::take(&mut n.hosts[h.0].ends) {
                let Some(end) = w.upgrade() else { continue };
                let mut e = end.borrow_mut();
                if !e.dead {
                    e.dead = true;
                    e.key = None;
                    if e.connected && !e.reset {
                        n.reset_peer(&e);
                    }
                }
            }
            for u in std::mem::take(&mut n.hosts[h.0].udp).values() {
                let mut u = u.borrow_mut();
                u.open = false;
                u.key = None;
            }
            for q in std::mem::take(&mut n.hosts[h.0].listeners).values() {
                let mut q = q.borrow_mut();
                q.open = false;
                q.key = None;
                q.backlog.clear();
            }
        }
        wire::unregister(&self.net, h.0);
        drop(ev);
    }

    /// Restarts `h` after a crash: a new loop, given to its setup function.
    /// Nothing if it is up.
    ///
    /// # Errors
    /// As for [`host`](Self::host).
    pub fn restart(&mut self, h: HostId) -> Result<(), Error> {
        if self.hosts[h.0].ev.is_some() {
            return Ok(());
        }
        self.start(h.0, "restart")
    }

    /// Whether `h` is running (not crashed).
    pub fn is_up(&self, h: HostId) -> bool {
        self.hosts[h.0].ev.is_some()
    }

    /// The loop of `h` while it is up: to schedule work on it from the test.
    pub fn event_loop(&self, h: HostId) -> Option<Loop> {
        self.hosts[h.0].ev.as_ref().map(|ev| ev.to_loop())
    }

    /// The host named `name`.
    pub fn host_id(&self, name: &str) -> Option<HostId> {
        self.net
            .borrow()
            .hosts
            .iter()
            .position(|h| h.name == name)
            .map(HostId)
    }

    /// Sets the link from `a` to `b` and back.
    pub fn set_link(&mut self, a: HostId, b: HostId, link: Link) {
        let mut n = self.net.borrow_mut();
        n.links.insert((a.0, b.0), link.clone());
        n.links.insert((b.0, a.0), link);
    }

    /// Sets the link between hosts that have none of their own.
    pub fn set_default_link(&mut self, link: Link) {
        self.net.borrow_mut().default_link = link;
    }

    /// Bytes a direction of a stream carries unread before the writer must
    /// wait (the socket buffers; default 256 KiB). For connections made
    /// from now on and those already open alike.
    pub fn set_window(&mut self, bytes: usize) {
        self.net.borrow_mut().window = bytes.max(1);
    }

    /// Cuts `a` off from `b`, both ways: a stream's packets between them
    /// are held, retransmitted every `retransmit` of their link until the
    /// partition heals (no connection gives up by itself: the program's
    /// timeouts do); datagrams are dropped.
    pub fn partition(&mut self, a: HostId, b: HostId) {
        let mut n = self.net.borrow_mut();
        n.cut.insert((a.0, b.0));
        n.cut.insert((b.0, a.0));
        trace!(n, "partition {} | {}", n.name(a.0), n.name(b.0));
    }

    /// Cuts `h` off from every other host.
    pub fn isolate(&mut self, h: HostId) {
        for o in 0..self.hosts.len() {
            if o != h.0 {
                self.partition(h, HostId(o));
            }
        }
    }

    /// Heals the partition between `a` and `b`.
    pub fn heal(&mut self, a: HostId, b: HostId) {
        let mut n = self.net.borrow_mut();
        n.cut.remove(&(a.0, b.0));
        n.cut.remove(&(b.0, a.0));
        trace!(n, "heal {} | {}", n.name(a.0), n.name(b.0));
    }

    /// Heals every partition.
    pub fn heal_all(&mut self) {
        let mut n = self.net.borrow_mut();
        n.cut.clear();
        trace!(n, "heal all");
    }

    /// The simulation's clock (the hosts' loops run on it).
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Simulated time since the simulation began.
    pub fn elapsed(&self) -> Duration {
        self.net.borrow().elapsed()
    }

    /// The next number of the simulation's generator: the test's own random
    /// choices (when to crash what) come from the same seed.
    pub fn random(&mut self) -> u64 {
        self.net.borrow_mut().rng.next_u64()
    }

    /// A number in `0..n` from the simulation's generator.
    pub fn random_below(&mut self, n: u64) -> u64 {
        self.net.borrow_mut().rng.below(n)
    }

    /// `true` with probability `p`, from the simulation's generator.
    pub fn chance(&mut self, p: f64) -> bool {
        self.net.borrow_mut().rng.chance(p)
    }

    /// Adds a line of the test's own to the trace.
    pub fn note(&mut self, text: impl fmt::Display) {
        let n = self.net.borrow();
        trace!(n, "note {text}");
    }

    /// The trace so far: one line per event, with its simulated time. Two
    /// runs of one seed give the same bytes.
    pub fn trace(&self) -> String {
        self.net.borrow().trace.borrow().text.clone()
    }

    /// A hash of every trace line so far (FNV-1a), kept even when the
    /// lines are not; and how many lines there were.
    pub fn trace_hash(&self) -> (u64, u64) {
        let n = self.net.borrow();
        let t = n.trace.borrow();
        (t.hash, t.lines)
    }

    /// Whether to write the trace (`on`), and to keep its lines (`keep`)
    /// or only their hash. Both on by default; a long run keeps memory flat
    /// with `keep` off, and a benchmark turns both off.
    pub fn set_trace(&mut self, on: bool, keep: bool) {
        let n = self.net.borrow();
        let mut t = n.trace.borrow_mut();
        t.on = on;
        t.keep = keep;
    }

    /// Runs every host until idle and applies every delivery due, until
    /// nothing is left to do at this instant.
    fn settle(&mut self) -> Result<(), Error> {
        loop {
            let mut progressed = false;
            for slot in &self.hosts {
                let Some(ev) = &slot.ev else { continue };
                let mut turns = 0;
                while !ev.is_closed() && ev.timeout() == Some(Duration::ZERO) {
                    ev.run_once()?;
                    progressed = true;
                    turns += 1;
                    if turns == TURNS_PER_ROUND {
                        break;
                    }
                }
            }
            loop {
                let due = self.net.borrow_mut().pop_due();
                let Some((src, dst, ev)) = due else { break };
                deliver::apply(&self.net, src, dst, ev);
                progressed = true;
            }
            if !progressed {
                return Ok(());
            }
        }
    }

    /// When something is next due: a delivery, a host's timer, a call on
    /// the clock.
    fn next_due(&self) -> Option<Instant> {
        let mut next = self.net.borrow().next_at();
        let mut take = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for slot in &self.hosts {
            if let Some(ev) = &slot.ev {
                if !ev.is_closed() {
                    take(ev.next_timer());
                }
            }
        }
        take(self.clock.next_deadline());
        next
    }

    /// Runs the simulation for `d` of simulated time: as fast as the
    /// machine goes, jumping over the time nothing happens in.
    ///
    /// # Errors
    /// A host loop's selector error ([`Error::Io`]).
    pub fn run_for(&mut self, d: Duration) -> Result<(), Error> {
        let end = self.clock.now() + d;
        self.run_to(end, &mut |_| false).map(drop)
    }

    /// Runs until `done` says so (checked whenever the simulation is idle
    /// at an instant), or for at most `limit` of simulated time. Returns
    /// whether `done` said so.
    ///
    /// # Errors
    /// As for [`run_for`](Self::run_for).
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Sim) -> bool,
    ) -> Result<bool, Error> {
        let end = self.clock.now() + limit;
        self.run_to(end, &mut done)
    }

    fn run_to(&mut self, end: Instant, done: &mut dyn FnMut(&Sim) -> bool) -> Result<bool, Error> {
        loop {
            self.settle()?;
            if done(self) {
                return Ok(true);
            }
            let now = self.clock.now();
            match self.next_due() {
                Some(t) if t <= end => {
                    // A bound at or before now makes progress through the
                    // turn that files its timers finer; never stand still.
                    let step = t
                        .saturating_duration_since(now)
                        .max(Duration::from_nanos(1));
                    self.clock.advance(step);
                }
                _ => {
                    if end > now {
                        self.clock.advance(end - now);
                    }
                    self.settle()?;
                    return Ok(done(self));
                }
            }
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        for h in 0..self.hosts.len() {
            wire::unregister(&self.net, h);
            drop(self.hosts[h].ev.take());
        }
    }
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.seed)
            .field("hosts", &self.hosts.len())
            .field("elapsed", &self.elapsed())
            .finish()
    }
}

/// Adds a line to the trace of the simulation `lp` is a host of, with the
/// host's name: what a program under test says it did ("acked put x=1"),
/// to read beside the network's events. Nothing on any other loop.
pub fn note(lp: &Loop, text: impl fmt::Display) {
    if let Some((net, host)) = wire::host_of(lp) {
        let n = net.borrow();
        trace!(n, "{} {text}", n.name(host));
    }
}
