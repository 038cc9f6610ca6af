//! Model test of the write timeout on the in-memory transport, with manual
//! time: random sequences of clock jumps, writes (from the test, from a loop
//! callback, from inside `data_received`), room granted with and without a
//! writable edge, timeouts changed from outside and from inside the
//! protocol, closes and stray data. After every step the connection must
//! agree with a model that knows only when bytes last reached the peer
//! (`taken`), when the buffer last became non-empty (`waiting`) and the
//! timeout:
//! - never early: a write-timeout abort needs the timeout on, a socket with
//!   no room left (the deadline's check would have found it), and at least
//!   one timeout since `max(taken, waiting)`;
//! - never missed: bytes waiting on a full socket for a whole timeout since
//!   then, the timeout unchanged meanwhile, mean the connection is gone;
//! - nothing else ends it (the linger is longer than any run).
//!
//! Cases: `PROPTEST_CASES`, else the count below.

mod util;

use deferloop::net::{memory, Protocol, Transport};
use deferloop::{EventLoop, Failure, ManualClock};
use proptest::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Write(usize),
    WriteFromCallback(usize),
    /// The peer asks the protocol to write this much (`data_received`).
    WriteFromProtocol(u32),
    /// Room for the socket; `true`: with a writable edge.
    Room(Option<usize>, bool),
    SetTimeout(Option<u64>),
    /// The peer asks the protocol to set the timeout (0: off).
    SetTimeoutFromProtocol(u32),
    Close,
    Junk,
}

fn op() -> impl Strategy<Value = Op> {
    let ms = prop::sample::select(vec![
        0u64, 1, 500, 5_000, 29_000, 59_999, 60_000, 61_000, 119_000,
    ]);
    let room = prop::sample::select(vec![Some(0), Some(1), Some(100), Some(5000), None]);
    let timeout = prop::sample::select(vec![
        None,
        Some(1_000u64),
        Some(30_000),
        Some(60_000),
        Some(90_000),
    ]);
    prop_oneof![
        6 => ms.prop_map(Op::Advance),
        2 => (1usize..30_000).prop_map(Op::Write),
        2 => (1usize..100_000).prop_map(Op::WriteFromCallback),
        2 => (1u32..20_000).prop_map(Op::WriteFromProtocol),
        2 => (room.clone(), Just(true)).prop_map(|(r, e)| Op::Room(r, e)),
        2 => (room, Just(false)).prop_map(|(r, e)| Op::Room(r, e)),
        1 => timeout.prop_map(Op::SetTimeout),
        1 => prop::sample::select(vec![0u32, 1_000, 30_000, 60_000]).prop_map(Op::SetTimeoutFromProtocol),
        1 => Just(Op::Close),
        1 => Just(Op::Junk),
    ]
}

/// Obeys 5-byte commands from the peer: `w` + u32 writes that many bytes,
/// `t` + u32 sets the write timeout in ms (0: off). Records its loss.
struct Obedient(Rc<RefCell<Option<Option<String>>>>);

impl Protocol for Obedient {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        for c in data.chunks_exact(5) {
            let v = u32::from_le_bytes([c[1], c[2], c[3], c[4]]);
            match c[0] {
                b'w' => t.write(&vec![3; v as usize]),
                b't' => t.set_write_timeout((v > 0).then(|| Duration::from_millis(v.into()))),
                _ => {}
            }
        }
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        true
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        *self.0.borrow_mut() = Some(reason.map(|f| f.to_string()));
    }
}

fn command(op: u8, v: u32) -> Vec<u8> {
    let mut c = vec![op];
    c.extend_from_slice(&v.to_le_bytes());
    c
}

fn min(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn check(ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let lost = Rc::new(RefCell::new(None));
    let (t, peer) = memory::open(&ev, Obedient(lost.clone())).unwrap();
    t.set_linger(Duration::from_secs(10_000_000));
    let turns = || {
        for _ in 0..3 {
            ev.call_soon(|_| {}).unwrap();
            ev.run_once().unwrap();
        }
    };
    turns();
    // The model.
    let mut now = Duration::ZERO;
    let mut room: Option<usize> = None;
    let mut taken = Duration::ZERO;
    let mut waiting = Duration::ZERO;
    let mut changed = Duration::ZERO;
    let mut timeout = t.write_timeout();
    let mut buffered = 0;
    for (step, op) in ops.iter().enumerate() {
        // The shortest timeout in force during this step.
        let mut shortest = timeout;
        match *op {
            Op::Advance(ms) => {
                clock.advance(Duration::from_millis(ms));
                now += Duration::from_millis(ms);
            }
            Op::Write(n) => t.write(&vec![1; n]),
            Op::WriteFromCallback(n) => {
                let t = t.clone();
                ev.call_soon(move |_| t.write(&vec![2; n])).unwrap();
            }
            Op::WriteFromProtocol(n) => {
                peer.send(&command(b'w', n));
            }
            Op::Room(r, edge) => {
                room = r;
                if edge {
                    peer.set_room(r);
                } else {
                    peer.set_room_quietly(r);
                }
            }
            Op::SetTimeout(ms) => {
                let d = ms.map(Duration::from_millis);
                t.set_write_timeout(d);
                shortest = min(shortest, d);
            }
            Op::SetTimeoutFromProtocol(ms) => {
                peer.send(&command(b't', ms));
                shortest = min(shortest, (ms > 0).then(|| Duration::from_millis(ms.into())));
            }
            Op::Close => t.close(),
            Op::Junk => {
                peer.send(b"xxxxx");
            }
        }
        turns();
        let took = peer.take_written().len();
        if took > 0 {
            taken = now;
            if let Some(r) = &mut room {
                *r -= took;
            }
        }
        let at = format!("step {step} ({op:?}) at {now:?}");
        if let Some(reason) = lost.borrow().clone() {
            let Some(msg) = reason else { return Ok(()) };
            prop_assert!(msg.contains("write timeout"), "{at}: lost with {msg}");
            let d = shortest.ok_or_else(|| TestCaseError::fail(format!("{at}: timeout off")))?;
            prop_assert_eq!(room, Some(0), "{}: aborted with room left", at);
            prop_assert!(
                now >= taken.max(waiting) + d,
                "{at}: early (taken {taken:?}, waiting since {waiting:?}, timeout {d:?})"
            );
            return Ok(());
        }
        let now_buffered = t.write_buffer_size();
        if now_buffered > 0 && buffered == 0 {
            waiting = now;
        }
        buffered = now_buffered;
        if t.write_timeout() != timeout {
            timeout = t.write_timeout();
            changed = now;
        }
        if let Some(d) = timeout {
            prop_assert!(
                !(buffered > 0
                    && room == Some(0)
                    && now >= taken.max(waiting) + d
                    && now > changed),
                "{at}: not aborted (taken {taken:?}, waiting since {waiting:?}, timeout {d:?})"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(util::cases(2000)))]

    #[test]
    fn the_write_timeout_agrees_with_the_model(ops in prop::collection::vec(op(), 1..200)) {
        check(&ops)?;
    }
}
