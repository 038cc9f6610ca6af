//! Cancelling a read that others wait behind: the reads behind it are
//! answered from what is already buffered (or from the end of file), in
//! order, without waiting for more input; a cancelled read takes nothing,
//! wherever it is in the queue. A proptest drives reads, cancels and sends
//! against a byte-queue model.

use deferloop::deferred::Cancelled;
use deferloop::net::memory::Peer;
use deferloop::net::Stream;
use deferloop::{Deferred, EventLoop, Failure, LoopClosed, ManualClock, TimedOut};
use proptest::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// A few turns that never wait: what was scheduled runs, nothing more.
fn turns(ev: &EventLoop) {
    for _ in 0..4 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
}

/// The result of `d` once it has fired, without waiting for it.
fn fired<T: 'static>(ev: &EventLoop, d: Deferred<T>) -> Result<T, deferloop::Error> {
    turns(ev);
    assert!(d.is_called(), "the read still waits");
    ev.run_until(d)
}

fn open() -> (EventLoop, Stream, Peer) {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    (ev, s, peer)
}

#[test]
fn cancelling_the_head_answers_the_next_read_from_the_buffer() {
    // The stall `fuzz/seeds/stream_reads/crash-9f60bf29…` found: a line, then
    // two bytes, two bytes sent and no newline, the line cancelled.
    let (ev, s, peer) = open();
    let line = s.read_line();
    let two = s.read_exactly(2);
    peer.send(b"ab");
    turns(&ev);
    assert!(!line.is_called() && !two.is_called());
    line.cancel();
    assert!(ev.run_until(line).unwrap_err().check::<Cancelled>());
    assert_eq!(fired(&ev, two).unwrap(), b"ab");
    assert_eq!(s.buffered(), 0);
}

#[test]
fn a_head_cancelled_by_its_timeout_lets_the_next_read_through() {
    let clock = ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let line = s.read_line().add_timeout(Duration::from_secs(1), &*ev);
    let three = s.read_exactly(3);
    peer.send(b"xyz");
    turns(&ev);
    assert!(!three.is_called());
    clock.advance(Duration::from_secs(1));
    let f = ev.run_until(line).unwrap_err();
    assert!(f.check::<TimedOut>(), "{f}");
    assert_eq!(fired(&ev, three).unwrap(), b"xyz");
}

#[test]
fn cancelling_the_head_answers_a_zero_byte_read_behind_it() {
    let (ev, s, _peer) = open();
    let line = s.read_line();
    let none = s.read_exactly(0);
    turns(&ev);
    assert!(!none.is_called());
    line.cancel();
    assert_eq!(fired(&ev, none).unwrap(), b"");
}

#[test]
fn a_head_whose_cancel_asks_for_a_read_still_answers_a_zero_byte_read_behind_it() {
    // The stall `fuzz/seeds/stream_reads/crash-2285b7bc…` found: the
    // cancelled head's own callback asks for another read, which drops the
    // cancelled head before the stream hears of the cancel; the read of 0
    // bytes left at the front must still be answered, with no input.
    let (ev, s, _peer) = open();
    let next = Rc::new(RefCell::new(None));
    let line = {
        let (s, next) = (s.clone(), next.clone());
        s.clone().read_line().add_both(move |r| {
            assert!(r.unwrap_err().check::<Cancelled>());
            *next.borrow_mut() = Some(s.read_until(b"a"));
            Ok::<(), Failure>(())
        })
    };
    let none = s.read_exactly(0);
    turns(&ev);
    assert!(!none.is_called());
    line.cancel();
    assert!(next.borrow().is_some(), "the head's callback ran");
    assert_eq!(fired(&ev, none).unwrap(), b"");
    assert!(!next.borrow().as_ref().unwrap().is_called());
}

#[test]
fn cancelling_the_head_after_the_end_of_file_answers_the_rest() {
    let (ev, s, peer) = open();
    let big = s.read_exactly(10);
    let line = s.read_until(b";");
    let rest = s.read_some();
    peer.send(b"a;b");
    turns(&ev);
    big.cancel();
    peer.send_eof();
    assert_eq!(fired(&ev, line).unwrap(), b"a;");
    assert_eq!(fired(&ev, rest).unwrap(), b"b");
    assert_eq!(ev.run_until(s.read_some()).unwrap(), b"");
}

#[test]
fn cancelling_several_heads_at_once_answers_the_first_read_left() {
    let (ev, s, peer) = open();
    let a = s.read_line();
    let b = s.read_exactly(5);
    let c = s.read_exactly(2);
    let d = s.read_exactly(1);
    peer.send(b"123");
    turns(&ev);
    b.cancel();
    a.cancel();
    assert_eq!(fired(&ev, c).unwrap(), b"12");
    assert_eq!(fired(&ev, d).unwrap(), b"3");
}

#[test]
fn cancelling_a_middle_read_takes_nothing_and_keeps_the_order() {
    let (ev, s, peer) = open();
    let a = s.read_line();
    let b = s.read_exactly(2);
    let c = s.read_exactly(3);
    b.cancel();
    assert!(ev.run_until(b).unwrap_err().check::<Cancelled>());
    peer.send(b"l\nabcde");
    assert_eq!(fired(&ev, a).unwrap(), "l");
    assert_eq!(fired(&ev, c).unwrap(), b"abc");
    assert_eq!(s.buffered(), 2);
    assert_eq!(ev.run_until(s.read_exactly(2)).unwrap(), b"de");
}

#[test]
fn cancelling_the_last_read_leaves_its_bytes_for_the_next() {
    let (ev, s, peer) = open();
    let a = s.read_exactly(2);
    let b = s.read_line();
    b.cancel();
    peer.send(b"ab\ncd\n");
    assert_eq!(fired(&ev, a).unwrap(), b"ab");
    assert_eq!(s.buffered(), 4);
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "cd");
}

