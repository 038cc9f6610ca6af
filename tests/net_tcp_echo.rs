//! TCP echo over real sockets on loopback: one byte, 10 MiB with flow control
//! engaged, IPv6, and a thousand connections at once.

mod util;

use deferloop::net::{Limits, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use util::net::{assert_lifecycle, Ev, Rec};
use util::run_until;

const READ_BUDGET: usize = Limits::DEFAULT.read_budget;

const T: Duration = Duration::from_secs(20);

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A client that sends `msg` when connected and closes after `want` bytes came back.
struct SendThenClose {
    rec: Rec,
    msg: Vec<u8>,
    want: usize,
}

impl Protocol for SendThenClose {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
        t.write(&self.msg);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
        if self.rec.seen.borrow().bytes.len() >= self.want {
            t.close();
        }
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

#[test]
fn echo_of_one_byte_then_clean_close_on_both_sides() {
    let ev = EventLoop::new().unwrap();
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let listener = ev
        .listen_tcp(local(), move || {
            let (p, seen) = Rec::echo();
            s2.borrow_mut().push(seen);
            p
        })
        .unwrap();
    let addr = listener.local_addr().as_inet().unwrap();
    let (rec, client) = Rec::new();
    let d = ev
        .connect_tcp(
            addr,
            SendThenClose {
                rec,
                msg: b"x".to_vec(),
                want: 1,
            },
        )
        .connected();
    let t = ev.run_until(d).unwrap();
    assert_eq!(t.peer_addr().unwrap().as_inet(), Some(addr));
    assert!(t.nodelay().unwrap(), "TCP_NODELAY is on by default");
    run_until(&ev, T, || {
        servers.borrow().len() == 1
            && util::net::lost_count(&servers.borrow()[0]) == 1
            && util::net::lost_count(&client) == 1
    });
    assert_eq!(client.borrow().bytes, b"x");
    assert_lifecycle(&client);
    let server = servers.borrow()[0].clone();
    assert_lifecycle(&server);
    assert_eq!(server.borrow().bytes, b"x");
    assert_eq!(
        server.borrow().events,
        [Ev::Made, Ev::Data(1), Ev::Eof, Ev::Lost(None)]
    );
    assert_eq!(client.borrow().events.last(), Some(&Ev::Lost(None)));
    assert_eq!(listener.accepted(), 1);
    assert_eq!(ev.io_source_count(), 1, "only the listener is left");
}

/// Writes `total` bytes of a pattern, as fast as flow control allows.
struct Producer {
    sent: usize,
    total: usize,
    received: Rc<RefCell<Vec<u8>>>,
    paused_seen: Rc<Cell<u32>>,
    max_buffered: Rc<Cell<usize>>,
    lost: Rc<Cell<u32>>,
    /// Each `connection_lost` reason (checked by the test, not here: the
    /// loop contains a protocol's panics).
    reasons: Rc<RefCell<Vec<Option<Failure>>>>,
}

impl Producer {
    fn produce(&mut self, t: &Transport) {
        while self.sent < self.total && !t.is_writing_paused() {
            let n = (self.total - self.sent).min(64 * 1024);
            let chunk: Vec<u8> = (self.sent..self.sent + n)
                .map(|i| (i % 251) as u8)
                .collect();
            t.write(&chunk);
            self.sent += n;
            self.max_buffered
                .set(self.max_buffered.get().max(t.write_buffer_size()));
        }
        if self.sent == self.total {
            t.write_eof();
        }
    }
}

impl Protocol for Producer {
    fn connection_made(&mut self, t: &Transport) {
        self.produce(t);
    }
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.received.borrow_mut().extend_from_slice(data);
    }
    fn pause_writing(&mut self, _: &Transport) {
        self.paused_seen.set(self.paused_seen.get() + 1);
    }
    fn resume_writing(&mut self, t: &Transport) {
        self.produce(t);
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        self.reasons.borrow_mut().push(reason);
        self.lost.set(self.lost.get() + 1);
    }
}

/// An echo server with backpressure: it stops reading while its own write
/// buffer is above the high-water mark.
struct BoundedEcho {
    paused_seen: Rc<Cell<u32>>,
    max_buffered: Rc<Cell<usize>>,
    lost: Rc<Cell<u32>>,
    /// Each `connection_lost` reason (checked by the test, not here: the
    /// loop contains a protocol's panics).
    reasons: Rc<RefCell<Vec<Option<Failure>>>>,
}

impl Protocol for BoundedEcho {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
        self.max_buffered
            .set(self.max_buffered.get().max(t.write_buffer_size()));
    }
    fn pause_writing(&mut self, t: &Transport) {
        self.paused_seen.set(self.paused_seen.get() + 1);
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        false // close once everything is echoed
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        self.reasons.borrow_mut().push(reason);
        self.lost.set(self.lost.get() + 1);
    }
}

