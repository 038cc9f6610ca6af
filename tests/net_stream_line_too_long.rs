//! A line longer than the read limit fails with `LineTooLong`; the stream
//! drops it and goes on with the next.

use deferloop::net::{LineTooLong, Stream};
use deferloop::EventLoop;

#[test]
fn a_line_past_the_limit_fails_with_line_too_long() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(16);
    let d = s.read_line();
    peer.send(&[b'x'; 40]);
    let f = ev.run_until(d).unwrap_err();
    assert_eq!(f.downcast_ref::<LineTooLong>().map(|e| e.limit), Some(16));
}

#[test]
fn an_over_long_line_with_its_end_is_dropped_and_the_next_line_reads() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(8);
    peer.send(b"0123456789\nshort\n");
    assert!(ev
        .run_until(s.read_line())
        .unwrap_err()
        .check::<LineTooLong>());
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "short");
}

#[test]
fn a_line_of_exactly_the_limit_is_accepted() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(8);
    peer.send(b"1234567\n");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "1234567");
}
