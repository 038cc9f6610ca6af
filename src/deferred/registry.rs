//! The registry of Deferreds, for `ps` and `pstree` (see [`crate::ps`]): off
//! by default, one per thread.
//!
//! Owns the switch (`on`: whether [`register`] is the function `node.rs`
//! calls for each node made, so the node layer never imports this one), the
//! side table of nodes made while it is on, the
//! tags that say what a leaf waits on ([`Wait`]), the explicit edges a list,
//! race, scope or `map_limit` adds to its inputs, and [`Registry::pending`],
//! which reads the table into [`PendingDeferred`]s. Tests: tests/ps_*.rs.
//!
//! Off, it costs one test of a thread-local `Cell<Option<fn>>` where a node
//! is made and where a tag or edge would be recorded; nothing on the paths that run
//! or chain callbacks. A Deferred waiting on the one a callback returned, or
//! fed by `chain_deferred`, is read from the node itself (`chained_to`) when
//! the table is read: chaining records nothing.
//!
//! On, the table holds a `Weak` to each node (so a node's address names it
//! until the entry goes: no id is reused) and is swept of dead nodes each
//! time it has doubled. A node the table holds weakly is not reused by the
//! per-thread pool (see `spare.rs`): on, each `Deferred::new` allocates.

use super::node::{self, NodeCell, NodeRef, WeakNode};
use super::Deferred;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::rc::Rc;
use std::time::{Duration, Instant};

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

/// Whether the registry records on this thread: whether it is the function
/// told of each new node (`node::set_on_new_node`; the node layer below
/// knows it only as that function).
#[inline(always)]
pub(crate) fn on() -> bool {
    node::on_new_node().is_some()
}

/// Turns the registry on or off for this thread. Off drops the table.
pub(crate) fn set_on(on: bool) {
    node::set_on_new_node(on.then_some(register as fn(&NodeRef)));
    if !on {
        TABLE.with(|t| *t.borrow_mut() = Table::default());
    }
}

/// The time the table stamps entries with (the loop's clock, which may be a
/// manual one); `Instant::now` until set.
pub(crate) fn set_clock(clock: Rc<dyn Fn() -> Instant>) {
    TABLE.with(|t| t.borrow_mut().clock = Some(clock));
}

/// What a Deferred that no other Deferred feeds is waiting for: the leaf of
/// a chain of waits, tagged by the code that made it. (`read` and `connect`
/// are tagged by `Stream` reads and by `connect_tcp`/`connect_unix`.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// A timer (`defer_later`), due at this instant of the loop's clock.
    Timer {
        /// When it is due.
        deadline: Instant,
    },
    /// A job on the loop's thread pool (`defer_to_thread`).
    ThreadJob,
    /// A turn of a lock, semaphore or queue, made at `created_at`.
    Turn {
        /// `"lock"`, `"semaphore"` or `"queue"`.
        kind: &'static str,
        /// Where the lock, semaphore or queue was made.
        created_at: &'static Location<'static>,
    },
    /// A read on a stream connection.
    Read {
        /// The connection's peer, as text.
        peer: String,
        /// Bytes received but not yet consumed.
        buffered: usize,
    },
    /// A connection being made.
    Connect {
        /// The address connected to, as text.
        addr: String,
    },
    /// A child process's exit.
    Process {
        /// Its process id.
        pid: u32,
    },
}

/// What a pending Deferred waits on, one edge of the waits-on graph.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitsOn {
    /// Another pending Deferred, by id.
    Deferred(u64),
    /// A pending Deferred made before the registry was on (so it has no id).
    Unlisted(&'static Location<'static>),
    /// Something that is not a Deferred.
    Leaf(Wait),
}

/// The state of a pending Deferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PendingState {
    /// Not fired yet.
    Unfired,
    /// Fired, and its chain waits on a Deferred a callback returned.
    Waiting,
    /// Paused with `pause()`.
    Paused,
    /// One of its callbacks is running right now.
    Running,
}

/// One pending Deferred, as the registry saw it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PendingDeferred {
    /// Its id, unique on this thread while the registry is on.
    pub id: u64,
    /// Where it was created.
    pub created_at: &'static Location<'static>,
    /// How long ago it was created (by the loop's clock).
    pub age: Duration,
    /// Why it is pending.
    pub state: PendingState,
    /// What it waits on (empty: nothing recorded, e.g. a plain
    /// `Deferred::new` whose `Resolver` is held by user code).
    pub waits_on: Vec<WaitsOn>,
    /// When a timeout (`add_timeout`) gives up on it, if one does.
    pub timeout_at: Option<Instant>,
}

