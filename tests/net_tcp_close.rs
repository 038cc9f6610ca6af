//! Ending TCP connections: half-close, close versus abort, a peer's reset,
//! writes after close, and the loop closing with connections open.
//! `connection_lost` is asserted exactly once in each.

mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::Duration;
use util::net::{assert_lifecycle, lost_count, Ev, Rec, Shared};
use util::run_until;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A listener whose connections are `Rec`s built by `make`; returns their records.
fn serve(
    ev: &EventLoop,
    mut make: impl FnMut() -> Rec + 'static,
) -> (SocketAddr, Rc<RefCell<Vec<Shared>>>) {
    let all = Rc::new(RefCell::new(Vec::new()));
    let a2 = all.clone();
    let l = ev
        .listen_tcp(local(), move || {
            let r = make();
            a2.borrow_mut().push(r.seen.clone());
            r
        })
        .unwrap();
    (l.local_addr().as_inet().unwrap(), all)
}

/// Sends a request, half-closes, and collects the reply until the server closes.
/// Records `(is_reading, dropped_writes)` after its writes (checked by the test,
/// not here: the loop contains a protocol's panics).
struct HalfCloser {
    rec: Rec,
    made: Rc<Cell<Option<(bool, u64)>>>,
}

impl Protocol for HalfCloser {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        t.write(b"request");
        t.write_eof();
        let reading = t.is_reading();
        t.write(b"ignored");
        self.made.set(Some((reading, t.dropped_writes())));
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        self.rec.eof_received(t)
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

/// Answers after the request is complete (at EOF), on a half-open connection.
struct AnswerAtEof {
    rec: Rec,
}

impl Protocol for AnswerAtEof {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        self.rec.eof_received(t);
        let n = self.rec.seen.borrow().bytes.len();
        t.write(format!("got {n} bytes").as_bytes());
        t.close();
        true
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

#[test]
fn half_close_the_peer_still_sends_after_our_write_eof() {
    let ev = EventLoop::new().unwrap();
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let l = ev
        .listen_tcp(local(), move || {
            let (rec, seen) = Rec::new();
            s2.borrow_mut().push(seen);
            AnswerAtEof { rec }
        })
        .unwrap();
    let (rec, client) = Rec::new();
    let made = Rc::new(Cell::new(None));
    let half_closer = HalfCloser {
        rec,
        made: made.clone(),
    };
    let d = ev
        .connect_tcp(l.local_addr().as_inet().unwrap(), half_closer)
        .connected();
    let t = ev.run_until(d).unwrap();
    run_until(&ev, T, || {
        lost_count(&client) == 1 && servers.borrow().iter().all(|s| lost_count(s) == 1)
    });
    let (reading, dropped) = made.get().expect("connection_made ran");
    assert!(reading, "reading goes on after write_eof");
    assert_eq!(dropped, 1, "the write after write_eof was ignored");
    assert_eq!(client.borrow().bytes, b"got 7 bytes");
    assert_eq!(
        client.borrow().events,
        [Ev::Made, Ev::Data(11), Ev::Eof, Ev::Lost(None)]
    );
    let server = servers.borrow()[0].clone();
    assert_eq!(server.borrow().bytes, b"request");
    assert_lifecycle(&server);
    assert_eq!(server.borrow().events.last(), Some(&Ev::Lost(None)));
    assert!(t.is_closing());
}

#[test]
fn data_and_fin_arriving_together_still_deliver_eof() {
    let ev = EventLoop::new().unwrap();
    let (addr, servers) = serve(&ev, || Rec::echo().0);
    let peer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"abc").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        back
    });
    run_until(&ev, T, || {
        servers.borrow().len() == 1 && lost_count(&servers.borrow()[0]) == 1
    });
    assert_eq!(peer.join().unwrap(), b"abc");
    let s = servers.borrow()[0].clone();
    assert_eq!(
        s.borrow().events,
        [Ev::Made, Ev::Data(3), Ev::Eof, Ev::Lost(None)]
    );
}

/// Writes `n` bytes as soon as connected, then closes or aborts. Records
/// `(write_buffer_size, is_closing)` in `connection_made` and `dropped_writes`
/// in `connection_lost` (checked by the test, not here: the loop contains a
/// protocol's panics).
struct WriteThenEnd {
    rec: Rec,
    n: usize,
    abort: bool,
    made: Rc<Cell<Option<(usize, bool)>>>,
    dropped_at_lost: Rc<Cell<Option<u64>>>,
}

impl Protocol for WriteThenEnd {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        t.write(&vec![7u8; self.n]);
        let buffered = t.write_buffer_size();
        if self.abort {
            t.abort();
        } else {
            t.close();
        }
        self.made.set(Some((buffered, t.is_closing())));
        t.write(b"after");
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.dropped_at_lost.set(Some(t.dropped_writes()));
        self.rec.connection_lost(t, reason);
    }
}

