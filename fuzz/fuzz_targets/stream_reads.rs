//! A `Stream` over the in-memory transport, fed the input in chunks, with
//! reads (`read_line`, `read_until`, `read_exactly`, `read_some`), cancels,
//! read-limit changes, turns, an end of file and a reset decoded from the
//! input; some reads ask for the next one from their own callback. The
//! oracle is a byte queue of what the peer sent and no read has taken:
//! - every answer is exactly what the queue says (the first delimiter, the
//!   first `n` bytes, a non-empty prefix), and takes exactly those bytes;
//! - `LineTooLong` only where no delimiter ends within the limit, dropping
//!   up to the delimiter if one arrived, else at least the limit and no
//!   delimiter; `IncompleteRead` only at the end of file, with everything;
//! - a cancelled read takes nothing; reads complete in the order asked,
//!   each exactly once, never inside the call that asks;
//! - after a few turns the oldest read is answered whenever the queue can
//!   answer it; the stream's buffer and the transport's unread bytes add up
//!   to the queue after every step;
//! - after the peer's end of file every read completes.
#![no_main]

use deferloop::net::memory::Peer;
use deferloop::net::{IncompleteRead, LineTooLong, Stream};
use deferloop::{Deferred, EventLoop, Failure};
use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Kind {
    Line,
    Until(Vec<u8>),
    Exactly(usize),
    Some,
}

