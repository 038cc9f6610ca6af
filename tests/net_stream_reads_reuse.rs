//! A stream makes each read's Deferred in the storage of an earlier read's
//! once nothing holds that any more, so that a read costs the caller's
//! callback and the bytes, and nothing else in steady state. Reuse must be
//! invisible: a Deferred still held, or timed, keeps its own result; a
//! failure nobody handled is still reported. Allocations are counted per
//! thread (the tests of this binary run in parallel).

use deferloop::deferred::set_unhandled_failure_hook;
use deferloop::net::{LineTooLong, Stream};
use deferloop::{EventLoop, Failure};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

#[path = "util/alloc_count.rs"]
mod alloc_count;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// Reads `n` lines, each asked for from the callback of the one before. The
/// first line that is not `GET key` is kept in `bad` (checked by the test, not
/// here: the chain is dropped, so a panic in it would go unseen).
fn read_lines(s: Stream, left: Rc<Cell<usize>>, bad: Rc<RefCell<Option<String>>>) {
    let _ = s.read_line().add_callback(move |line| {
        if line != "GET key" && bad.borrow().is_none() {
            *bad.borrow_mut() = Some(line);
        }
        left.set(left.get() - 1);
        if left.get() > 0 {
            read_lines(s, left, bad);
        }
        Ok(())
    });
}

#[test]
fn a_line_read_in_a_loop_allocates_its_callback_and_its_bytes_only() {
    const LINES: usize = 2000;
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let mut input = Vec::new();
    for _ in 0..LINES {
        input.extend_from_slice(b"GET key\r\n");
    }
    let left = Rc::new(Cell::new(LINES));
    let bad = Rc::new(RefCell::new(None));
    let before = alloc_count::allocs();
    read_lines(s.clone(), left.clone(), bad.clone());
    // The read buffer (64 KiB) takes the lines in a few pieces.
    for chunk in input.chunks(4096) {
        peer.send(chunk);
        ev.run_once().unwrap();
    }
    while left.get() > 0 {
        ev.run_once().unwrap();
    }
    let per_line = (alloc_count::allocs() - before) as f64 / LINES as f64;
    let bad = bad.borrow_mut().take();
    if let Some(line) = bad {
        assert_eq!(line, "GET key");
    }
    assert!(
        per_line <= 2.05,
        "{per_line:.3} allocations per line read (the callback and the line: 2)"
    );
}

#[test]
fn a_read_still_held_keeps_its_own_result_while_later_reads_complete() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let first = s.read_line();
    let second = s.read_until(b";");
    peer.send(b"one\ntwo;three\nfour\n");
    ev.run_once().unwrap();
    // Later reads, each asked once the one before has fired and been dropped.
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "three");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "four");
    assert_eq!(ev.run_until(second).unwrap(), b"two;");
    assert_eq!(ev.run_until(first).unwrap(), "one");
}

#[test]
fn a_timed_read_keeps_its_result_and_the_next_reads_work() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let timed = s.read_line().add_timeout(Duration::from_secs(5), &*ev);
    peer.send(b"a\nb\nc\n");
    let next = s.read_line();
    assert_eq!(ev.run_until(timed).unwrap(), "a");
    assert_eq!(ev.run_until(next).unwrap(), "b");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "c");
}

#[test]
fn a_failed_read_nobody_handled_is_reported_and_reading_goes_on() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(8);
    let seen = Rc::new(Cell::new(0));
    let count = seen.clone();
    let previous = set_unhandled_failure_hook(Some(Box::new(move |u| {
        assert!(u.failure.check::<LineTooLong>(), "{}", u.failure);
        count.set(count.get() + 1);
    })));
    let _ = s.read_line().add_callback(|_| Ok::<(), Failure>(()));
    peer.send(b"far too long\nok\n");
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "ok");
    set_unhandled_failure_hook(previous);
    assert_eq!(seen.get(), 1, "the over-long line's failure, reported once");
}