/// Runs a server that writes 32 MiB then closes or aborts; returns how many
/// bytes the peer read before end-of-file.
fn bytes_read_by_peer(abort: bool) -> (usize, Shared) {
    const N: usize = 32 << 20;
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let (made, dropped_at_lost) = (Rc::new(Cell::new(None)), Rc::new(Cell::new(None)));
    let mut slot = Some(WriteThenEnd {
        rec,
        n: N,
        abort,
        made: made.clone(),
        dropped_at_lost: dropped_at_lost.clone(),
    });
    let l = ev
        .listen_tcp(local(), move || slot.take().unwrap())
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        go_rx.recv().unwrap(); // read only once the server has ended
        let mut n = 0;
        let mut buf = vec![0; 1 << 16];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return n,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return n,
                Err(e) => panic!("{e}"),
            }
        }
    });
    run_until(&ev, T, || l.accepted() == 1);
    go_tx.send(()).unwrap();
    run_until(&ev, T, || lost_count(&seen) == 1);
    let n = peer.join().unwrap();
    let (buffered, closing) = made.get().expect("connection_made ran");
    assert!(buffered > 0, "the peer does not read yet");
    assert!(closing);
    assert_eq!(dropped_at_lost.get().expect("connection_lost ran"), 1);
    assert_lifecycle(&seen);
    assert_eq!(seen.borrow().events.last(), Some(&Ev::Lost(None)));
    assert_eq!(ev.io_source_count(), 1, "the connection left the registry");
    (n, seen)
}

#[test]
fn close_flushes_everything_and_abort_drops_the_buffer() {
    let (closed, _) = bytes_read_by_peer(false);
    assert_eq!(closed, 32 << 20, "close writes the whole buffer first");
    let (aborted, _) = bytes_read_by_peer(true);
    assert!(
        aborted < 32 << 20,
        "abort dropped the buffer (peer read {aborted})"
    );
}

#[test]
fn writes_after_close_are_ignored_and_logged_once() {
    let logs = util::logs();
    let ev = EventLoop::new().unwrap();
    let (addr, _servers) = serve(&ev, || Rec::new().0);
    let (rec, client) = Rec::new();
    let t = ev.run_until(ev.connect_tcp(addr, rec).connected()).unwrap();
    t.close();
    t.write(b"one");
    t.write(b"two");
    assert_eq!(t.dropped_writes(), 2);
    run_until(&ev, T, || lost_count(&client) == 1);
    t.write(b"three");
    t.close();
    t.abort();
    assert_eq!(t.dropped_writes(), 0, "a gone transport keeps no count");
    assert_lifecycle(&client);
    let warned: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| r.message.contains("closing or closed transport ignored"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    // "three" went to a connection that no longer exists: logged too.
    assert_eq!(
        logs.mine_containing("write of 5 bytes to the transport of a connection that is gone")
            .len(),
        1
    );
}

/// Keeps writing to a peer that does not read.
struct Flood {
    rec: Rec,
}

impl Protocol for Flood {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        t.write(&[1; 1 << 20]);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.write(&[1; 1 << 20]);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

#[test]
fn a_peer_reset_mid_stream_gives_connection_lost_an_error() {
    let ev = EventLoop::new().unwrap();
    let (rec, seen) = Rec::new();
    let mut slot = Some(Flood { rec });
    let l = ev
        .listen_tcp(local(), move || slot.take().unwrap())
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"hi").unwrap();
        go_rx.recv().unwrap();
        let mut some = [0; 1000];
        s.read_exact(&mut some).unwrap();
        util::net::reset(s);
    });
    run_until(&ev, T, || seen.borrow().bytes == b"hi");
    go_tx.send(()).unwrap();
    run_until(&ev, T, || lost_count(&seen) == 1);
    peer.join().unwrap();
    assert_lifecycle(&seen);
    let s = seen.borrow();
    let reason = s.reason.as_ref().expect("a reset is not a clean close");
    let kind = reason.downcast_ref::<std::io::Error>().unwrap().kind();
    assert!(
        matches!(
            kind,
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "{reason}"
    );
}

#[test]
fn closing_the_loop_gives_open_connections_connection_lost_once() {
    let ev = EventLoop::new().unwrap();
    let (addr, servers) = serve(&ev, || Rec::echo().0);
    let (rec, client) = Rec::new();
    let t = ev.run_until(ev.connect_tcp(addr, rec).connected()).unwrap();
    run_until(&ev, T, || servers.borrow().len() == 1);
    let server = servers.borrow()[0].clone();
    drop(ev);
    for seen in [&client, &server] {
        assert_lifecycle(seen);
        let s = seen.borrow();
        let reason = s.reason.as_ref().unwrap();
        assert!(
            reason.check::<deferloop::deferred::LoopClosed>(),
            "{reason}"
        );
    }
    t.write(b"late");
    assert!(t.is_closing());
}

