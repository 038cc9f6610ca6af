//! UDP dispatch through the public API, over real sockets on 127.0.0.1: a
//! bound socket R (`listen_udp`), a socket A connected to it (`connect_udp`),
//! a plain `std` socket B that also sends to R, and a socket C connected to
//! a port nothing listens on (on 127.0.0.2). The input picks the operations: datagrams of
//! chosen sizes (0 bytes, a few, up to the 65,507 an IPv4 datagram holds, and
//! one over) from A and B to R and from R back to A; a send from C (an ICMP
//! port-unreachable, then `error_received`); `set_limits` with a read budget
//! and datagrams per dispatch the input picks (or crossed water marks, which
//! are refused); `close` or `abort` of R, A or C; loop turns
//! (`run_once_timeout(ZERO)`: a source dispatches at most once a turn). Each
//! receiver keeps the datagrams outstanding well inside its default receive
//! buffer (each counted at 2 × its size + 2 KiB against 200,000 bytes), so
//! the kernel drops none. The model:
//! - `connection_made` comes first, `connection_lost` once and last (with no
//!   reason after `close`/`abort`); nothing is heard inside a call, only in
//!   turns;
//! - from each sender, the datagrams arrive in the order sent, each exactly
//!   once and whole (the loop's read buffer holds any datagram, so none is
//!   cut); none after the receiver's `close`; those a sender had sent before
//!   its own close may stop at any point (its send queue is dropped);
//! - in one turn a receiver gets at most its datagrams per dispatch, and
//!   the datagrams before the last one of a turn (counting 1 for an empty
//!   one) stay under its read budget;
//! - a datagram over 65,507 bytes is never sent: `error_received` gets
//!   `EMSGSIZE`, once per such send; `ECONNREFUSED` comes only to a socket
//!   that sent to a closed port, at most once per such send (ICMP errors are
//!   rate-limited, so "at least" is not asserted); no other error;
//! - once the input is done, whatever is outstanding to an open receiver
//!   arrives within a bounded number of turns (all of it on the socket
//!   already: the dispatch must not stall).
#![no_main]

use deferloop::net::{DatagramProtocol, DatagramTransport, Limits};
use deferloop::{EventLoop, Failure};
use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The most an IPv4 UDP datagram carries.
const MAX: usize = 65_507;
/// What the outstanding datagrams to one receiver may cost, at most (the
/// default receive buffer is 212,992 bytes of the kernel's own accounting).
const ROOM: usize = 200_000;
const EMSGSIZE: i32 = 90;
const ECONNREFUSED: i32 = 111;

fn cost(len: usize) -> usize {
    2 * len + 2048
}

#[derive(Debug)]
enum Ev {
    Made,
    Got(SocketAddr, Vec<u8>),
    Error(Option<i32>),
    Lost(bool),
}

type Log = Rc<RefCell<Vec<Ev>>>;

struct Rec(Log);

impl DatagramProtocol for Rec {
    fn connection_made(&mut self, _: &DatagramTransport) {
        self.0.borrow_mut().push(Ev::Made);
    }
    fn datagram_received(&mut self, _: &DatagramTransport, data: &[u8], from: SocketAddr) {
        self.0.borrow_mut().push(Ev::Got(from, data.to_vec()));
    }
    fn error_received(&mut self, _: &DatagramTransport, e: io::Error) {
        self.0.borrow_mut().push(Ev::Error(e.raw_os_error()));
    }
    fn connection_lost(&mut self, _: &DatagramTransport, reason: Option<Failure>) {
        self.0.borrow_mut().push(Ev::Lost(reason.is_some()));
    }
}

/// What one sender has sent to a receiver and it has not yet received.
struct Flow {
    from: SocketAddr,
    queue: VecDeque<Vec<u8>>,
    /// The sender closed: the rest may never come (but what comes is in order).
    lossy: bool,
}

