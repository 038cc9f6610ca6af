//! Flow control on a transport: pausing and resuming reading, and the write
//! buffer's water marks (pause above high, resume at low, limits re-checked).

mod util;

use deferloop::net::{Limits, Listener, Protocol, Transport};
use deferloop::{Error, EventLoop, Failure};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;
use util::net::{assert_lifecycle, lost_count, Ev, Rec, Shared};
use util::run_until;

const DEFAULT_HIGH_WATER: usize = Limits::DEFAULT.high_water;
const DEFAULT_LOW_WATER: usize = Limits::DEFAULT.low_water;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A connection to a peer thread that reads nothing until `go` is sent,
/// then reads to the end and returns how many bytes it got.
struct StalledPeer {
    t: Transport,
    seen: Shared,
    go: mpsc::Sender<()>,
    peer: thread::JoinHandle<usize>,
    _listener: Listener,
}

fn stalled_peer(ev: &EventLoop) -> StalledPeer {
    let (rec, seen) = Rec::new();
    let mut slot = Some(rec);
    let listener = ev
        .listen_tcp(local(), move || slot.take().unwrap())
        .unwrap();
    let addr = listener.local_addr().as_inet().unwrap();
    let (go, rx) = mpsc::channel::<()>();
    let peer = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        rx.recv().unwrap(); // start reading only when told
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all.len()
    });
    run_until(ev, T, || seen.borrow().transport.is_some());
    let t = seen.borrow().transport.clone().unwrap();
    StalledPeer {
        t,
        seen,
        go,
        peer,
        _listener: listener,
    }
}

/// Runs the loop for `d`.
fn run_for(ev: &EventLoop, d: Duration) {
    ev.call_later(d, |lp| lp.stop()).unwrap();
    ev.run().unwrap();
}

/// Pauses reading after the first chunk; records whether it still reads
/// (checked by the test, not here: the loop contains a protocol's panics).
struct PauseAfterFirst {
    rec: Rec,
    reading: Rc<RefCell<Vec<bool>>>,
}

impl Protocol for PauseAfterFirst {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
        t.pause_reading();
        self.reading.borrow_mut().push(t.is_reading());
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        self.rec.eof_received(t)
    }
    fn connection_lost(&mut self, t: &Transport, r: Option<Failure>) {
        self.rec.connection_lost(t, r);
    }
}

#[test]
fn pause_reading_stops_data_and_resume_delivers_what_arrived_meanwhile() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let reading = Rc::new(RefCell::new(Vec::new()));
    let mut slot = Some(PauseAfterFirst {
        rec,
        reading: reading.clone(),
    });
    let l = ev
        .listen_tcp(local(), move || slot.take().unwrap())
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"first").unwrap();
        rx.recv().unwrap();
        s.write_all(b"second").unwrap();
        rx.recv().unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
    });
    run_until(&ev, T, || seen.borrow().bytes == b"first");
    tx.send(()).unwrap();
    // The peer's second write arrives, but nothing is delivered while paused.
    std::thread::sleep(Duration::from_millis(50));
    ev.call_later(Duration::from_millis(50), |lp| lp.stop())
        .unwrap();
    ev.run().unwrap();
    assert_eq!(seen.borrow().bytes, b"first");
    let t = seen.borrow().transport.clone().unwrap();
    t.resume_reading();
    assert!(t.is_reading());
    run_until(&ev, T, || seen.borrow().bytes == b"firstsecond");
    tx.send(()).unwrap();
    t.resume_reading(); // paused again by the protocol: resume for the EOF
    run_until(&ev, T, || lost_count(&seen) == 1);
    peer.join().unwrap();
    assert!(!reading.borrow().is_empty(), "data_received ran");
    for &r in reading.borrow().iter() {
        assert!(!r);
    }
    assert_lifecycle(&seen);
    assert_eq!(
        seen.borrow().events,
        [Ev::Made, Ev::Data(5), Ev::Data(6), Ev::Eof, Ev::Lost(None)]
    );
}

