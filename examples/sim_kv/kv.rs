//! A primary/backup key-value store, written as any deferloop program (it
//! listens and connects with `listen_tcp`/`connect_tcp`, speaks lines
//! through `Lines`), and the scenario that checks it in simulation: a client
//! writes keys one after the other, failing over to the backup when the
//! primary stops answering, then reads every acknowledged key back. The
//! primary may crash at a moment the seed chooses.
//!
//! The planted bug: the naive primary acknowledges a write at once and
//! replicates in batches every 20 ms (write-behind). A crash between the
//! acknowledgement and the batch loses an acknowledged write. The corrected
//! primary acknowledges only once the backup has acknowledged it.
//!
//! Shared by examples/sim_kv/main.rs (the seed search) and
//! tests/sim_kv_search.rs.

use deferloop::net::framing::{FrameProtocol, Lines};
use deferloop::net::Transport;
use deferloop::sim::{Link, Sim};
use deferloop::{Failure, Handle, Loop};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

pub const PRIMARY: &str = "10.0.0.1";
pub const BACKUP: &str = "10.0.0.2";
const CLIENT_PORT: u16 = 7000;
const REPL_PORT: u16 = 7001;
/// How many keys the client writes.
pub const KEYS: usize = 40;

fn at(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

// ---- the service ---------------------------------------------------------

/// One server's state: its store, and (on the primary) the link to the
/// backup and the writes waiting for the backup's acknowledgement.
#[derive(Default)]
struct Node {
    store: BTreeMap<String, String>,
    backup: Option<Transport>,
    /// Corrected primary: writes sent to the backup, with the client to
    /// acknowledge once the backup has.
    waiting: VecDeque<(String, Transport)>,
    /// Naive primary: writes acknowledged but not yet sent to the backup.
    unsent: Vec<(String, String)>,
}

type NodeRef = Rc<RefCell<Node>>;

/// The clients' side of a server: `PUT k v` → `OK k`, `GET k` → `VAL k v`
/// or `NONE k`.
struct ClientFacing {
    node: NodeRef,
    primary: bool,
    naive: bool,
}

impl FrameProtocol for ClientFacing {
    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line).into_owned();
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("PUT"), Some(k), Some(v)) => {
                let mut node = self.node.borrow_mut();
                node.store.insert(k.into(), v.into());
                if !self.primary {
                    // The backup, promoted: the only copy now.
                    t.write(format!("OK {k}\r\n").as_bytes());
                } else if self.naive {
                    node.unsent.push((k.into(), v.into()));
                    t.write(format!("OK {k}\r\n").as_bytes());
                } else if let Some(b) = node.backup.clone() {
                    b.write(format!("REP {k} {v}\r\n").as_bytes());
                    node.waiting.push_back((k.into(), t.clone()));
                }
                // No backup link: no acknowledgement; the client fails over.
            }
            (Some("GET"), Some(k), None) => {
                let reply = match self.node.borrow().store.get(k) {
                    Some(v) => format!("VAL {k} {v}\r\n"),
                    None => format!("NONE {k}\r\n"),
                };
                t.write(reply.as_bytes());
            }
            _ => t.write(b"ERR\r\n"),
        }
    }
}

/// The backup's end of replication: `REP k v` → `ACK k`.
struct ReplIn {
    node: NodeRef,
}

impl FrameProtocol for ReplIn {
    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line).into_owned();
        if let Some(rest) = line.strip_prefix("REP ") {
            if let Some((k, v)) = rest.split_once(' ') {
                self.node.borrow_mut().store.insert(k.into(), v.into());
                t.write(format!("ACK {k}\r\n").as_bytes());
            }
        }
    }
}

/// The primary's end of replication: an `ACK k` acknowledges the client.
struct ReplOut {
    node: NodeRef,
}

impl FrameProtocol for ReplOut {
    fn frame_received(&mut self, _: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let Some(k) = line.strip_prefix("ACK ") else {
            return;
        };
        let mut node = self.node.borrow_mut();
        if let Some(i) = node.waiting.iter().position(|(w, _)| w == k) {
            let (k, client) = node.waiting.remove(i).expect("found");
            client.write(format!("OK {k}\r\n").as_bytes());
        }
    }

    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        self.node.borrow_mut().backup = None;
    }
}