#[test]
fn abort_and_close_repeated_deliver_one_connection_lost() {
    let ev = EventLoop::new().unwrap();
    let (addr, _servers) = serve(&ev, || Rec::new().0);
    let (rec, client) = Rec::new();
    let t = ev.run_until(ev.connect_tcp(addr, rec).connected()).unwrap();
    t.abort_with(Failure::msg("first reason"));
    t.close();
    t.abort();
    t.abort_with(Failure::msg("second reason"));
    run_until(&ev, T, || lost_count(&client) == 1);
    ev.call_later(Duration::from_millis(50), |lp| lp.stop())
        .unwrap();
    ev.run().unwrap();
    assert_lifecycle(&client);
    assert_eq!(
        client.borrow().events.last(),
        Some(&Ev::Lost(Some("first reason".into())))
    );
}

/// "Connect, write, close" against a peer that never reads: the close made
/// while connecting lingers from when the connection is up, and aborts after
/// the linger time as any other close does (it used to wait forever).
#[test]
fn a_close_made_while_connecting_aborts_after_the_linger_time() {
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let l = std::net::TcpListener::bind(local()).unwrap(); // never reads
    let (rec, seen) = Rec::new();
    let conn = ev.connect_tcp(l.local_addr().unwrap(), rec);
    let t = conn.transport().clone();
    t.write(&vec![0; 64 << 20]); // far more than the kernel buffers hold
    t.close();
    let turn = || {
        ev.call_soon(|_| {}).unwrap();
        ev.run_once().unwrap();
    };
    let deadline = std::time::Instant::now() + T;
    while seen.borrow().events.first() != Some(&Ev::Made) {
        assert!(std::time::Instant::now() < deadline, "never connected");
        turn();
    }
    turn();
    assert_eq!(lost_count(&seen), 0, "still flushing");
    clock.advance(Duration::from_secs(30));
    turn();
    turn();
    assert_eq!(
        lost_count(&seen),
        1,
        "aborted after the default 30 s linger"
    );
}

/// Replies with far more than the kernel buffers hold, then `write_eof`:
/// to the request (`on_eof` false) or to the peer's EOF.
struct BigReply {
    on_eof: bool,
    replied: Rc<Cell<bool>>,
    lost: Rc<RefCell<Option<Option<std::io::ErrorKind>>>>,
}

impl BigReply {
    fn reply(&self, t: &Transport) {
        t.write(&vec![0; 16 << 20]);
        t.write_eof();
        self.replied.set(true);
    }
}

impl Protocol for BigReply {
    fn connection_made(&mut self, t: &Transport) {
        t.set_linger(Duration::from_millis(200));
        // Above its high-water mark a connection is not read by default, so
        // a peer's EOF after a big reply would not be seen (the opt-in idle
        // timeout bounds that case); here it is, to reach the EOF path.
        t.set_read_while_write_paused(true);
    }
    fn data_received(&mut self, t: &Transport, _: &[u8]) {
        if !self.on_eof {
            self.reply(t);
        }
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        if self.on_eof {
            self.reply(t);
        }
        true
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        let kind = reason.map(|f| f.downcast_ref::<std::io::Error>().unwrap().kind());
        *self.lost.borrow_mut() = Some(kind);
    }
}

/// A peer that half-closes and never reads the reply: once both sides have
/// ended, `write_eof` is a close, so the linger time bounds the wait for
/// the peer to take the rest (before, the connection was held for good).
#[test]
fn a_peer_that_half_closes_and_never_reads_cannot_hold_the_connection() {
    for on_eof in [true, false] {
        let ev = EventLoop::new().unwrap();
        let (replied, lost) = (Rc::new(Cell::new(false)), Rc::new(RefCell::new(None)));
        let (r2, l2) = (replied.clone(), lost.clone());
        let l = ev
            .listen_tcp(local(), move || BigReply {
                on_eof,
                replied: r2.clone(),
                lost: l2.clone(),
            })
            .unwrap();
        let mut peer = TcpStream::connect(l.local_addr().as_inet().unwrap()).unwrap();
        peer.write_all(b"request").unwrap();
        if !on_eof {
            // The reply and its EOF are asked for before the peer ends.
            run_until(&ev, T, || replied.get());
        }
        peer.shutdown(Shutdown::Write).unwrap();
        run_until(&ev, T, || lost.borrow().is_some());
        assert_eq!(
            *lost.borrow(),
            Some(Some(std::io::ErrorKind::TimedOut)),
            "on_eof {on_eof}: aborted after the linger time"
        );
        drop(peer);
    }
}
