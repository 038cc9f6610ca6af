//! The in-memory transport: the same dispatch, flow control, backpressure and
//! `connection_lost` rules as TCP, driven from the test's side, with bad input.

mod util;

use deferloop::net::{memory, Limits, Protocol, Transport, WriteBufferFull};
use deferloop::{EventLoop, Failure};
use std::time::Duration;
use util::net::{Ev, Rec, Shared};

const READ_BUDGET: usize = Limits::DEFAULT.read_budget;

fn turns(ev: &EventLoop, n: usize) {
    for _ in 0..n {
        let h = ev.call_later(Duration::from_millis(20), |_| {}).unwrap();
        ev.run_once().unwrap();
        h.cancel();
    }
}

#[test]
fn bytes_in_come_out_through_the_protocol() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    assert!(peer.send(b"ping"));
    turns(&ev, 1);
    assert_eq!(peer.take_written(), b"ping");
    peer.send_eof();
    turns(&ev, 2);
    assert!(peer.is_closed());
    assert!(t.is_closing());
    assert_eq!(
        seen.borrow().events,
        [Ev::Made, Ev::Data(4), Ev::Eof, Ev::Lost(None)]
    );
}

#[test]
fn a_socket_that_stops_taking_writes_pauses_and_resumes_the_protocol() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_write_buffer_limits(Some(100), Some(10)).unwrap();
    peer.set_room(Some(0));
    t.write(&[1; 500]);
    assert!(t.is_writing_paused());
    turns(&ev, 1);
    assert_eq!(seen.borrow().events, [Ev::Made, Ev::PauseWriting]);
    peer.set_room(None);
    turns(&ev, 1);
    assert_eq!(peer.take_written().len(), 500);
    assert_eq!(
        seen.borrow().events,
        [Ev::Made, Ev::PauseWriting, Ev::ResumeWriting]
    );
}

#[test]
fn a_connection_whose_writing_is_paused_is_not_read() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_write_buffer_limits(Some(100), Some(10)).unwrap();
    peer.set_room(Some(0));
    peer.send(&[2; 200]); // echoed into a socket that takes nothing
    turns(&ev, 2);
    assert!(t.is_writing_paused());
    let read = seen.borrow().bytes.len();
    peer.send(&[3; 200]);
    turns(&ev, 3);
    assert_eq!(seen.borrow().bytes.len(), read, "not read while paused");
    peer.set_room(None);
    turns(&ev, 3);
    assert_eq!(seen.borrow().bytes.len(), 400, "read once resumed");
    assert_eq!(peer.take_written().len(), 400);
}

#[test]
fn reading_while_paused_can_be_asked_for() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_write_buffer_limits(Some(100), Some(10)).unwrap();
    t.set_read_while_write_paused(true);
    peer.set_room(Some(0));
    peer.send(&[2; 200]);
    turns(&ev, 2);
    peer.send(&[3; 200]);
    turns(&ev, 2);
    assert_eq!(seen.borrow().bytes.len(), 400);
}

/// Writes `n` short messages per `data_received`.
struct Chatty(usize);
impl Protocol for Chatty {
    fn data_received(&mut self, t: &Transport, _: &[u8]) {
        for _ in 0..self.0 {
            t.write(b"line\n");
        }
    }
}

#[test]
fn writes_in_one_turn_cost_two_system_calls_not_one_each() {
    let ev = EventLoop::new().unwrap();
    let (_t, peer) = memory::open(&ev, Chatty(1000)).unwrap();
    peer.send(b"go");
    turns(&ev, 2);
    assert_eq!(peer.take_written().len(), 5000);
    assert!(peer.write_calls() <= 2, "{} writes", peer.write_calls());
}

#[test]
fn writes_to_other_connections_are_coalesced_per_turn() {
    let ev = EventLoop::new().unwrap();
    let members: Vec<_> = (0..10)
        .map(|_| memory::open(&ev, Rec::new().0).unwrap())
        .collect();
    let targets: Vec<Transport> = members.iter().map(|(t, _)| t.clone()).collect();
    ev.call_soon(move |_| {
        for _ in 0..100 {
            for t in &targets {
                t.write(b"broadcast line\n");
            }
        }
    })
    .unwrap();
    turns(&ev, 3);
    for (_, peer) in &members {
        assert_eq!(peer.take_written().len(), 1500);
        assert!(peer.write_calls() <= 2, "{} writes", peer.write_calls());
    }
}

#[test]
fn writes_after_close_are_dropped_and_counted() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.write(b"last");
    t.close();
    t.write(b"ignored");
    t.write(b"ignored too");
    assert_eq!(t.dropped_writes(), 2);
    turns(&ev, 2);
    assert_eq!(peer.take_written(), b"last");
    assert!(peer.is_closed());
    assert!(
        !peer.send(b"too late"),
        "the peer cannot send to a closed connection"
    );
    assert_eq!(seen.borrow().events, [Ev::Made, Ev::Lost(None)]);
}

