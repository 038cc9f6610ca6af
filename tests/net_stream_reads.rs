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

#[test]
fn a_read_hands_over_its_bytes_without_the_buffers_idle_capacity() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(256 * 1024);
    let big: Vec<u8> = (0..100 * 1024).map(|i| i as u8).collect();
    peer.send(&big);
    for _ in 0..10 {
        if s.buffered() < big.len() {
            ev.run_once().unwrap();
        }
    }
    assert_eq!(s.buffered(), big.len());
    // Everything buffered, from the start: the bytes come out whole.
    let got = ev.run_until(s.read_some()).unwrap();
    assert_eq!(got.len(), big.len());
    assert!(got == big);
    assert!(got.capacity() <= got.len() + got.len() / 2);
    // A part, then the rest: each its own bytes, in order.
    peer.send(&big);
    let part = ev.run_until(s.read_exactly(60 * 1024)).unwrap();
    let rest = ev.run_until(s.read_some()).unwrap();
    assert!(part == big[..60 * 1024] && rest == big[60 * 1024..]);
    assert!(
        rest.capacity() <= rest.len() + rest.len() / 2,
        "capacity {}",
        rest.capacity()
    );
    // A small read after large ones does not carry the large capacity.
    peer.send(b"tail");
    let small = ev.run_until(s.read_some()).unwrap();
    assert_eq!(small, b"tail");
    assert!(small.capacity() < 1024, "capacity {}", small.capacity());
}

/// `read_exactly(0)` needs no byte: it fires (with nothing) in the next
/// turn, not once some unrelated byte or the end of file arrives. (Found by
/// the `stream_reads` fuzz target.)
#[test]
fn a_read_of_zero_bytes_fires_without_waiting_for_input() {
    use std::{cell::RefCell, rc::Rc, time::Duration};
    let ev = EventLoop::new().unwrap();
    let (s, _peer) = Stream::open_memory(&ev).unwrap();
    let got = Rc::new(RefCell::new(None));
    let g = got.clone();
    s.read_exactly(0)
        .add_callback(move |v| {
            *g.borrow_mut() = Some(v);
            Ok(())
        })
        .detach();
    assert!(got.borrow().is_none(), "never inside the call");
    for _ in 0..3 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert_eq!(*got.borrow(), Some(Vec::new()));
}