#[test]
fn echo_of_ten_mebibytes_engages_flow_control_and_bounds_memory() {
    const TOTAL: usize = 10 << 20;
    let ev = EventLoop::new().unwrap();
    let server_paused = Rc::new(Cell::new(0));
    let server_max = Rc::new(Cell::new(0));
    let server_lost = Rc::new(Cell::new(0));
    let reasons = Rc::new(RefCell::new(Vec::new()));
    let rs = reasons.clone();
    let (sp, sm, sl) = (
        server_paused.clone(),
        server_max.clone(),
        server_lost.clone(),
    );
    let listener = ev
        .listen_tcp(local(), move || BoundedEcho {
            paused_seen: sp.clone(),
            max_buffered: sm.clone(),
            lost: sl.clone(),
            reasons: rs.clone(),
        })
        .unwrap();
    let received = Rc::new(RefCell::new(Vec::new()));
    let client_paused = Rc::new(Cell::new(0));
    let client_max = Rc::new(Cell::new(0));
    let client_lost = Rc::new(Cell::new(0));
    let _d = ev
        .connect_tcp(
            listener.local_addr().as_inet().unwrap(),
            Producer {
                sent: 0,
                total: TOTAL,
                received: received.clone(),
                paused_seen: client_paused.clone(),
                max_buffered: client_max.clone(),
                lost: client_lost.clone(),
                reasons: reasons.clone(),
            },
        )
        .connected();
    run_until(&ev, Duration::from_secs(60), || {
        client_lost.get() == 1 && server_lost.get() == 1
    });
    for reason in reasons.borrow().iter() {
        assert!(reason.is_none(), "{reason:?}");
    }
    let got = received.borrow();
    assert_eq!(got.len(), TOTAL);
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    assert!(client_paused.get() >= 1, "the producer was paused");
    // Memory stays bounded: a buffer never holds more than the high-water
    // mark plus what one write or one dispatch's reads add.
    let bound = 64 * 1024 + READ_BUDGET + 64 * 1024;
    assert!(
        client_max.get() <= bound,
        "client buffered {}",
        client_max.get()
    );
    assert!(
        server_max.get() <= bound,
        "server buffered {}",
        server_max.get()
    );
    eprintln!(
        "pauses: client {}, server {}; max buffered: client {}, server {}",
        client_paused.get(),
        server_paused.get(),
        client_max.get(),
        server_max.get()
    );
}

#[test]
fn echo_over_ipv6_loopback() {
    let ev = EventLoop::new().unwrap();
    let listener = match ev.listen_tcp("[::1]:0".parse().unwrap(), || Rec::echo().0) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: no IPv6 loopback here ({e})");
            return;
        }
    };
    let addr = listener.local_addr().as_inet().unwrap();
    assert!(addr.is_ipv6());
    let (rec, client) = Rec::new();
    let _d = ev
        .connect_tcp(
            addr,
            SendThenClose {
                rec,
                msg: b"over six".to_vec(),
                want: 8,
            },
        )
        .connected();
    run_until(&ev, T, || util::net::lost_count(&client) == 1);
    assert_eq!(client.borrow().bytes, b"over six");
    assert_lifecycle(&client);
}