#[test]
fn a_reset_in_the_middle_of_a_write_loses_the_connection_with_the_error() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    peer.set_room(Some(10));
    t.write(&[5; 100]);
    assert_eq!(t.write_buffer_size(), 90, "part taken, the rest buffered");
    peer.reset();
    turns(&ev, 2);
    let s = seen.borrow();
    assert_eq!(s.events.len(), 2, "{:?}", s.events);
    let reason = s.reason.as_ref().expect("lost with a reason");
    let io = reason
        .downcast_ref::<std::io::Error>()
        .expect("an io error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
}

#[test]
fn a_write_buffer_past_its_cap_aborts_the_connection() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_write_buffer_cap(1000);
    peer.set_room(Some(0));
    t.write(&[1; 600]);
    assert!(!t.is_closing());
    t.write(&[1; 600]);
    assert!(t.is_closing(), "aborted at once");
    turns(&ev, 1);
    let s = seen.borrow();
    let f: &Failure = s.reason.as_ref().expect("a reason");
    assert_eq!(
        f.downcast_ref::<WriteBufferFull>().map(|e| e.cap),
        Some(1000)
    );
}

#[test]
fn a_close_that_cannot_flush_aborts_after_the_linger_time() {
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let (rec, seen) = Rec::new();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_linger(Duration::from_millis(30));
    peer.set_room(Some(0));
    t.write(b"never taken");
    t.close();
    // Manual time: a turn is bounded by queued work, not by a timer.
    let turn = || {
        ev.call_soon(|_| {}).unwrap();
        ev.run_once().unwrap();
    };
    turn();
    clock.advance(Duration::from_millis(29));
    turn();
    assert!(!peer.is_closed(), "still flushing");
    clock.advance(Duration::from_millis(1));
    turn();
    turn();
    assert_eq!(util::net::lost_count(&seen), 1);
    let s = seen.borrow();
    let io = s
        .reason
        .as_ref()
        .unwrap()
        .downcast_ref::<std::io::Error>()
        .unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
}

#[test]
fn a_read_takes_no_more_than_fits_below_the_high_water_mark() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    t.set_write_buffer_limits(Some(1000), Some(100)).unwrap();
    peer.set_room(Some(0)); // the echo cannot leave
    peer.send(&[1; 100_000]);
    turns(&ev, 3);
    let read = seen.borrow().bytes.len();
    // Up to the mark, then one minimum read (4 KiB) takes it over: paused.
    assert!(
        read <= 1000 + 4096,
        "read {read} bytes with nowhere to write them"
    );
    assert!(t.is_writing_paused());
    assert!(t.write_buffer_size() <= 1000 + 4096);
}

/// Sends a 100,000-byte message to an echo, runs two turns, checks that all
/// of it came back, and returns the protocol's events of that round.
fn echo_100k(ev: &EventLoop, peer: &memory::Peer, seen: &Shared, byte: u8) -> Vec<Ev> {
    seen.borrow_mut().events.clear();
    peer.send(&[byte; 100_000]);
    turns(ev, 2);
    assert_eq!(peer.take_written().len(), 100_000);
    seen.borrow().events.clone()
}

/// A peer that took more than the high-water mark since its socket last
/// refused a write has shown it keeps up: the next read may take twice that
/// (at most the read budget), so a 100 KiB message is one read, not one per
/// mark. If the peer then stops taking writes, that one read is buffered and
/// reading pauses.
#[test]
fn a_peer_that_keeps_up_is_read_a_whole_message_at_a_time() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let (high, _) = t.write_buffer_limits();
    // Nothing shown yet: the first read stopped at the mark.
    assert_eq!(
        echo_100k(&ev, &peer, &seen, 1),
        [Ev::Data(high), Ev::Data(100_000 - high)]
    );
    assert_eq!(echo_100k(&ev, &peer, &seen, 2), [Ev::Data(100_000)]);

    peer.set_room(Some(0));
    peer.send(&[3; 1_000_000]);
    turns(&ev, 3);
    assert!(t.is_writing_paused());
    // It took 200,000 bytes: one read of up to 400,000, cut at the budget.
    assert_eq!(t.write_buffer_size(), READ_BUDGET);
    assert_eq!(seen.borrow().bytes.len(), 200_000 + READ_BUDGET);
}

