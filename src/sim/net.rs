//! The simulated network's state: hosts and their addresses, links and
//! partitions, the connections' two ends, and the queue of timed deliveries
//! the driver (`mod.rs`) applies. Owns `Net`, `End`, `Link`.
//!
//! A stream is two [`End`]s. A write becomes a segment numbered in its
//! direction; the receiving end puts segments back in order (so jitter and
//! retransmission delay a stream but never reorder it, as TCP's sequence
//! numbers do). The connect's answer is segment 0 of the server's direction.
//! A segment a partition holds is retransmitted after the link's
//! `retransmit` delay until it gets through; a lost one (the link's `loss`)
//! arrives one `retransmit` late. A window of unread bytes per direction
//! makes a fast writer wait for a slow reader (`write` says `WouldBlock`).

use crate::reactor::{Ready, SourceKey, WeakLoop};
use crate::sim::rng::Rng;
use crate::{Clock, ManualClock};
use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

pub(crate) type HostId = usize;
pub(crate) type EndRef = Rc<RefCell<End>>;

/// How a link between two hosts carries packets, one direction at a time.
///
/// The default: 1 ms latency, no jitter, no bandwidth limit, no loss, and
/// segments held by a partition retransmitted every 200 ms.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// One-way delay of every packet.
    pub latency: Duration,
    /// Up to this much more delay, drawn per packet: datagrams are
    /// reordered by it, a stream's segments only delayed.
    pub jitter: Duration,
    /// Bytes per second the link serialises (`None`: no limit).
    pub bandwidth: Option<u64>,
    /// Probability a packet is lost: a datagram is gone, a stream's
    /// segment arrives one `retransmit` later (TCP's retransmission).
    pub loss: f64,
    /// TCP's retransmission delay: what a lost segment, or one held by a
    /// partition, waits before it is sent again.
    pub retransmit: Duration,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            latency: Duration::from_millis(1),
            jitter: Duration::ZERO,
            bandwidth: None,
            loss: 0.0,
            retransmit: Duration::from_millis(200),
        }
    }
}

/// What travels in one direction of a stream, in order.
pub(crate) enum Seg {
    /// The connect's answer (segment 0 of the server's direction).
    SynAck,
    Data(Vec<u8>),
    Fin,
}

pub(crate) enum Ev {
    /// A connect reaching `to`.
    Syn { client: EndRef, to: SocketAddr },
    /// Segment `seq` of a stream reaching `to`.
    Seg { to: EndRef, seq: u64, seg: Seg },
    /// The connect was refused (no listener on the port).
    Refuse { client: EndRef },
    /// The peer reset the connection.
    Rst { to: EndRef },
    /// The reader took bytes: a writer that found the window full may go on.
    Window { to: EndRef },
    /// A datagram for the port `to` of the destination host.
    Dgram {
        data: Vec<u8>,
        from: SocketAddr,
        to: SocketAddr,
    },
}

struct Pending {
    at: Instant,
    seq: u64,
    src: HostId,
    dst: HostId,
    ev: Ev,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// One end of a simulated stream: what its socket holds.
pub(crate) struct End {
    pub(crate) host: HostId,
    pub(crate) local: SocketAddr,
    pub(crate) peer_addr: SocketAddr,
    pub(crate) peer: Weak<RefCell<End>>,
    pub(crate) connected: bool,
    pub(crate) refused: bool,
    pub(crate) reset: bool,
    /// Closed by its owner, or its host crashed: what arrives is answered
    /// with a reset.
    pub(crate) dead: bool,
    pub(crate) inbound: VecDeque<u8>,
    pub(crate) peer_eof: bool,
    pub(crate) eof_sent: bool,
    /// Next segment number expected, and those that came early.
    rx_next: u64,
    early: BTreeMap<u64, Seg>,
    tx_next: u64,
    /// Bytes sent that the peer has not read yet.
    pub(crate) unacked: usize,
    /// A write found the window full: wake the writer when it opens.
    pub(crate) blocked: bool,
    pub(crate) key: Option<SourceKey>,
    pub(crate) lp: WeakLoop,
}

impl End {
    /// Keeps segment `seq` until those before it have come.
    pub(crate) fn arrived(&mut self, seq: u64, seg: Seg) {
        self.early.insert(seq, seg);
    }

    /// The next segment in order, if it has come.
    pub(crate) fn next_in_order(&mut self) -> Option<Seg> {
        let seg = self.early.remove(&self.rx_next)?;
        self.rx_next += 1;
        Some(seg)
    }

    pub(crate) fn new(host: HostId, local: SocketAddr, peer_addr: SocketAddr, lp: WeakLoop) -> End {
        End {
            host,
            local,
            peer_addr,
            peer: Weak::new(),
            connected: false,
            refused: false,
            reset: false,
            dead: false,
            inbound: VecDeque::new(),
            peer_eof: false,
            eof_sent: false,
            rx_next: 0,
            early: BTreeMap::new(),
            tx_next: 0,
            unacked: 0,
            blocked: false,
            key: None,
            lp,
        }
    }