#[test]
fn a_cancelled_head_that_kept_reading_on_lets_the_buffer_pause_it() {
    // A head `read_exactly` past the read limit keeps the connection read;
    // once it is cancelled, the next read takes its bytes and what is over
    // the limit stays in the transport (backpressure still holds).
    let (ev, s, peer) = open();
    s.set_read_limit(4);
    let big = s.read_exactly(100);
    let two = s.read_exactly(2);
    peer.send(b"0123456789");
    turns(&ev);
    assert_eq!(s.buffered(), 10, "the head needs more: all of it is read");
    big.cancel();
    assert_eq!(fired(&ev, two).unwrap(), b"01");
    peer.send(b"abcdefgh");
    turns(&ev);
    assert_eq!(
        s.buffered(),
        8,
        "over the limit with no read waiting: paused"
    );
    assert_eq!(peer.unread(), 8);
    assert_eq!(
        ev.run_until(s.read_exactly(16)).unwrap(),
        b"23456789abcdefgh"
    );
}

// --- A model: a byte queue, and the reads in the order they were asked. ---

#[derive(Clone, Debug)]
enum Kind {
    Line,
    Exactly(usize),
    Some,
}

#[derive(Clone, Debug)]
enum Op {
    Read(Kind),
    /// Cancel the read this many places from the oldest one still waiting
    /// (modulo how many wait).
    Cancel(usize),
    Send(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![
            Just(Kind::Line),
            (0usize..6).prop_map(Kind::Exactly),
            Just(Kind::Some),
        ]
        .prop_map(Op::Read),
        2 => (0usize..4).prop_map(Op::Cancel),
        3 => proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'\n')], 1..6)
            .prop_map(Op::Send),
    ]
}

/// What each read ended with: its bytes (a line with its `\n`), or cancelled.
/// Any other failure is recorded as bytes no model answer has (the alphabet
/// is `a`, `b`, `\n`), so that the comparison shows it.
type Answers = Rc<RefCell<Vec<Option<Option<Vec<u8>>>>>>;

fn answer(answers: &Answers, i: usize, r: Result<Vec<u8>, Failure>) -> Result<(), Failure> {
    let a = match r {
        Ok(b) => Some(b),
        Err(f) if f.check::<Cancelled>() => None,
        // The test's end: the loop closes under the reads still waiting.
        Err(f) if f.check::<LoopClosed>() => return Ok(()),
        Err(f) => Some(format!("failed: {f}").into_bytes()),
    };
    answers.borrow_mut()[i] = Some(a);
    Ok(())
}

/// Answers the model's waiting reads, oldest first, while the queue can.
fn settle_model(queue: &mut Vec<u8>, reads: &[(Kind, bool)], answered: &mut [Option<Vec<u8>>]) {
    for (i, (kind, cancelled)) in reads.iter().enumerate() {
        if answered[i].is_some() || *cancelled {
            continue;
        }
        let n = match kind {
            Kind::Line => match queue.iter().position(|&b| b == b'\n') {
                Some(p) => p + 1,
                None => return,
            },
            Kind::Exactly(n) if *n <= queue.len() => *n,
            Kind::Some if !queue.is_empty() => queue.len(),
            _ => return,
        };
        answered[i] = Some(queue.drain(..n).collect());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reads_and_cancels_match_a_byte_queue(ops in proptest::collection::vec(op(), 1..40)) {
        let (ev, s, peer) = open();
        let answers: Answers = Rc::new(RefCell::new(Vec::new()));
        let mut handles: Vec<Deferred<()>> = Vec::new();
        // The model: what was sent and not read, each read's kind and
        // whether it was cancelled before it was answered, and its answer.
        let mut queue = Vec::new();
        let mut reads: Vec<(Kind, bool)> = Vec::new();
        let mut answered: Vec<Option<Vec<u8>>> = Vec::new();
        for op in ops {
            match op {
                Op::Read(kind) => {
                    let i = reads.len();
                    answers.borrow_mut().push(None);
                    let a = answers.clone();
                    let d = match kind {
                        Kind::Line => s.read_line().add_both(move |r| {
                            answer(&a, i, r.map(|l| format!("{l}\n").into_bytes()))
                        }),
                        Kind::Exactly(n) => s.read_exactly(n).add_both(move |r| answer(&a, i, r)),
                        Kind::Some => s.read_some().add_both(move |r| answer(&a, i, r)),
                    };
                    handles.push(d);
                    reads.push((kind, false));
                    answered.push(None);
                }
                Op::Cancel(k) => {
                    let waiting: Vec<usize> = (0..reads.len())
                        .filter(|&i| answered[i].is_none() && !reads[i].1)
                        .collect();
                    if !waiting.is_empty() {
                        let i = waiting[k % waiting.len()];
                        handles[i].cancel();
                        reads[i].1 = true;
                    }
                }
                Op::Send(data) => {
                    peer.send(&data);
                    queue.extend_from_slice(&data);
                }
            }
            turns(&ev);
            settle_model(&mut queue, &reads, &mut answered);
            let got = answers.borrow();
            for i in 0..reads.len() {
                let want = match (&answered[i], reads[i].1) {
                    (Some(b), _) => Some(Some(b.clone())),
                    (None, true) => Some(None),
                    (None, false) => None,
                };
                prop_assert_eq!(&got[i], &want, "read {} ({:?}) of {:?}", i, reads[i].0, reads);
            }
            prop_assert_eq!(s.buffered() + peer.unread(), queue.len());
        }
        drop(handles);
    }
}
