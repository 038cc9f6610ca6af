//! A protocol that lends its own buffer (`Protocol::get_buffer` /
//! `buffer_updated`, asyncio's `BufferedProtocol`) gets every byte, in
//! order, appended to that buffer: over TCP read straight into it (into its
//! spare capacity, not yet initialised), in memory copied in. Reads stay
//! bounded by the size hint and by the spare capacity the protocol reserved.

use deferloop::net::{memory, Protocol, Transport};
use deferloop::{Deferred, EventLoop, Resolver};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

#[derive(Default)]
struct Seen {
    buf: Vec<u8>,
    /// Each read's `n`, and the spare capacity it was lent with.
    reads: Vec<(usize, usize)>,
    hints: Vec<usize>,
    data_received: usize,
    eof: bool,
}

struct Lender {
    seen: Rc<RefCell<Seen>>,
    /// How much spare capacity to reserve before lending (0: none).
    reserve: usize,
    done: Option<Resolver<()>>,
}

impl Protocol for Lender {
    fn lends_buffers(&self) -> bool {
        true
    }

    fn get_buffer(&mut self, _t: &Transport, size_hint: usize) -> Option<Vec<u8>> {
        let mut seen = self.seen.borrow_mut();
        seen.hints.push(size_hint);
        let mut buf = std::mem::take(&mut seen.buf);
        buf.reserve(self.reserve);
        Some(buf)
    }

    fn buffer_updated(&mut self, _t: &Transport, buffer: Vec<u8>, n: usize) {
        let mut seen = self.seen.borrow_mut();
        let spare_before = buffer.capacity() - (buffer.len() - n);
        seen.reads.push((n, spare_before));
        seen.buf = buffer;
    }

    fn data_received(&mut self, _t: &Transport, _data: &[u8]) {
        self.seen.borrow_mut().data_received += 1;
    }

    fn eof_received(&mut self, _t: &Transport) -> bool {
        self.seen.borrow_mut().eof = true;
        if let Some(done) = self.done.take() {
            done.callback(()).unwrap();
        }
        false
    }
}

fn message(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn lender(reserve: usize) -> (Lender, Rc<RefCell<Seen>>, Deferred<()>) {
    let seen = Rc::new(RefCell::new(Seen::default()));
    let (d, r) = Deferred::new();
    let p = Lender {
        seen: seen.clone(),
        reserve,
        done: Some(r),
    };
    (p, seen, d)
}

fn check(seen: &Seen, sent: &[u8]) {
    assert_eq!(seen.buf.len(), sent.len());
    assert!(seen.buf == sent, "the bytes, in order");
    assert_eq!(seen.data_received, 0, "nothing went to data_received");
    assert!(seen.eof);
    assert_eq!(
        seen.reads.len(),
        seen.hints.len(),
        "every buffer lent came back"
    );
    for (&(n, spare), &hint) in seen.reads.iter().zip(&seen.hints) {
        assert!(n <= hint, "a read of {n} over its hint {hint}");
        assert!(n <= spare, "a read of {n} over the spare capacity {spare}");
    }
}

#[test]
fn over_tcp_the_bytes_are_read_straight_into_the_lent_buffer() {
    const LEN: usize = 3 << 20;
    for reserve in [0, 1000, 64 * 1024] {
        let ev = EventLoop::new().unwrap();
        let (p, seen, done) = lender(reserve);
        let mut p = Some(p);
        let l = ev
            .listen_tcp("127.0.0.1:0".parse().unwrap(), move || p.take().unwrap())
            .unwrap();
        let addr = l.local_addr().as_inet().unwrap();
        let sent = message(LEN);
        let to_send = sent.clone();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(&to_send).unwrap();
        });
        ev.run_until(done).unwrap();
        client.join().unwrap();
        let seen = seen.borrow();
        check(&seen, &sent);
        drop(l);
    }
}

#[test]
fn in_memory_the_bytes_are_copied_into_the_lent_buffer() {
    let ev = EventLoop::new().unwrap();
    let (p, seen, done) = lender(16);
    let (_t, peer) = memory::open(&ev, p).unwrap();
    let sent = message(10_000);
    for chunk in sent.chunks(3000) {
        peer.send(chunk);
        ev.run_once().unwrap();
    }
    peer.send_eof();
    ev.run_until(done).unwrap();
    check(&seen.borrow(), &sent);
}