#[test]
fn the_write_buffer_pauses_above_high_and_resumes_at_low() {
    let ev = EventLoop::new().unwrap();
    let StalledPeer {
        t,
        seen,
        go: tx,
        peer,
        _listener,
    } = stalled_peer(&ev);
    assert_eq!(
        t.write_buffer_limits(),
        (DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER)
    );
    // Fill the kernel's buffers and ours, past the high-water mark. Writes
    // after the first in a turn are coalesced and reach the kernel in the
    // loop's next flush: run turns until the buffer stays above the mark.
    let mut written = 0;
    loop {
        while !t.is_writing_paused() {
            t.write(&[9; 16 * 1024]);
            written += 16 * 1024;
        }
        run_for(&ev, Duration::from_millis(20));
        if t.is_writing_paused() {
            break;
        }
    }
    assert!(
        t.write_buffer_size() > DEFAULT_LOW_WATER,
        "paused until it drains to low"
    );
    let heard = seen.borrow().events.clone();
    assert_eq!(heard.last(), Some(&Ev::PauseWriting));
    assert!(
        heard.windows(2).all(|w| w[0] != w[1]),
        "pauses and resumes alternate: {heard:?}"
    );
    tx.send(()).unwrap();
    run_until(&ev, T, || seen.borrow().events.len() == heard.len() + 1);
    assert_eq!(seen.borrow().events[heard.len()], Ev::ResumeWriting);
    assert!(t.write_buffer_size() <= DEFAULT_LOW_WATER);
    t.close();
    run_until(&ev, T, || lost_count(&seen) == 1);
    assert_eq!(peer.join().unwrap(), written, "every byte arrived");
    assert_lifecycle(&seen);
}

#[test]
fn changing_the_limits_rechecks_at_once() {
    let ev = EventLoop::new().unwrap();
    let StalledPeer {
        t,
        seen,
        go: tx,
        peer,
        _listener,
    } = stalled_peer(&ev);
    t.set_write_buffer_limits(Some(1 << 30), None).unwrap();
    // Fill the kernel's buffer (coalesced writes reach it in the next
    // flush), then ours.
    while t.write_buffer_size() < 100_000 {
        t.write(&[1; 50_000]);
        run_for(&ev, Duration::from_millis(2));
    }
    assert!(!t.is_writing_paused());
    assert!(matches!(
        t.set_write_buffer_limits(Some(10), Some(20)),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(
        t.write_buffer_limits(),
        (1 << 30, 1 << 28),
        "unchanged on error"
    );
    t.set_write_buffer_limits(Some(1000), Some(10)).unwrap();
    assert!(t.is_writing_paused(), "lowering high below the size pauses");
    run_for(&ev, Duration::from_millis(20));
    assert_eq!(seen.borrow().events, [Ev::Made, Ev::PauseWriting]);
    t.set_write_buffer_limits(Some(1 << 30), Some(1 << 29))
        .unwrap();
    assert!(!t.is_writing_paused(), "raising low above the size resumes");
    run_for(&ev, Duration::from_millis(20));
    assert_eq!(
        seen.borrow().events,
        [Ev::Made, Ev::PauseWriting, Ev::ResumeWriting]
    );
    tx.send(()).unwrap();
    t.close();
    run_until(&ev, T, || lost_count(&seen) == 1);
    peer.join().unwrap();
    assert_eq!(
        t.set_write_buffer_limits(None, None)
            .unwrap_err()
            .to_string(),
        Error::Gone.to_string()
    );
}

#[test]
fn a_pause_resume_pause_between_two_turns_is_heard_as_one_pause() {
    let ev = EventLoop::new().unwrap();
    let StalledPeer {
        t,
        seen,
        go: tx,
        peer,
        _listener,
    } = stalled_peer(&ev);
    // With nobody reading, fill the socket and buffer past a small high mark.
    // Writes after the first in a turn are coalesced and reach the socket in
    // the loop's next flush, so run turns until the kernel's buffer is full.
    t.set_write_buffer_limits(Some(1000), Some(10)).unwrap();
    while t.write_buffer_size() <= 1000 {
        t.write(&[1; 50_000]);
        run_for(&ev, Duration::from_millis(2));
    }
    assert!(t.is_writing_paused());
    run_for(&ev, Duration::from_millis(20));
    let heard = seen.borrow().events.len();
    assert_eq!(seen.borrow().events.last(), Some(&Ev::PauseWriting));
    // Before the loop tells the protocol: raise the limits (resumed), then
    // write past the new high mark (paused again).
    let size = t.write_buffer_size();
    t.set_write_buffer_limits(Some(size + 1000), Some(size))
        .unwrap();
    assert!(!t.is_writing_paused());
    t.write(&[1; 2000]);
    assert!(t.is_writing_paused());
    run_for(&ev, Duration::from_millis(20));
    assert_eq!(
        seen.borrow().events.len(),
        heard,
        "one pause, not two in a row: {:?}",
        seen.borrow().events
    );
    tx.send(()).unwrap();
    run_until(&ev, T, || {
        seen.borrow().events.last() == Some(&Ev::ResumeWriting)
    });
    assert_eq!(
        seen.borrow().events,
        [Ev::Made, Ev::PauseWriting, Ev::ResumeWriting]
    );
    t.close();
    run_until(&ev, T, || lost_count(&seen) == 1);
    peer.join().unwrap();
    assert_lifecycle(&seen);
}
