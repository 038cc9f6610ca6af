//! The write timeout: output that waits on a peer taking none of it aborts
//! the connection after a minute by default, so a peer that stops reading
//! cannot hold a connection (and its buffer) for ever; a slow peer that takes
//! some within each timeout is kept. Manual time on the in-memory transport,
//! and one case over real sockets.

mod util;

use deferloop::net::{Limits, Protocol, Transport};
use deferloop::EventLoop;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use util::net::{lost_count, set_send_buffer, ManualConn, Rec};
use util::run_until;

const DEFAULT_WRITE_TIMEOUT: Duration = Limits::DEFAULT.write_timeout.unwrap();

const MS: Duration = Duration::from_millis(1);

/// A connection whose peer takes nothing more, `len` bytes written to it.
fn stalled(len: usize) -> ManualConn {
    let s = ManualConn::open();
    s.peer.set_room(Some(0));
    s.t.write(&vec![7; len]);
    s.turn();
    assert_eq!(s.t.write_buffer_size(), len, "nothing taken");
    s
}

#[test]
fn a_peer_that_takes_nothing_is_disconnected_after_a_minute_by_default() {
    let s = stalled(100_000);
    assert_eq!(s.t.write_timeout(), Some(DEFAULT_WRITE_TIMEOUT));
    assert_eq!(DEFAULT_WRITE_TIMEOUT, Duration::from_secs(60));
    s.after(DEFAULT_WRITE_TIMEOUT - MS);
    assert_eq!(s.lost(), 0, "not before the timeout");
    s.after(MS);
    s.assert_timed_out("write timeout");
}

#[test]
fn a_slow_peer_that_takes_some_within_each_timeout_is_kept() {
    let s = stalled(100_000);
    // 1 KB every 59 s for about ten minutes.
    for _ in 0..10 {
        s.after(Duration::from_secs(59));
        assert_eq!(s.lost(), 0, "still taking");
        s.peer.set_room(Some(1000));
        s.turn();
    }
    assert_eq!(s.peer.take_written().len(), 10_000);
    // Then it stops: a minute from the last stall's start.
    s.after(DEFAULT_WRITE_TIMEOUT - MS);
    assert_eq!(s.lost(), 0);
    s.after(MS);
    s.assert_timed_out("write timeout");
}

/// A socket says writable only once about a third of its send buffer is
/// free: a peer that reads slowly takes some without an edge. The timeout's
/// last check tries the socket and counts what it takes.
#[test]
fn a_slow_peer_that_takes_some_without_a_writable_edge_is_kept() {
    let s = stalled(100_000);
    for _ in 0..10 {
        s.after(Duration::from_secs(30));
        s.peer.set_room_quietly(Some(500));
        s.after(Duration::from_secs(30));
        assert_eq!(s.lost(), 0, "it took some in each minute");
    }
    assert_eq!(s.peer.take_written().len(), 5_000);
    // A minute with nothing taken: the check after it finds no room.
    s.after(DEFAULT_WRITE_TIMEOUT);
    s.assert_timed_out("write timeout");
}

#[test]
fn a_stalled_connection_is_kept_with_the_timeout_off() {
    for off in [None, Some(Duration::MAX)] {
        let s = stalled(100_000);
        s.t.set_write_timeout(off);
        s.after(Duration::from_secs(24 * 3600));
        assert_eq!(s.lost(), 0, "{off:?}");
        // And the stall still ends as a stall does.
        s.peer.set_room(None);
        s.turn();
        assert_eq!(s.peer.take_written().len(), 100_000);
    }
}

#[test]
fn a_shorter_timeout_set_during_a_stall_counts_from_its_start() {
    let s = stalled(10);
    s.after(Duration::from_secs(5));
    s.t.set_write_timeout(Some(Duration::from_secs(8)));
    s.after(Duration::from_secs(3) - MS);
    assert_eq!(s.lost(), 0);
    s.after(MS);
    s.assert_timed_out("write timeout");
}

#[test]
fn a_connection_with_nothing_waiting_is_never_timed_out_for_writing() {
    let s = stalled(0);
    s.after(Duration::from_secs(3600));
    assert_eq!(s.lost(), 0);
    // Nor one whose stall ended: the armed timer finds nothing waiting.
    let s = stalled(50);
    s.after(Duration::from_secs(30));
    s.peer.set_room(None);
    s.turn();
    assert_eq!(s.t.write_buffer_size(), 0);
    s.after(Duration::from_secs(3600));
    assert_eq!(s.lost(), 0);
}

/// Writes `len` bytes once connected and records what happens.
struct Replier {
    len: usize,
    rec: Rec,
}

impl Protocol for Replier {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        set_send_buffer(t, 8192);
        t.set_write_timeout(Some(Duration::from_millis(200)));
        t.write(&vec![1; self.len]);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<deferloop::Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

/// The case the default is for, over a real socket: the reply is above the
/// high-water mark, so the connection is not read (backpressure) and the
/// peer's EOF would never be seen; the peer neither reads nor closes.
#[test]
fn a_tcp_peer_that_never_reads_a_big_reply_is_disconnected() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let mut proto = Some(Replier { len: 8 << 20, rec });
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            proto.take().expect("one connection")
        })
        .unwrap();
    let addr: SocketAddr = l.local_addr().as_inet().unwrap();
    let client = TcpStream::connect(addr).unwrap();
    run_until(&ev, Duration::from_secs(10), || lost_count(&seen) == 1);
    let s = seen.borrow();
    let e = s.reason.as_ref().unwrap().downcast_ref::<std::io::Error>();
    let e = e.unwrap();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{:?}", s.events);
    assert!(e.to_string().contains("write timeout"), "{e}");
    drop(client);
}