/// A protocol that lends a buffer and keeps `buffer_updated`'s default:
/// the new bytes reach `data_received`.
struct DefaultUpdate(Rc<RefCell<Vec<u8>>>);

impl Protocol for DefaultUpdate {
    fn lends_buffers(&self) -> bool {
        true
    }

    fn get_buffer(&mut self, _t: &Transport, _hint: usize) -> Option<Vec<u8>> {
        Some(Vec::with_capacity(10))
    }
    fn data_received(&mut self, _t: &Transport, data: &[u8]) {
        self.0.borrow_mut().extend_from_slice(data);
    }
}

#[test]
fn buffer_updated_by_default_passes_the_new_bytes_to_data_received() {
    let ev = EventLoop::new().unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let (_t, peer) = memory::open(&ev, DefaultUpdate(got.clone())).unwrap();
    peer.send(b"hello, ");
    ev.run_once().unwrap();
    peer.send(b"world");
    ev.run_once().unwrap();
    assert_eq!(&*got.borrow(), b"hello, world");
}

/// A protocol that has a `get_buffer` but does not say it lends: never
/// asked (the read path of a protocol that does not lend stays as it was).
struct NotLending(Rc<RefCell<(usize, Vec<u8>)>>);

impl Protocol for NotLending {
    fn get_buffer(&mut self, _t: &Transport, _hint: usize) -> Option<Vec<u8>> {
        self.0.borrow_mut().0 += 1;
        Some(Vec::with_capacity(10))
    }
    fn data_received(&mut self, _t: &Transport, data: &[u8]) {
        self.0.borrow_mut().1.extend_from_slice(data);
    }
}

#[test]
fn a_protocol_that_does_not_say_it_lends_is_never_asked_for_a_buffer() {
    let ev = EventLoop::new().unwrap();
    let got = Rc::new(RefCell::new((0, Vec::new())));
    let (_t, peer) = memory::open(&ev, NotLending(got.clone())).unwrap();
    peer.send(b"hello");
    ev.run_once().unwrap();
    assert_eq!(*got.borrow(), (0, b"hello".to_vec()));
}

#[test]
fn a_stream_over_tcp_reads_into_its_own_buffer_and_loses_nothing() {
    // Messages of growing and shrinking sizes (the stream sizes the room it
    // lends by the last read), read with each kind of read.
    use deferloop::net::Stream;
    let ev = EventLoop::new().unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let (done, r) = Deferred::new();
    let r = Rc::new(RefCell::new(Some(r)));
    let g = got.clone();
    fn read_all(
        s: Stream,
        i: usize,
        got: Rc<RefCell<Vec<u8>>>,
        done: Rc<RefCell<Option<Resolver<()>>>>,
    ) {
        let d = match i % 3 {
            0 => s.read_exactly(1 + i * 997 % 150_000),
            1 => s.read_until(b"\xff"),
            _ => s.read_some(),
        };
        let _ = d.add_both(move |r| {
            match r {
                Ok(bytes) if !bytes.is_empty() => {
                    got.borrow_mut().extend_from_slice(&bytes);
                    read_all(s, i + 1, got, done);
                }
                Ok(_) => {
                    done.borrow_mut().take().unwrap().callback(()).unwrap();
                }
                Err(f) => {
                    let partial = f
                        .downcast_ref::<deferloop::net::IncompleteRead>()
                        .map(|e| e.partial.clone())
                        .unwrap_or_default();
                    got.borrow_mut().extend_from_slice(&partial);
                    done.borrow_mut().take().unwrap().callback(()).unwrap();
                }
            }
            Ok::<(), deferloop::Failure>(())
        });
    }
    let l = Stream::listen_tcp(&ev, "127.0.0.1:0".parse().unwrap(), move |s| {
        s.set_read_limit(1 << 20); // read_until takes whole messages
        read_all(s, 0, g.clone(), r.clone());
    })
    .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let mut sent = Vec::new();
    for i in 0..60usize {
        let len = [10, 100_000, 3_000, 250_000, 1, 40_000][i % 6] + i;
        let mut m = message(len);
        m.push(0xff);
        sent.extend_from_slice(&m);
    }
    let to_send = sent.clone();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        for piece in to_send.chunks(70_000) {
            s.write_all(piece).unwrap();
        }
    });
    ev.run_until(done).unwrap();
    client.join().unwrap();
    assert_eq!(got.borrow().len(), sent.len());
    assert!(*got.borrow() == sent, "every byte, in order");
    drop(l);
}