/// The naive primary's write-behind: every 20 ms, what was acknowledged
/// since goes to the backup.
fn flush_every_20ms(lp: &Loop, node: NodeRef) {
    {
        let mut n = node.borrow_mut();
        let batch = std::mem::take(&mut n.unsent);
        if let Some(b) = n.backup.clone() {
            for (k, v) in batch {
                b.write(format!("REP {k} {v}\r\n").as_bytes());
            }
        }
    }
    let _ = lp.call_later(Duration::from_millis(20), move |lp| {
        flush_every_20ms(lp, node)
    });
}

/// The primary's setup: listen for clients, connect to the backup.
pub fn primary(lp: &Loop, naive: bool) {
    let node = NodeRef::default();
    let n = node.clone();
    lp.listen_tcp(at("0.0.0.0", CLIENT_PORT), move || {
        Lines::new(ClientFacing {
            node: n.clone(),
            primary: true,
            naive,
        })
    })
    .expect("listen");
    let conn = lp.connect_tcp(
        at(BACKUP, REPL_PORT),
        Lines::new(ReplOut { node: node.clone() }),
    );
    node.borrow_mut().backup = Some(conn.transport().clone());
    conn.connected()
        .add_both(|_| Ok::<(), Failure>(()))
        .detach();
    if naive {
        flush_every_20ms(lp, node);
    }
}

/// The backup's setup: replication in, and clients once it is promoted.
pub fn backup(lp: &Loop) {
    let node = NodeRef::default();
    let n = node.clone();
    lp.listen_tcp(at("0.0.0.0", REPL_PORT), move || {
        Lines::new(ReplIn { node: n.clone() })
    })
    .expect("listen");
    lp.listen_tcp(at("0.0.0.0", CLIENT_PORT), move || {
        Lines::new(ClientFacing {
            node: node.clone(),
            primary: false,
            naive: false,
        })
    })
    .expect("listen");
}

// ---- the client and its check ----------------------------------------------

/// What the client saw: the test's record, outside the hosts.
#[derive(Debug, Default)]
pub struct Outcome {
    pub acked: Vec<String>,
    pub lost: Vec<String>,
    pub failed_over: bool,
    pub done: bool,
}

struct Client {
    out: Rc<RefCell<Outcome>>,
    /// The request being made (`PUT`/`GET` line), resent after a failover.
    request: String,
    next_key: usize,
    reading: usize,
    server: &'static str,
    conn: Option<Transport>,
    timer: Option<Handle>,
    attempt: u64,
}

type ClientRef = Rc<RefCell<Client>>;

struct ClientConn {
    c: ClientRef,
    lp: Loop,
    attempt: u64,
}

impl FrameProtocol for ClientConn {
    fn frame_received(&mut self, _: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line).into_owned();
        let lp = self.lp.clone();
        reply(&lp, &self.c, &line);
    }

    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        let stale = self.c.borrow().attempt != self.attempt;
        if !stale {
            fail_over(&self.lp, &self.c);
        }
    }
}

fn send(lp: &Loop, c: &ClientRef) {
    let mut cl = c.borrow_mut();
    if cl.conn.is_none() {
        cl.attempt += 1;
        let conn = ClientConn {
            c: c.clone(),
            lp: lp.clone(),
            attempt: cl.attempt,
        };
        let connection = lp.connect_tcp(at(cl.server, CLIENT_PORT), Lines::new(conn));
        cl.conn = Some(connection.transport().clone());
        connection
            .connected()
            .add_both(|_| Ok::<(), Failure>(()))
            .detach();
    }
    let line = format!("{}\r\n", cl.request);
    cl.conn.as_ref().expect("set").write(line.as_bytes());
    // No answer within 300 ms: the server is taken for dead.
    let (c2, attempt) = (c.clone(), cl.attempt);
    if let Some(t) = cl.timer.take() {
        t.cancel();
    }
    cl.timer = lp
        .call_later(Duration::from_millis(300), move |lp| {
            if c2.borrow().attempt == attempt {
                fail_over(lp, &c2);
            }
        })
        .ok();
}