/// A loop socket and what the model expects of it.
struct Side {
    name: &'static str,
    t: DatagramTransport,
    log: Log,
    seen: usize,
    made: bool,
    lost: bool,
    closed: bool,
    flows: Vec<Flow>,
    outstanding: usize,
    read_budget: usize,
    per_dispatch: usize,
    /// Sends over `MAX` made while open; `EMSGSIZE` heard.
    oversize: usize,
    emsgsize: usize,
    /// Sends that may meet a closed port; `ECONNREFUSED` heard.
    may_refuse: usize,
    refused: usize,
    /// Datagrams per turn, the largest seen.
    most_in_a_turn: usize,
}

impl Side {
    fn new(name: &'static str, t: DatagramTransport, log: Log) -> Side {
        Side {
            name,
            t,
            log,
            seen: 0,
            made: false,
            lost: false,
            closed: false,
            flows: Vec::new(),
            outstanding: 0,
            read_budget: Limits::DEFAULT.read_budget,
            per_dispatch: Limits::DEFAULT.datagrams_per_dispatch,
            oversize: 0,
            emsgsize: 0,
            may_refuse: 0,
            refused: 0,
            most_in_a_turn: 0,
        }
    }

    fn flow(&mut self, from: SocketAddr) -> &mut Flow {
        if let Some(i) = self.flows.iter().position(|f| f.from == from) {
            return &mut self.flows[i];
        }
        self.flows.push(Flow {
            from,
            queue: VecDeque::new(),
            lossy: false,
        });
        self.flows.last_mut().expect("just pushed")
    }

    /// Whether a datagram of `len` bytes fits in what may be outstanding.
    fn fits(&self, len: usize) -> bool {
        self.closed || self.outstanding + cost(len) <= ROOM
    }

    /// A datagram `data` was sent to this socket from `from`.
    fn expect(&mut self, from: SocketAddr, data: Vec<u8>) {
        if self.closed {
            return;
        }
        self.outstanding += cost(data.len());
        self.flow(from).queue.push_back(data);
    }

    /// The sender at `from` closed: what it sent may stop short.
    fn sender_closed(&mut self, from: SocketAddr) {
        self.flow(from).lossy = true;
    }

    fn close(&mut self, abort: bool) {
        if abort {
            self.t.abort();
        } else {
            self.t.close();
        }
        self.closed = true;
        assert!(self.t.is_closing(), "{}: closing after close", self.name);
    }

    /// Nothing is heard outside a turn.
    fn quiet(&self) {
        assert_eq!(
            self.log.borrow().len(),
            self.seen,
            "{}: a protocol call outside a turn: {:?}",
            self.name,
            &self.log.borrow()[self.seen..]
        );
    }

    /// Checks what this socket heard in the turn just run.
    fn after_turn(&mut self) {
        let log = self.log.clone();
        let log = log.borrow();
        let mut lens = Vec::new();
        for ev in &log[self.seen..] {
            assert!(!self.lost, "{}: {ev:?} after connection_lost", self.name);
            match ev {
                Ev::Made => {
                    assert!(!self.made, "{}: connection_made twice", self.name);
                    self.made = true;
                    continue;
                }
                _ => assert!(self.made, "{}: {ev:?} before connection_made", self.name),
            }
            match ev {
                Ev::Made => unreachable!(),
                Ev::Got(from, data) => {
                    assert!(!self.closed, "{}: a datagram after close", self.name);
                    let flow = self.flow(*from);
                    let want = flow.queue.pop_front();
                    assert!(
                        want.as_deref() == Some(&data[..]),
                        "{}: from {from} got {} bytes, wanted {:?} bytes (in order, whole, once)",
                        self.name,
                        data.len(),
                        want.map(|w| w.len())
                    );
                    self.outstanding -= cost(data.len());
                    lens.push(data.len());
                }
                Ev::Error(Some(EMSGSIZE)) => {
                    self.emsgsize += 1;
                    assert!(
                        self.emsgsize <= self.oversize,
                        "{}: EMSGSIZE without an oversize send",
                        self.name
                    );
                }
                Ev::Error(Some(ECONNREFUSED)) => {
                    self.refused += 1;
                    assert!(
                        self.refused <= self.may_refuse,
                        "{}: ECONNREFUSED {} times for {} sends to a closed port",
                        self.name,
                        self.refused,
                        self.may_refuse
                    );
                }
                Ev::Error(e) => panic!("{}: unexpected error {e:?}", self.name),
                Ev::Lost(reason) => {
                    assert!(self.closed, "{}: lost while open", self.name);
                    assert!(!reason, "{}: lost with a reason after close", self.name);
                    self.lost = true;
                }
            }
        }
        self.seen = log.len();
        self.most_in_a_turn = self.most_in_a_turn.max(lens.len());
        assert!(
            lens.len() <= self.per_dispatch,
            "{}: {} datagrams in one turn, {} per dispatch",
            self.name,
            lens.len(),
            self.per_dispatch
        );
        if let Some((_, before)) = lens.split_last() {
            let spent: usize = before.iter().map(|&n| n.max(1)).sum();
            assert!(
                spent < self.read_budget,
                "{}: {spent} bytes before the last datagram of a turn, budget {} ({lens:?})",
                self.name,
                self.read_budget
            );
        }
    }

