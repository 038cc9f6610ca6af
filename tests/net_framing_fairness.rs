//! Framers deliver a bounded number of frames per connection per turn: one
//! peer's burst of short lines cannot hold the loop; the rest follow in the
//! next turns, in order, with reading held meanwhile (a hold of the
//! framer's own, apart from the protocol's pause).

use deferloop::net::framing::{FrameProtocol, LengthPrefixed, Lines, Prefix, FRAMES_PER_TURN};
use deferloop::net::{memory, Transport};
use deferloop::EventLoop;
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::rc::Rc;

#[derive(Clone, Default)]
struct Got(Rc<RefCell<Vec<Vec<u8>>>>);

impl FrameProtocol for Got {
    fn frame_received(&mut self, _: &Transport, frame: &[u8]) {
        self.0.borrow_mut().push(frame.to_vec());
    }
}

fn turn(ev: &EventLoop) {
    ev.call_soon(|_| {}).unwrap();
    ev.run_once().unwrap();
}

#[test]
fn a_burst_of_lines_is_delivered_a_budget_per_turn_in_order() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let (t, peer) = memory::open(&ev, Lines::new(got.clone())).unwrap();
    let burst: String = (0..1000).map(|i| format!("{i}\r\n")).collect();
    peer.send(burst.as_bytes());
    turn(&ev);
    assert_eq!(got.0.borrow().len(), FRAMES_PER_TURN);
    peer.send(b"after\r\n");
    turn(&ev);
    assert_eq!(peer.unread(), 7, "reading waits for the backlog");
    assert!(t.is_reading(), "the framer's hold is not a pause");
    let mut turns = 2;
    while got.0.borrow().len() < 1001 {
        turn(&ev);
        turns += 1;
        assert!(turns < 100, "stalled at {}", got.0.borrow().len());
    }
    assert!(turns >= 1000 / FRAMES_PER_TURN);
    let got = got.0.borrow();
    for (i, line) in got.iter().take(1000).enumerate() {
        assert_eq!(line, i.to_string().as_bytes());
    }
    assert_eq!(got[1000], b"after");
    assert_eq!(peer.unread(), 0);
    assert!(t.is_reading());
}

#[test]
fn another_connection_is_served_while_one_floods() {
    let ev = EventLoop::new().unwrap();
    let flood = Got::default();
    let quiet = Got::default();
    let (_a, pa) = memory::open(&ev, Lines::new(flood.clone())).unwrap();
    let (_b, pb) = memory::open(&ev, Lines::new(quiet.clone())).unwrap();
    let burst: Vec<u8> = b"x\r\n".repeat(50_000);
    pa.send(&burst);
    pb.send(b"hello\r\n");
    turn(&ev);
    assert_eq!(quiet.0.borrow().len(), 1, "served in the same turn");
    assert!(flood.0.borrow().len() <= FRAMES_PER_TURN);
}

#[test]
fn length_prefixed_messages_are_bounded_too_and_the_budget_can_be_set() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let mut proto = LengthPrefixed::new(got.clone(), Prefix::U16, 1024);
    proto.set_frames_per_turn(NonZeroUsize::new(3).unwrap());
    let (_t, peer) = memory::open(&ev, proto).unwrap();
    let mut data = Vec::new();
    for i in 0..10u8 {
        data.extend_from_slice(&[0, 1, i]);
    }
    peer.send(&data);
    turn(&ev);
    assert_eq!(got.0.borrow().len(), 3);
    for _ in 0..3 {
        turn(&ev);
    }
    let got = got.0.borrow();
    assert_eq!(got.len(), 10);
    assert!(got.iter().enumerate().all(|(i, m)| m == &[i as u8]));
}

#[test]
fn eof_waits_for_the_backlog_and_a_close_drops_it() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let (t, peer) = memory::open(&ev, Lines::new(got.clone())).unwrap();
    peer.send(&b"l\r\n".repeat(200));
    peer.send_eof();
    for _ in 0..10 {
        turn(&ev);
    }
    assert_eq!(got.0.borrow().len(), 200, "every line before the EOF");
    assert!(peer.is_closed());

    let got = Got::default();
    let (t2, peer) = memory::open(&ev, Lines::new(got.clone())).unwrap();
    peer.send(&b"l\r\n".repeat(200));
    turn(&ev);
    t2.abort();
    for _ in 0..5 {
        turn(&ev);
    }
    assert_eq!(
        got.0.borrow().len(),
        FRAMES_PER_TURN,
        "no frame after the abort"
    );
    let _ = t;
}

