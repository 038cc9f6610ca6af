//! The protocol adapters `Lines` and `LengthPrefixed` over the in-memory
//! transport: a stream built from the input (well-formed frames and raw
//! bytes), sent in arbitrary chunks between turns, to a `FrameProtocol`
//! that pauses reading or closes on frames the input picks; the frames per
//! turn set from 1 to 4, or left at the default. The oracle is a naive
//! split of the whole stream:
//! - the frames delivered are a prefix of the reference's, in order, none
//!   twice; all of them unless the protocol closed (then none after the
//!   frame that closed) or the reference has a framing error (then
//!   `frame_error` with that error after the frames before it, and no more);
//! - no frame while reading is paused by the protocol, at most the budget
//!   of frames in one turn (what waited and a new read share it);
//! - at the end of file a frame cut short is `Truncated` with its size,
//!   before `eof_received`, and only after every whole frame;
//! - `connection_lost` once, last.
//!
//! The STARTTLS hold (no frame delivered after one that began TLS) needs a
//! TLS handshake, so the `tls` feature, which this crate does not build:
//! tests/net_tls_start.rs covers it.
#![no_main]

use deferloop::net::framing::{FrameError, FrameProtocol, LengthPrefixed, Lines, Prefix};
use deferloop::net::{memory, Transport};
use deferloop::{EventLoop, Failure};
use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use std::cell::{Cell, RefCell};
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::time::Duration;

#[derive(Debug, PartialEq)]
enum Event {
    /// A frame, and the turn it came in.
    Frame(Vec<u8>, usize),
    Error(FrameError),
    Eof,
    Lost,
}

#[derive(Default)]
struct Shared {
    events: RefCell<Vec<Event>>,
    /// What the protocol does on its n-th frame: 1 pause reading, 2 close.
    actions: Vec<u8>,
    turn: Cell<usize>,
    paused: Cell<bool>,
    closed: Cell<bool>,
}

struct Recorder(Rc<Shared>);

impl FrameProtocol for Recorder {
    fn frame_received(&mut self, t: &Transport, frame: &[u8]) {
        let s = &self.0;
        assert!(!s.paused.get(), "a frame while reading is paused");
        assert!(!s.closed.get(), "a frame after the protocol closed");
        let n = s.events.borrow().len();
        s.events
            .borrow_mut()
            .push(Event::Frame(frame.to_vec(), s.turn.get()));
        match s.actions.get(n).copied().unwrap_or(0) % 8 {
            1 => {
                s.paused.set(true);
                t.pause_reading();
            }
            2 => {
                s.closed.set(true);
                t.close();
            }
            _ => {}
        }
    }

    fn frame_error(&mut self, _: &Transport, e: &FrameError) {
        self.0.events.borrow_mut().push(Event::Error(e.clone()));
    }

    fn eof_received(&mut self, _: &Transport) -> bool {
        self.0.events.borrow_mut().push(Event::Eof);
        false
    }

    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        self.0.events.borrow_mut().push(Event::Lost);
    }
}

enum Framing {
    Lines(Vec<u8>, usize),
    Length(Prefix, usize),
}

/// The reference: frames of the whole stream, the error that ends it, and
/// the bytes of an unfinished last frame (`None`: none is unfinished; a
/// message's prefix, once whole, does not count in its bytes).
fn reference(f: &Framing, data: &[u8]) -> (Vec<Vec<u8>>, Option<FrameError>, Option<usize>) {
    let mut frames = Vec::new();
    let mut rest = data;
    match f {
        Framing::Lines(delim, max) => loop {
            let at = rest.windows(delim.len()).position(|w| w == delim);
            match at {
                Some(at) if at > *max => {
                    let e = FrameError::LineTooLong {
                        limit: *max,
                        seen: 0,
                    };
                    return (frames, Some(e), None);
                }
                Some(at) => {
                    frames.push(rest[..at].to_vec());
                    rest = &rest[at + delim.len()..];
                }
                None if rest.len() > max + delim.len() - 1 => {
                    let e = FrameError::LineTooLong {
                        limit: *max,
                        seen: 0,
                    };
                    return (frames, Some(e), None);
                }
                None => return (frames, None, (!rest.is_empty()).then_some(rest.len())),
            }
        },
        Framing::Length(prefix, max) => {
            let p = if *prefix == Prefix::U16 { 2 } else { 4 };
            while rest.len() >= p {
                let size = rest[..p].iter().fold(0usize, |n, &b| n << 8 | b as usize);
                if size > *max {
                    let e = FrameError::MessageTooLarge { size, limit: *max };
                    return (frames, Some(e), None);
                }
                if rest.len() - p < size {
                    break;
                }
                frames.push(rest[p..p + size].to_vec());
                rest = &rest[p + size..];
            }
            let left = if rest.len() >= p {
                rest.len() - p
            } else {
                rest.len()
            };
            (frames, None, (!rest.is_empty()).then_some(left))
        }
    }
}

const ALPHABET: &[u8] = b"ab\r\n\n;";

