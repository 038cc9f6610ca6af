//! A stream stops reading its connection while its buffer holds the limit
//! and no read waits for more, and starts again when a read takes bytes.

use deferloop::net::Stream;
use deferloop::EventLoop;

#[test]
fn reading_pauses_while_the_buffer_is_full_and_nobody_asked() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(1024);
    for _ in 0..8 {
        peer.send(&[1; 512]);
        ev.run_once().unwrap();
    }
    // Reading stops at the limit: the rest stays with the "kernel".
    assert!(
        s.buffered() >= 1024 && s.buffered() < 4096,
        "{}",
        s.buffered()
    );
    assert!(!s.is_reading());
    let before = s.buffered();
    let got = ev.run_until(s.read_exactly(before)).unwrap();
    assert_eq!(got.len(), before);
    ev.run_once().unwrap();
    assert!(s.buffered() > 0, "reading resumed once the buffer drained");
}

#[test]
fn a_waiting_read_keeps_reading_past_the_limit_only_as_far_as_it_needs() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(100);
    peer.send(&[2; 150]);
    ev.run_once().unwrap();
    assert!(!s.is_reading());
    let d = s.read_exactly(300);
    assert!(s.is_reading(), "a read that needs more resumes reading");
    peer.send(&[2; 150]);
    assert_eq!(ev.run_until(d).unwrap().len(), 300);
}