impl Kind {
    fn delim(&self) -> Option<&[u8]> {
        match self {
            Kind::Line => Some(b"\n"),
            Kind::Until(d) => Some(d),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum Outcome {
    Bytes(Vec<u8>),
    Line(String),
    NotUtf8,
    TooLong(usize),
    Incomplete(IncompleteRead),
    Cancelled,
    Reset,
}

#[derive(Debug)]
struct Rec {
    id: usize,
    outcome: Outcome,
    /// What the stream and the transport held, unread, when it fired.
    remaining: usize,
}

struct Ctx {
    stream: RefCell<Option<Stream>>,
    peer: Peer,
    recs: RefCell<Vec<Rec>>,
    /// Each read's kind, its follow-up, and its chain (to cancel it).
    reads: RefCell<Vec<(Kind, Option<Kind>)>>,
    handles: RefCell<Vec<Option<Deferred<()>>>>,
    limit: Cell<usize>,
}

impl Ctx {
    fn unread(&self) -> usize {
        let s = self.stream.borrow();
        s.as_ref().map_or(0, |s| s.buffered()) + self.peer.unread()
    }
}

fn outcome<T>(r: Result<T, Failure>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match r {
        Ok(v) => ok(v),
        Err(f) => {
            if let Some(e) = f.downcast_ref::<LineTooLong>() {
                Outcome::TooLong(e.limit)
            } else if let Some(e) = f.downcast_ref::<IncompleteRead>() {
                Outcome::Incomplete(e.clone())
            } else if f.check::<deferloop::deferred::Cancelled>() {
                Outcome::Cancelled
            } else if let Some(e) = f.downcast_ref::<std::io::Error>() {
                match e.kind() {
                    std::io::ErrorKind::InvalidData => Outcome::NotUtf8,
                    std::io::ErrorKind::ConnectionReset => Outcome::Reset,
                    _ => panic!("unexpected failure {f}"),
                }
            } else {
                panic!("unexpected failure {f}")
            }
        }
    }
}

/// Asks for a read; its callback records the answer and asks for the
/// follow-up, if any.
fn ask(ctx: &Rc<Ctx>, kind: Kind, follow: Option<Kind>) {
    let Some(stream) = ctx.stream.borrow().clone() else {
        return;
    };
    let id = ctx.reads.borrow().len();
    ctx.reads.borrow_mut().push((kind.clone(), follow));
    let c = ctx.clone();
    let record = move |outcome: Outcome| {
        let remaining = c.unread();
        c.recs.borrow_mut().push(Rec {
            id,
            outcome,
            remaining,
        });
        let follow = c.reads.borrow()[id].1.clone();
        if let Some(k) = follow {
            ask(&c, k, None);
        }
        Ok::<(), Failure>(())
    };
    let d = match &kind {
        Kind::Line => stream
            .read_line()
            .add_both(move |r| record(outcome(r, Outcome::Line))),
        Kind::Until(delim) => stream
            .read_until(delim)
            .add_both(move |r| record(outcome(r, Outcome::Bytes))),
        Kind::Exactly(n) => stream
            .read_exactly(*n)
            .add_both(move |r| record(outcome(r, Outcome::Bytes))),
        Kind::Some => stream
            .read_some()
            .add_both(move |r| record(outcome(r, Outcome::Bytes))),
    };
    assert!(
        ctx.recs.borrow().iter().all(|r| r.id != id),
        "read {id} fired inside the call that asked for it"
    );
    ctx.handles.borrow_mut().push(Some(d));
}

fn find(hay: &[u8], delim: &[u8]) -> Option<usize> {
    hay.windows(delim.len())
        .position(|w| w == delim)
        .map(|p| p + delim.len())
}

struct Model {
    queue: Vec<u8>,
    eof: bool,
    reset: bool,
    /// The next read expected to complete (reads complete in order).
    fired: Vec<bool>,
    last_in_order: Option<usize>,
    checked: usize,
}

impl Model {
    /// Checks the records made since the last call, in the order they fired.
    fn check(&mut self, ctx: &Ctx) {
        let recs = ctx.recs.borrow();
        let reads = ctx.reads.borrow();
        let limit = ctx.limit.get();
        self.fired.resize(reads.len(), false);
        for rec in &recs[self.checked..] {
            let q = &self.queue;
            assert!(!self.fired[rec.id], "read {} fired twice", rec.id);
            self.fired[rec.id] = true;
            assert!(rec.remaining <= q.len(), "{rec:?}: more unread than sent");
            let c = q.len() - rec.remaining;
            let kind = &reads[rec.id].0;
            let ctx_s = format!("{rec:?} for {kind:?}, queue {q:?}, limit {limit}");
            if !matches!(rec.outcome, Outcome::Cancelled) {
                assert!(
                    self.last_in_order.is_none_or(|l| l < rec.id),
                    "out of order: {ctx_s}"
                );
                self.last_in_order = Some(rec.id);
            }
            let first = kind.delim().and_then(|d| find(q, d));
            match (&rec.outcome, kind) {
                (Outcome::Cancelled, _) => assert_eq!(c, 0, "a cancel took bytes: {ctx_s}"),
                (Outcome::Bytes(b), Kind::Exactly(n)) => {
                    assert!(b.len() == *n && c == *n && b[..] == q[..c], "{ctx_s}");
                }
                (Outcome::Bytes(b), Kind::Some) => {
                    assert!(c == b.len() && b[..] == q[..c], "{ctx_s}");
                    assert!(!b.is_empty() || (q.is_empty() && self.eof), "{ctx_s}");
                }
                (Outcome::Bytes(b), Kind::Until(_)) => {
                    assert!(c == b.len() && b[..] == q[..c], "{ctx_s}");
                    assert!(first == Some(c) && c <= limit, "{ctx_s}");
                }
                (Outcome::Line(s), Kind::Line) => {
                    assert!(first == Some(c) && c <= limit, "{ctx_s}");
                    let mut want = &q[..c - 1];
                    if let [rest @ .., b'\r'] = want {
                        want = rest;
                    }
                    assert_eq!(s.as_bytes(), want, "{ctx_s}");
                }
                (Outcome::NotUtf8, Kind::Line) => {
                    assert!(first == Some(c) && c <= limit, "{ctx_s}");
                    assert!(std::str::from_utf8(&q[..c]).is_err(), "{ctx_s}");
                }
                (Outcome::TooLong(l), Kind::Line | Kind::Until(_)) => {
                    assert_eq!(*l, limit, "{ctx_s}");
                    assert!(first.is_none_or(|f| f > limit), "{ctx_s}");
                    assert!(c >= limit && first.is_none_or(|f| f >= c), "{ctx_s}");
                }
                (Outcome::Incomplete(e), _) => {
                    assert!(self.eof && !self.reset, "{ctx_s}");
                    assert!(c == q.len() && e.partial == q[..], "{ctx_s}");
                    match kind {
                        Kind::Exactly(n) => {
                            assert!(e.expected == Some(*n) && q.len() < *n, "{ctx_s}")
                        }
                        _ => assert!(
                            e.expected.is_none() && first.is_none() && q.len() < limit,
                            "{ctx_s}"
                        ),
                    }
                }
                (Outcome::Reset, _) => {
                    assert!(self.reset && c == 0, "{ctx_s}");
                    assert!(
                        match kind {
                            Kind::Exactly(n) => q.len() < *n,
                            Kind::Some => q.is_empty(),
                            _ => first.is_none() && q.len() < limit,
                        },
                        "{ctx_s}"
                    );
                }
                _ => panic!("wrong kind of answer: {ctx_s}"),
            }
            self.queue.drain(..c);
        }
        self.checked = recs.len();
        drop((recs, reads));
        assert_eq!(
            ctx.unread(),
            self.queue.len(),
            "the stream and the transport hold what was sent and not read"
        );
    }

    /// Whether the oldest read not answered could be answered from the queue.
    fn head_ready(&self, ctx: &Ctx) -> Option<usize> {
        let reads = ctx.reads.borrow();
        let id = (0..reads.len()).find(|&i| !self.fired.get(i).copied().unwrap_or(false))?;
        let q = &self.queue;
        let ended = self.eof || self.reset;
        let ready = match &reads[id].0 {
            Kind::Exactly(n) => *n <= q.len() || ended,
            Kind::Some => !q.is_empty() || ended,
            k => {
                let d = k.delim().unwrap();
                find(q, d).is_some() || q.len() >= ctx.limit.get() || ended
            }
        };
        ready.then_some(id)
    }
}

const ALPHABET: &[u8] = b"a\n\r,b\xff\n";

fn kind(input: &mut Input<'_>, b: u8) -> Kind {
    match b % 4 {
        0 => Kind::Line,
        1 => {
            let n = 1 + input.byte() as usize % 3;
            let mut d: Vec<u8> = input.bytes(n).to_vec();
            for x in &mut d {
                *x = ALPHABET[*x as usize % ALPHABET.len()];
            }
            if d.is_empty() {
                d.push(b',');
            }
            Kind::Until(d)
        }
        2 => Kind::Exactly(input.byte() as usize % 24),
        _ => Kind::Some,
    }
}

fn turns(ev: &EventLoop, n: usize) {
    for _ in 0..n {
        ev.run_once_timeout(Duration::ZERO).expect("a turn");
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let config = input.byte();
    let raw = config & 1 == 1;
    let ev = EventLoop::new().expect("a loop");
    let (stream, peer) = Stream::open_memory(&ev).expect("a stream");
    let limit = 1 + input.byte() as usize % 40;
    stream.set_read_limit(limit);
    let ctx = Rc::new(Ctx {
        stream: RefCell::new(Some(stream)),
        peer,
        recs: RefCell::new(Vec::new()),
        reads: RefCell::new(Vec::new()),
        handles: RefCell::new(Vec::new()),
        limit: Cell::new(limit),
    });
    let mut model = Model {
        queue: Vec::new(),
        eof: false,
        reset: false,
        fired: Vec::new(),
        last_in_order: None,
        checked: 0,
    };
    let mut steps = 0;
    while !input.0.is_empty() && steps < 200 {
        steps += 1;
        let op = input.byte();
        match op % 16 {
            0..=3 => {
                let n = 1 + input.byte() as usize % 32;
                let mut data = input.bytes(n).to_vec();
                if !raw {
                    for x in &mut data {
                        *x = ALPHABET[*x as usize % ALPHABET.len()];
                    }
                }
                if ctx.peer.send(&data) {
                    model.queue.extend_from_slice(&data);
                }
            }
            4..=8 => {
                let k = kind(&mut input, op / 16);
                let follow = match input.byte() {
                    b @ 0..=63 => Some(kind(&mut input, b)),
                    _ => None,
                };
                ask(&ctx, k, follow);
            }
            9 => {
                let n = ctx.handles.borrow().len();
                let k = input.byte() as usize;
                if n > 0 {
                    let d = ctx.handles.borrow_mut()[k % n].take();
                    if let Some(d) = d {
                        d.cancel();
                        ctx.handles.borrow_mut()[k % n] = Some(d);
                    }
                }
            }
            10..=12 => turns(&ev, 1 + (op / 16) as usize % 3),
            13 => {
                let l = 1 + input.byte() as usize % 48;
                if let Some(s) = &*ctx.stream.borrow() {
                    s.set_read_limit(l);
                }
                ctx.limit.set(l);
            }
            14 => {
                if !model.eof && !model.reset {
                    ctx.peer.send_eof();
                    model.eof = true;
                }
            }
            _ => {
                if op >= 0xf0 && !model.reset && !model.eof {
                    // The unread bytes in the "socket" are gone with it.
                    model.check(&ctx);
                    let keep = model.queue.len() - ctx.peer.unread();
                    model.queue.truncate(keep);
                    ctx.peer.reset();
                    model.reset = true;
                }
            }
        }
        model.check(&ctx);
        if op % 16 == 12 {
            // Settled: the oldest read is answered if the queue can answer it.
            turns(&ev, 3);
            model.check(&ctx);
            if let Some(id) = model.head_ready(&ctx) {
                panic!(
                    "read {id} ({:?}) could be answered and waits; queue {:?}, limit {}",
                    ctx.reads.borrow()[id].0,
                    model.queue,
                    ctx.limit.get()
                );
            }
        }
    }
    // The end of file answers every read.
    if !model.eof && !model.reset {
        ctx.peer.send_eof();
        model.eof = true;
    }
    for _ in 0..64 {
        turns(&ev, 1);
        model.check(&ctx);
        if model.fired.iter().all(|&f| f) && model.fired.len() == ctx.reads.borrow().len() {
            break;
        }
    }
    let n = ctx.reads.borrow().len();
    assert!(
        model.fired.len() == n && model.fired.iter().all(|&f| f),
        "reads left waiting after the end of file: {:?}",
        (0..n)
            .filter(|&i| !model.fired.get(i).copied().unwrap_or(false))
            .collect::<Vec<_>>()
    );
    // Break the cycles (the stream's reads hold callbacks that hold `ctx`).
    ctx.handles.borrow_mut().clear();
    let stream = ctx.stream.borrow_mut().take();
    drop(stream);
    drop(ctx);
    drop(ev);
});
