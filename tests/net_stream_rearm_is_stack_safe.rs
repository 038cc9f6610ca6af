//! A loop that asks for the next line from the callback of the last runs at
//! constant stack depth, however many lines are buffered.

use deferloop::net::Stream;
use deferloop::{EventLoop, Failure};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const LINES: usize = 100_000;

/// The first line that is not `x` is kept in `bad` (checked by the test, not
/// here: the chain is dropped, so a panic in it would go unseen).
fn next_line(s: Stream, seen: Rc<Cell<usize>>, bad: Rc<RefCell<Option<String>>>) {
    let again = s.clone();
    let _ = s.read_line().add_callback(move |line: String| {
        if line != "x" && bad.borrow().is_none() {
            *bad.borrow_mut() = Some(line);
        }
        seen.set(seen.get() + 1);
        if seen.get() < LINES {
            next_line(again, seen, bad);
        }
        Ok::<(), Failure>(())
    });
}

#[test]
fn rearming_read_line_100_000_times_from_its_callback_does_not_overflow() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_read_limit(4 << 20);
    peer.send(&b"x\n".repeat(LINES)); // all buffered at once
    let seen = Rc::new(Cell::new(0));
    let bad = Rc::new(RefCell::new(None));
    // On a small stack: recursion per line would overflow it quickly.
    next_line(s, seen.clone(), bad.clone());
    while seen.get() < LINES {
        ev.run_once().unwrap();
    }
    assert_eq!(seen.get(), LINES);
    let bad = bad.borrow_mut().take();
    if let Some(line) = bad {
        assert_eq!(line, "x");
    }
}

#[test]
fn rearming_on_a_small_thread_stack_also_holds() {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(rearming_read_line_100_000_times_from_its_callback_does_not_overflow)
        .unwrap()
        .join()
        .unwrap();
}
