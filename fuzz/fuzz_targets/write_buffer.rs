//! A connection's write buffer and flow control, through the public API:
//! `write` and `write_vectored` on an in-memory transport whose "socket"
//! takes a number of bytes the input picks (`Peer::set_room`, with or
//! without the writable edge), limits changed (valid and refused), turns
//! in between. The oracle:
//! - what the peer received, plus `write_buffer_size()`, is exactly the
//!   concatenation of the writes, in order, after every operation;
//! - `pause_writing`/`resume_writing` alternate, starting with a pause;
//!   after a turn the protocol believes what `is_writing_paused()` says;
//! - a refused limit change leaves the limits as they were;
//! - once the socket takes everything, all of it arrives, the protocol is
//!   not left paused, and a close ends the connection.
#![no_main]

use deferloop::net::{memory, Protocol, Transport};
use deferloop::EventLoop;
use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The flow-control notes the protocol heard: `true` a pause.
struct Notes(Rc<RefCell<Vec<bool>>>);

impl Protocol for Notes {
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}

    fn pause_writing(&mut self, _: &Transport) {
        self.0.borrow_mut().push(true);
    }

    fn resume_writing(&mut self, _: &Transport) {
        self.0.borrow_mut().push(false);
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let ev = EventLoop::new().expect("a loop");
    let notes: Rc<RefCell<Vec<bool>>> = Rc::default();
    let (t, peer) = memory::open(&ev, Notes(notes.clone())).expect("a connection");
    t.set_write_timeout(None);
    let mut written: Vec<u8> = Vec::new();
    let mut received: Vec<u8> = Vec::new();
    let mut next = 0u8;
    let mut data = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                next = next.wrapping_add(1);
                next
            })
            .collect()
    };
    let turn = || ev.run_once_timeout(Duration::ZERO).expect("a turn");
    let check_notes = || {
        let n = notes.borrow();
        for (i, &pause) in n.iter().enumerate() {
            assert_eq!(pause, i % 2 == 0, "notes alternate from a pause: {n:?}");
        }
    };
    let believes_paused = || notes.borrow().len() % 2 == 1;
    let mut steps = 0;
    while !input.0.is_empty() && steps < 200 {
        steps += 1;
        let op = input.byte();
        let a = input.byte() as usize;
        match op % 12 {
            0..=2 => {
                let d = data(a * (1 + (op as usize >> 4)) * 8);
                t.write(&d);
                written.extend_from_slice(&d);
            }
            3 => {
                let (x, y) = (data(a % 16), data(a * 4));
                t.write_vectored(&[&x, &y, &x]);
                written.extend_from_slice(&x);
                written.extend_from_slice(&y);
                written.extend_from_slice(&x);
            }
            4 => peer.set_room(Some(a * 16)),
            5 => peer.set_room_quietly(Some(a * 16)),
            6 => peer.set_room(None),
            7 => {
                let (high, low) = (input.u16() as usize, input.u16() as usize);
                let high = (op & 0x10 != 0).then_some(high);
                let low = (op & 0x20 != 0).then_some(low);
                let before = t.write_buffer_limits();
                if t.set_write_buffer_limits(high, low).is_err() {
                    assert_eq!(t.write_buffer_limits(), before, "a refused change");
                } else {
                    let (h, l) = t.write_buffer_limits();
                    assert!(l <= h, "limits {h} {l}");
                }
            }
            _ => {
                for _ in 0..1 + a % 3 {
                    turn();
                }
                check_notes();
                assert_eq!(
                    believes_paused(),
                    t.is_writing_paused(),
                    "after a turn the protocol knows; notes {:?}, buffered {}",
                    notes.borrow(),
                    t.write_buffer_size()
                );
            }
        }
        received.extend(peer.take_written());
        check_notes();
        assert_eq!(received[..], written[..received.len()], "bytes in order");
        assert_eq!(
            received.len() + t.write_buffer_size(),
            written.len(),
            "nothing lost or doubled"
        );
    }
    // The socket takes everything: all of it arrives.
    peer.set_room(None);
    for _ in 0..8 {
        turn();
        received.extend(peer.take_written());
        if received.len() == written.len() && !believes_paused() {
            break;
        }
    }
    check_notes();
    assert_eq!(received, written, "everything arrives");
    assert!(!believes_paused() && !t.is_writing_paused(), "left paused");
    t.close();
    for _ in 0..4 {
        turn();
    }
    assert!(peer.is_closed(), "closed");
});
