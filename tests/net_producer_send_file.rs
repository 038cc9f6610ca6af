//! A file sent on a stream is read on the thread pool only while the
//! connection takes what it is sent, and a consumer that goes fails it.

use deferloop::net::Stream;
use deferloop::EventLoop;
use std::time::{Duration, Instant};

fn file_of(name: &str, data: &[u8]) -> std::fs::File {
    let path = std::env::temp_dir().join(format!("deferloop-{name}-{}", std::process::id()));
    std::fs::write(&path, data).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

/// Turns the loop until `done` or a few seconds pass; never blocks long.
fn turn_until(ev: &EventLoop, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        let _ = ev.call_later(Duration::from_millis(2), |_| {});
        ev.run_once().unwrap();
    }
}

#[test]
fn a_file_is_sent_whole_and_read_only_while_the_peer_takes_it() {
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_write_buffer_limits(Some(128 << 10), Some(32 << 10))
        .unwrap();
    peer.set_room(Some(0));
    let d = s.send_file(file_of("send-file", &data));
    turn_until(&ev, || s.is_writing_paused());
    for _ in 0..20 {
        let _ = ev.call_later(Duration::from_millis(2), |_| {});
        ev.run_once().unwrap();
    }
    // Stopped one chunk past the high-water mark.
    let held = s.write_buffer_size();
    assert!((128 << 10..=(128 + 64) << 10).contains(&held), "{held}");
    peer.set_room(None);
    assert_eq!(ev.run_until(d).unwrap(), data.len() as u64);
    turn_until(&ev, || s.write_buffer_size() == 0);
    assert!(peer.take_written() == data);
}

#[test]
fn a_file_whose_consumer_resets_fails_with_the_reset() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.set_room(Some(0));
    let d = s.send_file(file_of("send-file-reset", &vec![1; 1 << 20]));
    turn_until(&ev, || s.is_writing_paused());
    peer.reset();
    let f = ev.run_until(d).unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
}