fn same_error(got: &FrameError, want: &FrameError) -> bool {
    match (got, want) {
        (FrameError::LineTooLong { limit: a, seen }, FrameError::LineTooLong { limit: b, .. }) => {
            a == b && seen > a
        }
        _ => got == want,
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let config = input.byte();
    let framing = if config & 1 == 0 {
        let k = 1 + input.byte() as usize % 3;
        let delim: Vec<u8> = input
            .bytes(k)
            .iter()
            .map(|x| ALPHABET[*x as usize % ALPHABET.len()])
            .collect();
        if delim.len() < k {
            return;
        }
        Framing::Lines(delim, input.byte() as usize % 24)
    } else {
        let prefix = if config & 2 == 0 {
            Prefix::U16
        } else {
            Prefix::U32
        };
        Framing::Length(prefix, input.byte() as usize % 40)
    };
    let per_turn = NonZeroUsize::new((config >> 2) as usize % 5);
    let n_actions = input.byte() as usize % 16;
    let actions = input.bytes(n_actions).to_vec();

    // The stream: frames well formed for the framing, and raw bytes.
    let mut data = Vec::new();
    let mut sends = Vec::new(); // chunk ends, and turns after each
    while !input.0.is_empty() && data.len() < 4096 {
        let op = input.byte();
        let n = input.byte() as usize % 24;
        let body = input.bytes(n);
        match (op % 4, &framing) {
            (0, Framing::Lines(delim, _)) => {
                data.extend(body.iter().map(|x| ALPHABET[*x as usize % 2]));
                data.extend_from_slice(delim);
            }
            (0, Framing::Length(prefix, _)) => {
                data.extend_from_slice(prefix.encode(n).unwrap().as_ref());
                data.extend_from_slice(body);
            }
            (1, _) => data.extend(body.iter().map(|x| ALPHABET[*x as usize % ALPHABET.len()])),
            (2, _) => data.extend_from_slice(body),
            _ => {}
        }
        if op & 0x10 != 0 {
            sends.push((data.len(), (op >> 5) as usize));
        }
    }
    sends.push((data.len(), 1));

    let shared = Rc::new(Shared {
        actions,
        ..Shared::default()
    });
    let ev = EventLoop::new().expect("a loop");
    let rec = Recorder(shared.clone());
    let (t, peer) = match &framing {
        Framing::Lines(delim, max) => {
            let mut p = Lines::with_delimiter(rec, delim, *max).unwrap();
            if let Some(n) = per_turn {
                p.set_frames_per_turn(n);
            }
            memory::open(&ev, p)
        }
        Framing::Length(prefix, max) => {
            let mut p = LengthPrefixed::new(rec, *prefix, *max);
            if let Some(n) = per_turn {
                p.set_frames_per_turn(n);
            }
            memory::open(&ev, p)
        }
    }
    .expect("a connection");
    let turn = |k: usize| {
        for _ in 0..k {
            shared.turn.set(shared.turn.get() + 1);
            ev.run_once_timeout(Duration::ZERO).expect("a turn");
        }
    };
    let resume = || {
        if shared.paused.replace(false) {
            t.resume_reading();
        }
    };
    let mut from = 0;
    for (i, &(to, k)) in sends.iter().enumerate() {
        peer.send(&data[from..to]);
        from = to;
        turn(k);
        if k % 2 == 1 || i % 3 == 0 {
            resume();
        }
    }
    // Turns until three in a row deliver nothing (each other one delivers
    // at least a frame, so this ends).
    let settle = || {
        let mut quiet = 0;
        while quiet < 3 {
            resume();
            let n = shared.events.borrow().len();
            turn(1);
            quiet = if shared.events.borrow().len() == n {
                quiet + 1
            } else {
                0
            };
        }
    };
    // Everything delivered, then the end of file.
    settle();
    peer.send_eof();
    settle();
    let events = shared.events.take();

    let (want, error, left) = reference(&framing, &data);
    let frames: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Frame(..)))
        .collect();
    let budget = per_turn.map_or(64, NonZeroUsize::get);
    for w in frames.windows(budget + 1) {
        let (Event::Frame(_, a), Event::Frame(_, b)) = (w[0], w[budget]) else {
            unreachable!()
        };
        assert_ne!(
            a, b,
            "more than {budget} frames in one turn: {events:?} {sends:?}"
        );
    }
    for (i, f) in frames.iter().enumerate() {
        let Event::Frame(got, _) = f else {
            unreachable!()
        };
        assert_eq!(Some(got), want.get(i), "frame {i}; events {events:?}");
    }
    let closed_at = frames
        .iter()
        .enumerate()
        .position(|(i, _)| shared.actions.get(i).copied().unwrap_or(0) % 8 == 2);
    let mut tail = events[frames.len()..].iter();
    let shown = format!("{events:?} for {data:?}");
    assert!(
        events[..frames.len()]
            .iter()
            .all(|e| matches!(e, Event::Frame(..))),
        "frames first: {shown}"
    );
    match closed_at {
        Some(i) => {
            assert_eq!(frames.len(), i + 1, "frames after a close: {shown}");
            assert_eq!(tail.next(), Some(&Event::Lost), "{shown}");
        }
        None => {
            assert_eq!(frames.len(), want.len(), "every frame: {shown}");
            match &error {
                Some(e) => match tail.next() {
                    Some(Event::Error(got)) if same_error(got, e) => {
                        assert_eq!(tail.next(), Some(&Event::Lost), "{shown}")
                    }
                    other => panic!("want {e:?}, got {other:?}: {shown}"),
                },
                None => {
                    if let Some(left) = left {
                        let truncated = Event::Error(FrameError::Truncated { buffered: left });
                        assert_eq!(tail.next(), Some(&truncated), "{shown}");
                    }
                    assert_eq!(tail.next(), Some(&Event::Eof), "{shown}");
                    assert_eq!(tail.next(), Some(&Event::Lost), "{shown}");
                }
            }
        }
    }
    assert_eq!(tail.next(), None, "nothing after connection_lost: {shown}");
    drop((t, peer, ev));
});
