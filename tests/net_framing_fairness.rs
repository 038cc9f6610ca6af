//! Framers deliver a bounded number of frames per connection per turn: one
//! peer's burst of short lines cannot hold the loop; the rest follow in the
//! next turns, in order, with reading paused meanwhile.

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
    assert!(!t.is_reading(), "reading waits for the backlog");
    peer.send(b"after\r\n");
    let mut turns = 1;
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