/// The evidence lasts until the socket refuses a write: a dispatch that
/// reads nothing (a writable edge, or a readable one whose data an earlier
/// read took) does not spend it, and a refusal does. After one, a read takes
/// only what fits below the mark again.
#[test]
fn a_refused_write_bounds_the_next_read_by_the_mark_again() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let (high, _) = t.write_buffer_limits();
    echo_100k(&ev, &peer, &seen, 1);
    // A writable edge, then a readable one, with nothing to read.
    peer.set_room(None);
    turns(&ev, 2);
    assert!(peer.send(&[]));
    turns(&ev, 2);
    assert_eq!(echo_100k(&ev, &peer, &seen, 2), [Ev::Data(100_000)]);

    // The grown read takes the whole message; the socket takes part of its
    // echo, then refuses.
    peer.set_room(Some(50_000));
    assert_eq!(echo_part(&ev, &peer, &seen, 3), [Ev::Data(100_000)]);
    assert_eq!(t.write_buffer_size(), 50_000);
    assert!(!t.is_writing_paused());
    // Up to the mark, then one minimum read (4 KiB) takes it over: paused.
    assert_eq!(
        echo_part(&ev, &peer, &seen, 4),
        [Ev::Data(high - 50_000), Ev::Data(4096), Ev::PauseWriting]
    );
}

/// The same when the refusal comes while the buffer is flushed: what the
/// socket took before it refused does not count.
#[test]
fn a_refused_flush_bounds_the_next_read_by_the_mark_again() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let (high, _) = t.write_buffer_limits();
    echo_100k(&ev, &peer, &seen, 1);
    echo_100k(&ev, &peer, &seen, 2);
    peer.set_room(Some(50_000));
    assert_eq!(echo_part(&ev, &peer, &seen, 3), [Ev::Data(100_000)]);
    assert_eq!(t.write_buffer_size(), 50_000);

    // The peer takes 40,000 more (over half a mark), then refuses again.
    peer.set_room(Some(40_000));
    turns(&ev, 2);
    assert_eq!(t.write_buffer_size(), 10_000);
    assert_eq!(
        echo_part(&ev, &peer, &seen, 4),
        [Ev::Data(high - 10_000), Ev::Data(4096), Ev::PauseWriting]
    );
}

/// The evidence adds up without a ceiling of its own: a peer that has taken
/// megabytes (twice that is over the thread's allowance) still gets a grown
/// read, at most the read budget.
#[test]
fn a_peer_that_kept_up_for_megabytes_still_gets_whole_messages() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (_t, peer) = memory::open(&ev, rec).unwrap();
    for i in 0..30 {
        echo_100k(&ev, &peer, &seen, i);
    }
    assert_eq!(echo_100k(&ev, &peer, &seen, 30), [Ev::Data(100_000)]);
}

/// What a flush sends counts: once the peer took the buffered rest of a
/// refused echo, whole messages are back.
#[test]
fn a_flush_that_empties_the_buffer_earns_the_growth_back() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    echo_100k(&ev, &peer, &seen, 1);
    echo_100k(&ev, &peer, &seen, 2);
    peer.set_room(Some(50_000));
    assert_eq!(echo_part(&ev, &peer, &seen, 3), [Ev::Data(100_000)]);
    assert_eq!(t.write_buffer_size(), 50_000);
    peer.set_room(None);
    turns(&ev, 2);
    assert_eq!(t.write_buffer_size(), 0);
    peer.take_written();
    assert_eq!(echo_100k(&ev, &peer, &seen, 4), [Ev::Data(100_000)]);
}

/// Sends a 100,000-byte message, runs two turns and returns the protocol's
/// events of that round, whatever came back.
fn echo_part(ev: &EventLoop, peer: &memory::Peer, seen: &Shared, byte: u8) -> Vec<Ev> {
    seen.borrow_mut().events.clear();
    peer.send(&[byte; 100_000]);
    turns(ev, 2);
    seen.borrow().events.clone()
}

/// The growth stops while this thread's connections hold more than a few MiB
/// in write buffers: peers that stop reading cannot make every connection
/// hold a grown read. Here another connection holds 5 MiB that its peer
/// does not take, and a peer that keeps up is read a mark at a time.
#[test]
fn reads_stay_within_the_mark_while_the_thread_holds_megabytes_unwritten() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::echo();
    let (t, peer) = memory::open(&ev, rec).unwrap();
    let (high, _) = t.write_buffer_limits();
    echo_100k(&ev, &peer, &seen, 1);

    let (stuck_rec, _) = Rec::new();
    let (stuck, stuck_peer) = memory::open(&ev, stuck_rec).unwrap();
    stuck_peer.set_room(Some(0));
    stuck.write(&vec![0; 5 << 20]);
    assert_eq!(stuck.write_buffer_size(), 5 << 20);
    assert_eq!(
        echo_100k(&ev, &peer, &seen, 2),
        [Ev::Data(high), Ev::Data(100_000 - high)]
    );

    // Once those bytes are gone, the growth is back.
    stuck.abort();
    assert_eq!(echo_100k(&ev, &peer, &seen, 3), [Ev::Data(100_000)]);
}
