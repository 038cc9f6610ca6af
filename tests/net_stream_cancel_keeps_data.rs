//! Cancelling a read drops the request, never the data: what arrived stays
//! buffered for the next read.

use deferloop::deferred::Cancelled;
use deferloop::net::Stream;
use deferloop::EventLoop;

#[test]
fn a_read_cancelled_while_data_arrives_leaves_the_bytes_for_the_next() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let d = s.read_exactly(10);
    peer.send(b"01234");
    ev.run_once().unwrap();
    d.cancel();
    assert!(ev.run_until(d).unwrap_err().check::<Cancelled>());
    peer.send(b"56789");
    assert_eq!(ev.run_until(s.read_exactly(10)).unwrap(), b"0123456789");
}

#[test]
fn a_cancelled_read_line_leaves_the_partial_line() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let first = s.read_line();
    let second = s.read_line();
    peer.send(b"hal");
    ev.run_once().unwrap();
    first.cancel();
    peer.send(b"f\n");
    assert_eq!(ev.run_until(second).unwrap(), "half");
}

#[test]
fn a_read_cancelled_with_its_line_buffered_does_not_take_it() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.send(b"kept\n");
    ev.run_once().unwrap();
    let d = s.read_line();
    d.cancel(); // before the loop could fire it
    assert!(ev.run_until(d).unwrap_err().check::<Cancelled>());
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "kept");
}
