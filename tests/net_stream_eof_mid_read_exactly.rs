//! The end of file in the middle of `read_exactly` fails it with
//! `IncompleteRead`, holding the bytes that came.

use deferloop::net::{IncompleteRead, Stream};
use deferloop::EventLoop;

#[test]
fn eof_in_the_middle_of_read_exactly_gives_the_partial_bytes() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let d = s.read_exactly(10);
    peer.send(b"abcd");
    ev.run_once().unwrap();
    peer.send_eof();
    let f = ev.run_until(d).unwrap_err();
    assert_eq!(
        f.downcast_ref::<IncompleteRead>()
            .map(|e| (e.partial.as_slice(), e.expected)),
        Some((&b"abcd"[..], Some(10)))
    );
    assert_eq!(s.buffered(), 0);
}

#[test]
fn read_exactly_larger_than_the_limit_reads_past_it() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(4);
    let d = s.read_exactly(100);
    for _ in 0..10 {
        peer.send(&[7; 10]);
        ev.run_once().unwrap();
    }
    assert_eq!(ev.run_until(d).unwrap(), vec![7; 100]);
}