    /// Datagrams that must still arrive.
    fn owed(&self) -> usize {
        if self.closed {
            return 0;
        }
        self.flows
            .iter()
            .filter(|f| !f.lossy)
            .map(|f| f.queue.len())
            .sum()
    }
}

/// A datagram's bytes: distinct for each sender and sequence number.
fn payload(len: usize, sender: u8, seq: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(7).wrapping_add(seq) as u8 ^ sender)
        .collect();
    let tag = [sender, seq as u8, (seq >> 8) as u8];
    let n = tag.len().min(len);
    v[..n].copy_from_slice(&tag[..n]);
    v
}

fn size(input: &mut Input) -> usize {
    match input.byte() % 8 {
        0 => 0,
        1 => 1 + input.byte() as usize % 64,
        2 => input.u16() as usize % 2048,
        3 => input.u16() as usize, // up to 65,535: some over MAX
        4 => MAX,
        5 => MAX + 1,
        6 => 1472,
        _ => 1 + input.byte() as usize * 64,
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let ev = EventLoop::new().expect("a loop");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let open = |name, connect: Option<SocketAddr>| {
        let log = Log::default();
        let t = match connect {
            None => ev.listen_udp(any, Rec(log.clone())),
            Some(to) => ev.connect_udp(to, Rec(log.clone())),
        }
        .expect("a socket");
        Side::new(name, t, log)
    };
    let mut r = open("R", None);
    let r_addr = r.t.local_addr().expect("R's address");
    let mut a = open("A", Some(r_addr));
    let a_addr = a.t.local_addr().expect("A's address");
    let b = UdpSocket::bind(any).expect("B");
    b.set_nonblocking(true).expect("B non-blocking");
    let b_addr = b.local_addr().expect("B's address");
    // A port nothing listens on (bound, then released), on 127.0.0.2: C's
    // own port, on 127.0.0.1, cannot be it.
    let dead = UdpSocket::bind("127.0.0.2:0")
        .and_then(|s| s.local_addr())
        .expect("a free port");
    let mut c = open("C", Some(dead));
    let mut seq = 0u32;
    let turn = |sides: &mut [&mut Side]| {
        ev.run_once_timeout(Duration::ZERO).expect("a turn");
        for s in sides.iter_mut() {
            s.after_turn();
        }
    };

    let mut steps = 0;
    while !input.0.is_empty() && steps < 64 {
        steps += 1;
        let op = input.byte();
        seq += 1;
        match op % 16 {
            0..=3 => {
                // A to R.
                let len = size(&mut input);
                if !r.fits(len) {
                    continue;
                }
                let data = payload(len, 1, seq);
                let dropped = a.t.dropped_datagrams();
                a.t.send(&data);
                if a.closed {
                    // Counted, before and after `connection_lost`.
                    assert_eq!(a.t.dropped_datagrams(), dropped + 1, "A: counted");
                } else if len > MAX {
                    a.oversize += 1;
                } else if r.closed {
                    a.may_refuse += 1;
                } else {
                    r.expect(a_addr, data);
                }
            }
            4 | 5 => {
                // B (outside the loop) to R.
                let len = size(&mut input).min(MAX);
                if !r.fits(len) {
                    continue;
                }
                let data = payload(len, 2, seq);
                match b.send_to(&data, r_addr) {
                    Ok(n) => {
                        assert_eq!(n, len, "B: a whole datagram");
                        r.expect(b_addr, data);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("B: send: {e}"),
                }
            }
            6 | 7 => {
                // R back to A.
                let len = size(&mut input);
                if !a.fits(len) {
                    continue;
                }
                let data = payload(len, 3, seq);
                r.t.send_to(&data, a_addr);
                if r.closed {
                } else if len > MAX {
                    r.oversize += 1;
                } else {
                    a.expect(r_addr, data);
                }
            }
            8 | 9 => {
                // Limits for R or A.
                let side = if op & 0x10 == 0 { &mut r } else { &mut a };
                let mut l = Limits::DEFAULT;
                if op & 0x20 != 0 {
                    l.read_budget = 1 + input.u16() as usize;
                }
                if op & 0x40 != 0 {
                    l.datagrams_per_dispatch = 1 + input.byte() as usize % 8;
                }
                if op & 0x80 != 0 {
                    (l.high_water, l.low_water) = (1, 2);
                    assert!(side.t.set_limits(&l).is_err(), "crossed marks refused");
                } else if side.t.set_limits(&l).is_ok() {
                    side.read_budget = l.read_budget;
                    side.per_dispatch = l.datagrams_per_dispatch;
                } else {
                    assert!(side.closed, "{}: limits refused while open", side.name);
                }
            }
            10 => {
                // C to the dead port.
                let data = payload(input.byte() as usize % 32, 4, seq);
                c.t.send(&data);
                if !c.closed {
                    c.may_refuse += 1;
                }
            }
            11 => {
                let abort = op & 0x10 != 0;
                match (op >> 5) % 3 {
                    0 => {
                        r.close(abort);
                        a.sender_closed(r_addr);
                    }
                    1 => {
                        a.close(abort);
                        r.sender_closed(a_addr);
                    }
                    _ => c.close(abort),
                }
            }
            _ => {
                for _ in 0..1 + input.byte() % 3 {
                    turn(&mut [&mut r, &mut a, &mut c]);
                }
            }
        }
        for s in [&r, &a, &c] {
            s.quiet();
        }
    }

    // Whatever is owed arrives: first in turns that do not wait (it is all
    // on the sockets already), then, should the kernel have deferred some
    // delivery on a loaded machine, in turns that wait a little.
    let owed = |r: &Side, a: &Side| r.owed() + a.owed();
    let fast = 8 + owed(&r, &a);
    for i in 0..fast {
        // At least one turn: an error of the last send comes in one.
        if i > 0 && owed(&r, &a) == 0 {
            break;
        }
        turn(&mut [&mut r, &mut a, &mut c]);
    }
    let start = Instant::now();
    while owed(&r, &a) > 0 && start.elapsed() < Duration::from_secs(2) {
        let h = ev.call_later(Duration::from_millis(10), |_| {}).unwrap();
        turn(&mut [&mut r, &mut a, &mut c]);
        h.cancel();
    }
    assert_eq!(
        (r.owed(), a.owed()),
        (0, 0),
        "datagrams owed after {fast} turns and 2 s"
    );
    for s in [&r, &a] {
        if !s.closed && s.may_refuse == 0 {
            assert_eq!(
                s.emsgsize, s.oversize,
                "{}: one EMSGSIZE per oversize send",
                s.name
            );
        }
    }
    // Every socket ends once.
    for s in [&mut r, &mut a, &mut c] {
        if !s.closed {
            s.close(false);
        }
    }
    for _ in 0..4 {
        if r.lost && a.lost && c.lost {
            break;
        }
        turn(&mut [&mut r, &mut a, &mut c]);
    }
    assert!(
        r.lost && a.lost && c.lost,
        "each socket told connection_lost"
    );
    assert_eq!(ev.io_source_count(), 0, "no source left");
});
