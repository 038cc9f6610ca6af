//! Deferred reads on a stream: each read fires with the bytes it asked for,
//! in the order asked, however the bytes arrive.

use deferloop::net::{IncompleteRead, Stream};
use deferloop::EventLoop;

#[test]
fn reads_fire_in_order_with_what_they_asked_for() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let line = s.read_line();
    let until = s.read_until(b"||");
    let exact = s.read_exactly(4);
    let some = s.read_some();
    for piece in [&b"hel"[..], b"lo\r", b"\nab|", b"|", b"wxyz", b"rest"] {
        peer.send(piece);
        ev.run_once().unwrap();
    }
    assert_eq!(ev.run_until(line).unwrap(), "hello");
    assert_eq!(ev.run_until(until).unwrap(), b"ab||");
    assert_eq!(ev.run_until(exact).unwrap(), b"wxyz");
    assert_eq!(ev.run_until(some).unwrap(), b"rest");
}

#[test]
fn buffered_bytes_answer_a_later_read_without_firing_inside_the_call() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.send(b"one\ntwo\n");
    ev.run_once().unwrap();
    assert_eq!(s.buffered(), 8);
    let d = s.read_line();
    assert!(!d.is_called(), "a read never fires inside the call");
    assert_eq!(ev.run_until(d).unwrap(), "one");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "two");
}

#[test]
fn at_end_of_file_read_some_gives_empty_and_read_line_fails() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.send(b"tail");
    peer.send_eof();
    let f = ev.run_until(s.read_line()).unwrap_err();
    let e = f.downcast_ref::<IncompleteRead>().unwrap();
    assert_eq!((e.partial.as_slice(), e.expected), (&b"tail"[..], None));
    assert_eq!(ev.run_until(s.read_some()).unwrap(), b"");
    assert!(s.at_eof());
}

#[test]
fn a_reset_fails_waiting_reads_with_its_error() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let d = s.read_line();
    peer.reset();
    let f = ev.run_until(d).unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
}

#[test]
fn a_line_that_is_not_utf8_fails_and_is_consumed() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.send(b"\xff\xfe\nok\n");
    let f = ev.run_until(s.read_line()).unwrap_err();
    assert!(f.check::<std::io::Error>(), "{f}");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "ok");
}