/// Calls `resume_reading` on every frame, as a proxy ending its own
/// backpressure does; or `pause_reading` at frame `pause_at`.
struct Toggles {
    got: Got,
    resume: bool,
    pause_at: Option<usize>,
}

impl FrameProtocol for Toggles {
    fn frame_received(&mut self, t: &Transport, frame: &[u8]) {
        self.got.0.borrow_mut().push(frame.to_vec());
        if self.resume {
            t.resume_reading();
        }
        if Some(self.got.0.borrow().len()) == self.pause_at {
            t.pause_reading();
        }
    }
}

/// The framer's hold on reading while a burst is delivered is its own: a
/// protocol's `resume_reading` does not lift it, so the rest of the burst
/// stays with the peer instead of piling up in the framer.
#[test]
fn a_protocol_s_resume_reading_does_not_lift_the_framer_s_hold() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let proto = Toggles {
        got: got.clone(),
        resume: true,
        pause_at: None,
    };
    let lines = Lines::with_delimiter(proto, b"\n", 64).unwrap();
    let (t, peer) = memory::open(&ev, lines).unwrap();
    let n = 3 * 32 * 1024;
    peer.send(&b"a\n".repeat(n));
    turn(&ev);
    let first = got.0.borrow().len();
    assert_eq!(first, FRAMES_PER_TURN);
    let left = peer.unread();
    assert!(left > 0, "held while the first read's lines wait");
    for _ in 0..10 {
        turn(&ev);
    }
    assert_eq!(got.0.borrow().len(), 11 * FRAMES_PER_TURN);
    assert_eq!(
        peer.unread(),
        left,
        "still held: the first read is not delivered"
    );
    assert!(t.is_reading(), "the framer's hold is not a pause");
    while got.0.borrow().len() < n {
        turn(&ev);
    }
    assert_eq!(got.0.borrow().len(), n);
    assert_eq!(peer.unread(), 0);
    assert!(t.is_reading());
}

/// A protocol that pauses reading gets no more frames, not even those
/// already read, until it resumes; the framer's own hold ending does not
/// lift its pause.
#[test]
fn a_protocol_s_pause_stops_the_frames_until_it_resumes() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let proto = Toggles {
        got: got.clone(),
        resume: false,
        pause_at: Some(10),
    };
    let (t, peer) = memory::open(&ev, Lines::new(proto)).unwrap();
    let burst: String = (0..1000).map(|i| format!("{i}\r\n")).collect();
    peer.send(burst.as_bytes());
    for _ in 0..20 {
        turn(&ev);
    }
    assert_eq!(got.0.borrow().len(), 10);
    assert!(!t.is_reading());
    t.resume_reading();
    while got.0.borrow().len() < 1000 {
        turn(&ev);
    }
    let want: Vec<Vec<u8>> = (0..1000).map(|i| format!("{i}").into_bytes()).collect();
    assert_eq!(*got.0.borrow(), want, "all of them, in order, once");
}

/// The budget is per turn, not per delivery: a turn that hands out the last
/// frames that waited and then reads new ones delivers no more than the
/// budget in all. (Found by the `framing_dispatch` fuzz target: 4 frames in
/// a turn with a budget of 3.)
#[test]
fn what_waited_and_a_new_read_share_one_turn_s_budget() {
    let ev = EventLoop::new().unwrap();
    let got = Got::default();
    let mut lines = Lines::with_delimiter(got.clone(), b"\n", 100).unwrap();
    lines.set_frames_per_turn(NonZeroUsize::new(3).unwrap());
    let (_t, peer) = memory::open(&ev, lines).unwrap();
    peer.send(b"1\n2\n3\n4\n");
    turn(&ev);
    assert_eq!(got.0.borrow().len(), 3, "the first turn's budget");
    peer.send(b"5\n6\n7\n");
    let mut per_turn = Vec::new();
    for _ in 0..4 {
        let before = got.0.borrow().len();
        turn(&ev);
        per_turn.push(got.0.borrow().len() - before);
    }
    assert!(
        per_turn.iter().all(|&n| n <= 3),
        "frames per turn {per_turn:?}"
    );
    let all: Vec<Vec<u8>> = (1..=7).map(|i| i.to_string().into_bytes()).collect();
    assert_eq!(*got.0.borrow(), all, "all of them, in order");
}