#[test]
fn a_thousand_concurrent_connections_each_echo_and_close_once() {
    const N: usize = 1000;
    util::raise_fd_limit(2 * N + 100);
    let ev = EventLoop::new().unwrap();
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let listener = ev
        .listen_tcp(local(), move || {
            let (p, seen) = Rec::echo();
            s2.borrow_mut().push(seen);
            p
        })
        .unwrap();
    let addr = listener.local_addr().as_inet().unwrap();
    let mut clients = Vec::new();
    for i in 0..N {
        let (rec, seen) = Rec::new();
        let msg = format!("{i:0100}").into_bytes();
        let _d = ev
            .connect_tcp(
                addr,
                SendThenClose {
                    rec,
                    msg,
                    want: 100,
                },
            )
            .connected();
        clients.push(seen);
    }
    run_until(&ev, Duration::from_secs(120), || {
        servers.borrow().len() == N
            && clients.iter().all(|c| util::net::lost_count(c) == 1)
            && servers
                .borrow()
                .iter()
                .all(|s| util::net::lost_count(s) == 1)
    });
    for (i, c) in clients.iter().enumerate() {
        assert_eq!(c.borrow().bytes, format!("{i:0100}").into_bytes());
        assert_lifecycle(c);
    }
    for s in servers.borrow().iter() {
        assert_lifecycle(s);
        assert_eq!(s.borrow().bytes.len(), 100);
    }
    assert_eq!(listener.accepted(), N as u64);
    assert_eq!(ev.io_source_count(), 1);
}

/// Multi-part writes of every shape (empty parts, parts around the 4 KiB
/// that one system call copies, a 1 MiB part) arrive whole and in order,
/// whether the socket takes them at once or they wait in the buffer.
#[test]
fn vectored_writes_of_every_shape_arrive_whole_and_in_order() {
    const SHAPES: &[&[usize]] = &[
        &[0, 1],
        &[1, 0, 5],
        &[3, 4093],
        &[3, 4094],
        &[4095, 1, 2],
        &[4096, 10],
        &[10, 5000, 3],
        &[100, 1 << 20, 7],
        &[2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    ];
    /// The bytes to write, whether `connection_lost` ran, and its reason
    /// (checked by the test, not here: the loop contains a protocol's panics).
    struct Writer(Vec<u8>, Rc<Cell<bool>>, Rc<RefCell<Option<Failure>>>);
    impl Protocol for Writer {
        fn connection_made(&mut self, t: &Transport) {
            let mut at = 0;
            for round in 0..3 {
                for shape in SHAPES {
                    let mut parts = Vec::new();
                    for &len in *shape {
                        parts.push(&self.0[at..at + len]);
                        at += len;
                    }
                    t.write_vectored(&parts);
                }
                let _ = round;
            }
            t.close();
        }
        fn data_received(&mut self, _: &Transport, _: &[u8]) {}
        fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
            *self.2.borrow_mut() = reason;
            self.1.set(true);
        }
    }
    let total: usize = 3 * SHAPES.iter().flat_map(|s| s.iter()).sum::<usize>();
    let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
    let ev = EventLoop::new().unwrap();
    let lost = Rc::new(Cell::new(false));
    let lost_reason = Rc::new(RefCell::new(None));
    let mut slot = Some(Writer(data.clone(), lost.clone(), lost_reason.clone()));
    let l = ev
        .listen_tcp(local(), move || slot.take().unwrap())
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(50)); // let the buffer fill
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    run_until(&ev, T, || lost.get());
    let reason = lost_reason.borrow_mut().take();
    assert!(reason.is_none(), "{reason:?}");
    let got = reader.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
}