struct Entry {
    id: u64,
    node: WeakNode,
    born: Instant,
    wait: Option<Wait>,
    children: Vec<WeakNode>,
    timeout_at: Option<Instant>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<usize, Entry>,
    next_id: u64,
    live_after_sweep: usize,
    clock: Option<Rc<dyn Fn() -> Instant>>,
}

impl Table {
    fn now(&self) -> Instant {
        self.clock.as_ref().map_or_else(Instant::now, |c| c())
    }

    fn sweep_if_doubled(&mut self) {
        if self.entries.len() < 2 * self.live_after_sweep + 1024 {
            return;
        }
        self.entries.retain(|_, e| e.node.strong_count() > 0);
        self.live_after_sweep = self.entries.len();
    }

    fn entry(&mut self, node: &NodeRef) -> Option<&mut Entry> {
        self.entries.get_mut(&key(node))
    }
}

fn key(node: &NodeCell) -> usize {
    node as *const NodeCell as usize
}

/// Records a node just made (or made anew in a spare's storage).
#[cold]
#[inline(never)]
pub(crate) fn register(node: &NodeRef) {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        t.sweep_if_doubled();
        t.next_id += 1;
        let entry = Entry {
            id: t.next_id,
            node: Rc::downgrade(node),
            born: t.now(),
            wait: None,
            children: Vec::new(),
            timeout_at: None,
        };
        t.entries.insert(key(node), entry);
    });
}

/// The node of `d`, if it has one (a bare result is never pending).
fn node_of<T>(d: &Deferred<T>) -> Option<NodeRef> {
    d.peek(|r| match r {
        super::repr::Repr::Node(n) => Some(n.clone()),
        _ => None,
    })
}

impl<T> Deferred<T> {
    /// Tags this Deferred with what it waits on (for `ps`); `wait` is called
    /// only when the registry is on.
    #[inline]
    pub(crate) fn tag_wait(&self, wait: impl FnOnce() -> Wait) {
        if on() {
            tag(self, wait());
        }
    }

    /// Records that this Deferred waits on each of `inputs` (a list, race,
    /// scope or `map_limit`).
    #[inline]
    pub(crate) fn tag_inputs<'a, U: 'a>(&self, inputs: impl IntoIterator<Item = &'a Deferred<U>>) {
        if on() {
            edges(self, inputs.into_iter().filter_map(node_of).collect());
        }
    }

    /// Its id and, if pending, what it waits on: for `Debug`, registry on.
    pub(super) fn registry_view(&self) -> Option<(u64, Option<String>)> {
        if !on() {
            return None;
        }
        let n = node_of(self)?;
        let id = id_of(&n)?;
        Some((id, describe(&n)))
    }

    /// Records the instant a timeout gives up on this Deferred.
    #[inline]
    pub(crate) fn tag_timeout(&self, at: impl FnOnce() -> Instant) {
        if on() {
            if let Some(n) = node_of(self) {
                let at = at();
                TABLE.with(|t| {
                    if let Some(e) = t.borrow_mut().entry(&n) {
                        e.timeout_at = Some(at);
                    }
                });
            }
        }
    }
}

/// Records that the Deferred of `parent` (a scope's or a map's own) waits on
/// `child`.
#[inline]
pub(crate) fn tag_child<U>(parent: &WeakNode, child: &Deferred<U>) {
    if on() {
        if let (Some(p), Some(c)) = (parent.upgrade(), node_of(child)) {
            edges_of(&p, vec![c]);
        }
    }
}

#[cold]
fn tag<T>(d: &Deferred<T>, wait: Wait) {
    if let Some(n) = node_of(d) {
        TABLE.with(|t| {
            if let Some(e) = t.borrow_mut().entry(&n) {
                e.wait = Some(wait);
            }
        });
    }
}

#[cold]
fn edges<T>(d: &Deferred<T>, children: Vec<NodeRef>) {
    if children.is_empty() {
        return;
    }
    if let Some(n) = node_of(d) {
        edges_of(&n, children);
    }
}

#[cold]
fn edges_of(n: &NodeRef, children: Vec<NodeRef>) {
    TABLE.with(|t| {
        if let Some(e) = t.borrow_mut().entry(n) {
            e.children.extend(children.iter().map(Rc::downgrade));
        }
    });
}

