//! The framers' memory bound: whatever the size of a read, a decoder never
//! allocates much more than the limit it was given — a line or message over
//! the limit is refused before it is copied; the frames of a read past the
//! turn's budget wait as the bytes they came in. Measured with a counting
//! allocator, per thread (the tests of this binary run in parallel).

use deferloop::net::framing::{
    FrameProtocol, LengthDecoder, LengthPrefixed, LineDecoder, Lines, Prefix,
};
use deferloop::net::{memory, Protocol, Transport};
use deferloop::EventLoop;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

#[path = "util/alloc_count.rs"]
mod alloc_count;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// Peak bytes allocated by `f` on this thread, above what was live before.
fn peak_growth(f: impl FnOnce()) -> isize {
    let start = alloc_count::reset_peak();
    f();
    alloc_count::peak() - start
}

/// A line that began in an earlier read and ends, far over the limit, in a
/// big read is refused without being copied.
#[test]
fn a_long_line_ending_in_a_later_read_is_refused_before_it_is_copied() {
    for delim in [&b"\n"[..], b"\r\n"] {
        let mut dec = LineDecoder::new(delim, 16).unwrap();
        dec.feed(b"start of a line", |_| true).unwrap();
        let mut read = vec![b'x'; 1 << 20];
        read.extend_from_slice(delim);
        read.extend_from_slice(b"next\n");
        let mut r = Ok(());
        let grew = peak_growth(|| r = dec.feed(&read, |_| true));
        assert!(r.is_err());
        assert!(
            grew <= 128,
            "{delim:?}: allocated {grew} bytes for a 16-byte limit"
        );
    }
}

/// Reads of every size, lines of every length around the limit: the
/// decoder's allocations stay within twice what it may keep.
#[test]
fn line_decoder_allocations_stay_within_twice_the_limit() {
    let max = 100;
    let mut stream = Vec::new();
    for len in (0..300).step_by(7) {
        stream.extend_from_slice(&vec![b'a'; len]);
        stream.extend_from_slice(b"\r\n");
    }
    for read in [1, 2, 3, 50, 99, 101, 102, 4096, 1 << 16] {
        let mut dec = LineDecoder::new(b"\r\n", max).unwrap();
        for chunk in stream.chunks(read) {
            let mut r = Ok(());
            let grew = peak_growth(|| r = dec.feed(chunk, |_| true));
            assert!(grew <= 2 * (max as isize + 2) + 64, "read {read}: {grew}");
            if r.is_err() {
                break;
            }
        }
    }
}

/// The same for length-prefixed messages, with prefixes over the limit and
/// messages that arrive a byte at a time or all at once.
#[test]
fn length_decoder_allocations_stay_within_twice_the_limit() {
    let max = 1000;
    let mut stream = Vec::new();
    for len in (0..=max).step_by(37) {
        stream.extend_from_slice(&(len as u32).to_be_bytes());
        stream.extend_from_slice(&vec![7u8; len]);
    }
    stream.extend_from_slice(&u32::MAX.to_be_bytes());
    stream.extend_from_slice(&vec![0u8; 1 << 20]);
    for read in [1, 3, 999, 1001, 4096, 1 << 20] {
        let mut dec = LengthDecoder::new(Prefix::U32, max);
        for chunk in stream.chunks(read) {
            let mut r = Ok(());
            let grew = peak_growth(|| r = dec.feed(chunk, |_| true));
            assert!(grew <= 2 * max as isize + 64, "read {read}: {grew}");
            if r.is_err() {
                break;
            }
        }
    }
}

/// Bytes still allocated by this thread after `f`, above those before it.
fn held_after(f: impl FnOnce()) -> isize {
    let before = alloc_count::live();
    f();
    alloc_count::live() - before
}

struct Count(Rc<Cell<usize>>);

impl FrameProtocol for Count {
    fn frame_received(&mut self, _: &Transport, _: &[u8]) {
        self.0.set(self.0.get() + 1);
    }
}

fn turn(ev: &EventLoop) {
    let h = ev.call_later(Duration::from_millis(20), |_| {}).unwrap();
    ev.run_once().unwrap();
    h.cancel();
}

/// One read of tiny frames, far more than a turn delivers: what waits for
/// the next turns costs about the bytes it came in, not an allocation per
/// frame (25 bytes a frame here, 28 KiB of them, before), and is given
/// back once delivered.
fn backlog_costs_its_bytes(proto: impl Protocol, frame: &[u8], count: Rc<Cell<usize>>) {
    let ev = EventLoop::new().unwrap();
    let (_t, peer) = memory::open(&ev, proto).unwrap();
    // The thread's read buffer and the connection's state, first.
    peer.send(frame);
    turn(&ev);
    assert_eq!(count.get(), 1);
    let n = 64 * 1024 / frame.len();
    let burst = frame.repeat(n);
    assert!(peer.send(&burst));
    let held = held_after(|| turn(&ev));
    let got = count.get() - 1;
    assert!(got > 0 && got < n, "{got} of {n} frames in the first turn");
    assert!(
        held <= burst.len() as isize + 4096,
        "{held} bytes held for {} bytes read",
        burst.len()
    );
    let held = held_after(|| {
        for _ in 0..20_000 {
            if count.get() == n + 1 {
                break;
            }
            turn(&ev);
        }
    });
    assert_eq!(count.get(), n + 1);
    assert!(held <= 0, "{held} more bytes held once all was delivered");
}

#[test]
fn lines_past_the_turn_s_budget_wait_as_the_bytes_they_came_in() {
    let count = Rc::new(Cell::new(0));
    let lines = Lines::with_delimiter(Count(count.clone()), b"\n", 64).unwrap();
    backlog_costs_its_bytes(lines, b"a\n", count);
}

#[test]
fn messages_past_the_turn_s_budget_wait_as_the_bytes_they_came_in() {
    let count = Rc::new(Cell::new(0));
    let msgs = LengthPrefixed::new(Count(count.clone()), Prefix::U16, 64);
    backlog_costs_its_bytes(msgs, &[0, 1, b'a'], count);
}
