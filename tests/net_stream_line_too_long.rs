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

/// Lowering the limit under a waiting `read_line` whose buffered bytes are
/// now over it fails the read at once: it does not wait for more input,
/// which would never come (reading pauses at the limit). (Found by the
/// `stream_reads` fuzz target.)
#[test]
fn a_lower_limit_fails_a_waiting_line_already_over_it() {
    use std::{cell::RefCell, rc::Rc, time::Duration};
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let got = Rc::new(RefCell::new(None));
    let g = got.clone();
    s.read_line()
        .add_both(move |r| {
            *g.borrow_mut() = Some(r.map_err(|f| f.downcast_ref::<LineTooLong>().map(|e| e.limit)));
            Ok(())
        })
        .detach();
    peer.send(b"0123456789");
    for _ in 0..3 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert!(got.borrow().is_none(), "no line yet");
    s.set_read_limit(4);
    for _ in 0..3 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    assert_eq!(
        *got.borrow(),
        Some(Err(Some(4))),
        "LineTooLong with the new limit"
    );
    assert_eq!(s.buffered(), 0, "the over-long line is dropped");
}