/// What is pending on this thread now, oldest first, and the clock's `now`
/// it was read at. Empty when the registry is off.
pub(crate) fn pending() -> (Vec<PendingDeferred>, Instant) {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let now = t.now();
        t.entries.retain(|_, e| e.node.strong_count() > 0);
        t.live_after_sweep = t.entries.len();
        let ids: HashMap<usize, u64> = t.entries.iter().map(|(k, e)| (*k, e.id)).collect();
        let mut out: Vec<PendingDeferred> = t
            .entries
            .values()
            .filter_map(|e| read(e, &ids, now))
            .collect();
        out.sort_by_key(|p| p.id);
        (out, now)
    })
}

/// One entry as a `PendingDeferred`, if its node is pending.
fn read(e: &Entry, ids: &HashMap<usize, u64>, now: Instant) -> Option<PendingDeferred> {
    let node = e.node.upgrade()?;
    let n = node.try_borrow().ok()?;
    let state = if n.running {
        PendingState::Running
    } else if n.waiting {
        PendingState::Waiting
    } else if n.paused > 0 {
        PendingState::Paused
    } else if !n.called {
        PendingState::Unfired
    } else {
        return None;
    };
    let mut waits_on = Vec::new();
    let edge = |inner: &NodeRef| match ids.get(&key(inner)) {
        Some(id) => WaitsOn::Deferred(*id),
        None => WaitsOn::Unlisted(inner.try_borrow().map_or(n.created_at, |i| i.created_at)),
    };
    // Waiting on a returned Deferred, or (unfired) fed by `chain_deferred`.
    if n.waiting || !n.called {
        if let Some(inner) = n.chained_to.as_ref().and_then(|w| w.upgrade()) {
            waits_on.push(edge(&inner));
        }
    }
    if !n.called {
        for child in e.children.iter().filter_map(|w| w.upgrade()) {
            if is_pending(&child) {
                waits_on.push(edge(&child));
            }
        }
        if let Some(w) = &e.wait {
            waits_on.push(WaitsOn::Leaf(w.clone()));
        }
    }
    Some(PendingDeferred {
        id: e.id,
        created_at: n.created_at,
        age: now.saturating_duration_since(e.born),
        state,
        waits_on,
        timeout_at: e.timeout_at,
    })
}

fn is_pending(node: &NodeRef) -> bool {
    node.try_borrow()
        .map_or(true, |n| !n.called || n.waiting || n.paused > 0)
}

/// What `node` waits on, in a few words, for `Debug` (registry on).
fn describe(node: &NodeRef) -> Option<String> {
    let now = TABLE.with(|t| t.borrow().now());
    let all = pending_of(node, now)?;
    let parts: Vec<String> = all
        .iter()
        .map(|w| match w {
            WaitsOn::Deferred(id) => format!("Deferred #{id}"),
            WaitsOn::Unlisted(at) => format!("Deferred created at {at}"),
            WaitsOn::Leaf(w) => describe_wait(w, now),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn pending_of(node: &NodeRef, now: Instant) -> Option<Vec<WaitsOn>> {
    TABLE.with(|t| {
        let t = t.borrow();
        let e = t.entries.get(&key(node))?;
        let ids: HashMap<usize, u64> = t.entries.iter().map(|(k, e)| (*k, e.id)).collect();
        Some(read(e, &ids, now)?.waits_on)
    })
}

/// The id `node` has in the registry, if it is listed.
fn id_of(node: &NodeRef) -> Option<u64> {
    TABLE.with(|t| t.borrow().entries.get(&key(node)).map(|e| e.id))
}

/// A leaf wait in a few words (`timer due in 5s`).
pub fn describe_wait(w: &Wait, now: Instant) -> String {
    match w {
        Wait::Timer { deadline } => {
            if *deadline >= now {
                format!("timer due in {}", short(*deadline - now))
            } else {
                format!("timer {} overdue", short(now - *deadline))
            }
        }
        Wait::ThreadJob => "thread-pool job".to_string(),
        Wait::Turn { kind, created_at } => format!("{kind} made at {created_at}"),
        Wait::Read { peer, buffered } => format!("read from {peer} ({buffered} bytes buffered)"),
        Wait::Connect { addr } => format!("connect to {addr}"),
        Wait::Process { pid } => format!("child process {pid}"),
    }
}

/// A duration in a short form: `350ms`, `1.2s`, `2m05s`.
pub(crate) fn short(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    }
}