    pub(crate) fn next_seq(&mut self) -> u64 {
        let s = self.tx_next;
        self.tx_next += 1;
        s
    }

    pub(crate) fn wake(&self, ready: Ready) {
        if let (Some(key), Some(lp)) = (self.key, self.lp.upgrade()) {
            lp.wake_source(key, ready);
        }
    }
}

/// A listening port's queue of connections made but not yet accepted.
pub(crate) struct ListenQ {
    pub(crate) host: HostId,
    pub(crate) addr: SocketAddr,
    pub(crate) backlog: VecDeque<EndRef>,
    pub(crate) open: bool,
    pub(crate) key: Option<SourceKey>,
    pub(crate) lp: WeakLoop,
}

pub(crate) struct HostNet {
    pub(crate) name: String,
    pub(crate) ip: IpAddr,
    pub(crate) up: bool,
    pub(crate) listeners: BTreeMap<u16, Rc<RefCell<ListenQ>>>,
    pub(crate) udp: BTreeMap<u16, Rc<RefCell<UdpQ>>>,
    /// Every end opened on the host (those still alive matter at a crash).
    pub(crate) ends: Vec<Weak<RefCell<End>>>,
    next_port: u16,
}

/// The trace: one line per network event, kept or only hashed.
pub(crate) struct Trace {
    pub(crate) on: bool,
    pub(crate) keep: bool,
    pub(crate) text: String,
    pub(crate) hash: u64,
    pub(crate) lines: u64,
    line: String,
}

impl Trace {
    fn new() -> Trace {
        Trace {
            on: true,
            keep: true,
            text: String::new(),
            hash: 0xcbf2_9ce4_8422_2325,
            lines: 0,
            line: String::new(),
        }
    }