/// Leaves the server that failed (the backup from then on) and resends.
fn fail_over(lp: &Loop, c: &ClientRef) {
    {
        let mut cl = c.borrow_mut();
        if cl.out.borrow().done {
            return;
        }
        cl.attempt += 1; // what the old connection says from now on is stale
        if let Some(t) = cl.conn.take() {
            t.abort();
        }
        if cl.server == PRIMARY {
            cl.server = BACKUP;
            cl.out.borrow_mut().failed_over = true;
            deferloop::sim::note(lp, "client fails over to the backup");
        }
    }
    let c = c.clone();
    let _ = lp.call_later(Duration::from_millis(50), move |lp| send(lp, &c));
}

fn reply(lp: &Loop, c: &ClientRef, line: &str) {
    let next = {
        let mut cl = c.borrow_mut();
        if let Some(t) = cl.timer.take() {
            t.cancel();
        }
        let expected = cl.request.split(' ').nth(1).unwrap_or("").to_string();
        let mut words = line.split(' ');
        let (kind, key) = (words.next(), words.next());
        if key != Some(expected.as_str()) {
            return; // a late answer to an earlier request
        }
        let out = cl.out.clone();
        let mut out = out.borrow_mut();
        match kind {
            Some("OK") => {
                deferloop::sim::note(lp, format_args!("write {expected} acknowledged"));
                out.acked.push(expected);
                cl.next_key += 1;
            }
            Some("VAL") => cl.reading += 1,
            Some("NONE") => {
                deferloop::sim::note(lp, format_args!("acknowledged write {expected} is gone"));
                out.lost.push(expected);
                cl.reading += 1;
            }
            _ => return,
        }
        if cl.next_key < KEYS {
            cl.request = format!("PUT k{} v{}", cl.next_key, cl.next_key);
        } else if cl.reading < out.acked.len() {
            cl.request = format!("GET {}", out.acked[cl.reading]);
        } else {
            out.done = true;
            return;
        }
        true
    };
    if next {
        let c = c.clone();
        let _ = lp.call_later(Duration::from_millis(5), move |lp| send(lp, &c));
    }
}

/// The client's setup: write the keys, then read them back.
pub fn client(lp: &Loop, out: Rc<RefCell<Outcome>>) {
    let c = Rc::new(RefCell::new(Client {
        out,
        request: "PUT k0 v0".into(),
        next_key: 0,
        reading: 0,
        server: PRIMARY,
        conn: None,
        timer: None,
        attempt: 0,
    }));
    let _ = lp.call_later(Duration::from_millis(10), move |lp| send(lp, &c));
}

// ---- the scenario ----------------------------------------------------------

/// What one seed's run came to.
#[derive(Debug)]
pub struct Run {
    pub outcome: Outcome,
    pub crash_at: Option<Duration>,
    pub trace: String,
}

impl Run {
    /// Whether an acknowledged write was lost (or the client never finished).
    pub fn failed(&self) -> bool {
        !self.outcome.lost.is_empty() || !self.outcome.done
    }
}

/// Runs the cluster for one seed: links of 1–3 ms, and in most seeds a crash
/// of the primary at a moment the seed picks.
pub fn run(seed: u64, naive: bool) -> Run {
    let mut sim = Sim::new(seed);
    sim.set_default_link(Link {
        latency: Duration::from_millis(1),
        jitter: Duration::from_millis(2),
        loss: 0.01,
        ..Link::default()
    });
    let out = Rc::new(RefCell::new(Outcome::default()));
    sim.host("backup", BACKUP.parse().unwrap(), backup).unwrap();
    let p = sim
        .host("primary", PRIMARY.parse().unwrap(), move |lp| {
            primary(lp, naive)
        })
        .unwrap();
    let o = out.clone();
    sim.host("client", "10.0.0.3".parse().unwrap(), move |lp| {
        client(lp, o.clone())
    })
    .unwrap();
    // A crash somewhere in the first 600 ms, in three seeds out of four.
    let crash_at = sim
        .chance(0.75)
        .then(|| Duration::from_micros(sim.random_below(600_000)));
    if let Some(t) = crash_at {
        sim.run_for(t).unwrap();
        sim.crash(p);
    }
    let o = out.clone();
    sim.run_until(Duration::from_secs(30), move |_| o.borrow().done)
        .unwrap();
    let trace = sim.trace();
    drop(sim);
    let outcome = std::mem::take(&mut *out.borrow_mut());
    Run {
        outcome,
        crash_at,
        trace,
    }
}