    pub(crate) fn add(&mut self, elapsed: Duration, args: std::fmt::Arguments<'_>) {
        if !self.on {
            return;
        }
        self.line.clear();
        let us = elapsed.as_micros();
        let _ = write!(self.line, "{:>6}.{:06} ", us / 1_000_000, us % 1_000_000);
        let _ = self.line.write_fmt(args);
        self.line.push('\n');
        for b in self.line.bytes() {
            // FNV-1a: the same lines give the same hash on every platform.
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.lines += 1;
        if self.keep {
            self.text.push_str(&self.line);
        }
    }
}

/// The whole network: shared by the driver and, through the hooks, by the
/// sockets of every host.
pub(crate) struct Net {
    pub(crate) clock: ManualClock,
    start: Instant,
    pub(crate) rng: Rng,
    pub(crate) hosts: Vec<HostNet>,
    pub(crate) default_link: Link,
    pub(crate) links: BTreeMap<(HostId, HostId), Link>,
    /// Directed pairs that a partition separates.
    pub(crate) cut: BTreeSet<(HostId, HostId)>,
    /// When each directed link is free again (bandwidth).
    busy: BTreeMap<(HostId, HostId), Instant>,
    queue: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// Bytes a direction of a stream may carry unread.
    pub(crate) window: usize,
    pub(crate) trace: RefCell<Trace>,
}

/// Writes a trace line if tracing is on (the arguments are not even
/// formatted otherwise).
macro_rules! trace {
    ($net:expr, $($arg:tt)*) => {
        if $net.trace.borrow().on {
            let e = $net.elapsed();
            $net.trace.borrow_mut().add(e, format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;

impl Net {
    pub(crate) fn new(clock: ManualClock, seed: u64) -> Net {
        Net {
            start: clock.now(),
            clock,
            rng: Rng::new(seed),
            hosts: Vec::new(),
            default_link: Link::default(),
            links: BTreeMap::new(),
            cut: BTreeSet::new(),
            busy: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            window: 256 * 1024,
            trace: RefCell::new(Trace::new()),
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.now() - self.start
    }

    pub(crate) fn add_host(&mut self, name: &str, ip: IpAddr) -> HostId {
        self.hosts.push(HostNet {
            name: name.to_string(),
            ip,
            up: false,
            listeners: BTreeMap::new(),
            udp: BTreeMap::new(),
            ends: Vec::new(),
            next_port: 49152,
        });
        self.hosts.len() - 1
    }

    pub(crate) fn host_by_ip(&self, from: HostId, ip: IpAddr) -> Option<HostId> {
        if ip.is_loopback() {
            return Some(from);
        }
        self.hosts.iter().position(|h| h.ip == ip)
    }

    pub(crate) fn name(&self, h: HostId) -> &str {
        &self.hosts[h].name
    }

    /// The address a socket binding `addr` on `h` gets: `addr`'s port, or
    /// the next ephemeral one not `taken` for port 0. Streams and datagrams
    /// pass their own `taken` (their ports are apart, as TCP's and UDP's).
    pub(crate) fn bind(
        &mut self,
        h: HostId,
        addr: SocketAddr,
        taken: impl Fn(&HostNet, u16) -> bool,
    ) -> io::Result<SocketAddr> {
        let ip = self.hosts[h].ip;
        if !(addr.ip().is_unspecified() || addr.ip().is_loopback() || addr.ip() == ip) {
            return Err(io::ErrorKind::AddrNotAvailable.into());
        }
        let port = if addr.port() == 0 {
            loop {
                let p = self.ephemeral_port(h);
                if !taken(&self.hosts[h], p) {
                    break p;
                }
            }
        } else {
            addr.port()
        };
        if taken(&self.hosts[h], port) {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        Ok(SocketAddr::new(ip, port))
    }

    pub(crate) fn ephemeral_port(&mut self, h: HostId) -> u16 {
        let host = &mut self.hosts[h];
        let p = host.next_port;
        host.next_port = if p == u16::MAX { 49152 } else { p + 1 };
        p
    }

    fn link(&self, src: HostId, dst: HostId) -> &Link {
        self.links.get(&(src, dst)).unwrap_or(&self.default_link)
    }

    /// When a packet of `len` bytes sent now from `src` reaches `dst`.
    fn transit(&mut self, src: HostId, dst: HostId, len: usize) -> Instant {
        let at = self.transit_no_loss(src, dst, len);
        let link = self.link(src, dst);
        let (loss, retransmit) = (link.loss, link.retransmit);
        if self.rng.chance(loss) {
            return at + retransmit;
        }
        at
    }

    /// Latency, jitter and bandwidth: when a packet sent now arrives.
    fn transit_no_loss(&mut self, src: HostId, dst: HostId, len: usize) -> Instant {
        let now = self.clock.now();
        let link = self.link(src, dst).clone();
        let mut depart = now;
        if let Some(bw) = link.bandwidth.filter(|&b| b > 0) {
            let busy = self.busy.entry((src, dst)).or_insert(now);
            let nanos = (len as u128 * 1_000_000_000 / u128::from(bw)) as u64;
            depart = (*busy).max(now) + Duration::from_nanos(nanos);
            *busy = depart;
        }
        let mut at = depart + link.latency;
        let j = link.jitter.as_nanos() as u64;
        if j > 0 {
            at += Duration::from_nanos(self.rng.below(j + 1));
        }
        at
    }

    fn push(&mut self, at: Instant, src: HostId, dst: HostId, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Pending {
            at,
            seq: self.seq,
            src,
            dst,
            ev,
        }));
    }

    /// Sends a stream packet (never lost: a loss only delays it).
    pub(crate) fn send(&mut self, src: HostId, dst: HostId, len: usize, ev: Ev) {
        let at = self.transit(src, dst, len);
        self.push(at, src, dst, ev);
    }

    /// Sends a datagram: lost with the link's `loss` (a stream's segment
    /// would be retransmitted; a datagram is gone).
    pub(crate) fn send_datagram(
        &mut self,
        src: HostId,
        dst: HostId,
        data: Vec<u8>,
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let loss = self.link(src, dst).loss;
        if self.rng.chance(loss) {
            trace!(self, "{} udp {from} > {to} lost", self.name(src));
            return;
        }
        let at = self.transit_no_loss(src, dst, data.len());
        self.push(at, src, dst, Ev::Dgram { data, from, to });
    }

    /// Sends a control packet after the link's latency alone.
    pub(crate) fn send_control(&mut self, src: HostId, dst: HostId, ev: Ev) {
        let at = self.clock.now() + self.link(src, dst).latency;
        self.push(at, src, dst, ev);
    }

    /// Resets `end`'s peer, if it has one that is alive.
    pub(crate) fn reset_peer(&mut self, end: &End) {
        if let Some(peer) = end.peer.upgrade() {
            let dst = peer.borrow().host;
            self.send_control(end.host, dst, Ev::Rst { to: peer });
        }
    }

    /// When the next delivery is due.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.queue.peek().map(|p| p.0.at)
    }

    /// Takes the next delivery due by now, if any: retransmission of what a
    /// partition holds is handled here; the rest is the caller's to apply.
    pub(crate) fn pop_due(&mut self) -> Option<(HostId, HostId, Ev)> {
        let now = self.clock.now();
        loop {
            if self.queue.peek().is_none_or(|p| p.0.at > now) {
                return None;
            }
            let Reverse(p) = self.queue.pop().expect("peeked");
            if self.cut.contains(&(p.src, p.dst)) {
                if let Ev::Dgram { from, to, .. } = &p.ev {
                    trace!(
                        self,
                        "{} udp {to} < {from} dropped (partition)",
                        self.name(p.dst)
                    );
                    continue;
                }
                let again = now + self.link(p.src, p.dst).retransmit;
                self.push(again, p.src, p.dst, p.ev);
                continue;
            }
            return Some((p.src, p.dst, p.ev));
        }
    }
}

/// A bound UDP port of a simulated host.
pub(crate) struct UdpQ {
    pub(crate) host: HostId,
    pub(crate) local: SocketAddr,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) inbound: VecDeque<(Vec<u8>, SocketAddr)>,
    pub(crate) open: bool,
    pub(crate) key: Option<SourceKey>,
    pub(crate) lp: WeakLoop,
}
