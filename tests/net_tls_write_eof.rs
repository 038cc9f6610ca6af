//! `write_eof` over TLS sends every record, then close_notify, before the
//! write side closes; and a connection whose peer has ended too closes only
//! then. The records rustls accepted are not in the core's write buffer, so
//! "buffer empty" is not "all sent": with a small socket send buffer the
//! last of a large reply used to be cut off, with no close_notify. And the
//! EOF goes out however the records do: a layer also sends them while it
//! reads (answering the peer), not only on a writable edge.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{rustls, StartTls};
use deferloop::net::{memory, Protocol, Transport};
use deferloop::EventLoop;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use util::run_until;

const T: Duration = Duration::from_secs(30);
const REPLY: usize = 8 << 20;

/// Replies with `REPLY` bytes and `write_eof`, to the request or to the
/// peer's end (`in_eof`), over a socket whose send buffer is 8 KiB, so that
/// records wait in the layer when the core's buffer has emptied.
struct Reply {
    in_eof: bool,
}

impl Reply {
    fn reply(t: &Transport) {
        t.write(&vec![b'r'; REPLY]);
        t.write_eof();
    }
}

impl Protocol for Reply {
    fn connection_made(&mut self, t: &Transport) {
        util::net::set_send_buffer(t, 8192);
    }
    fn data_received(&mut self, t: &Transport, _: &[u8]) {
        if !self.in_eof {
            Self::reply(t);
        }
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        if self.in_eof {
            Self::reply(t);
        }
        true
    }
}

/// What the client read, and how the stream ended.
fn exchange(in_eof: bool) -> (usize, String) {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || Reply { in_eof },
        )
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let out = Arc::new(Mutex::new(None));
    let (out2, remote) = (out.clone(), ev.remote());
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, addr);
        c.writer().write_all(b"request").unwrap();
        c.send_close_notify();
        while c.wants_write() {
            c.write_tls(&mut sock).unwrap();
        }
        // Let the server's socket fill before reading.
        std::thread::sleep(Duration::from_millis(200));
        let mut got = 0;
        let mut buf = vec![0; 1 << 16];
        let end = loop {
            match rustls::Stream::new(&mut c, &mut sock).read(&mut buf) {
                Ok(0) => break "close_notify".to_string(),
                Ok(n) => got += n,
                Err(e) => break e.to_string(),
            }
        };
        *out2.lock().unwrap() = Some((got, end));
        remote.call_soon_threadsafe(|_| {}).unwrap();
    });
    run_until(&ev, T, || out.lock().unwrap().is_some());
    client.join().unwrap();
    let r = out.lock().unwrap().take().unwrap();
    r
}

#[test]
fn write_eof_after_the_peer_ended_sends_every_record_then_close_notify() {
    assert_eq!(exchange(true), (REPLY, "close_notify".to_string()));
}

#[test]
fn write_eof_before_the_peer_ends_sends_every_record_then_close_notify() {
    assert_eq!(exchange(false), (REPLY, "close_notify".to_string()));
}

/// Over an in-memory connection: gives its "socket" room again from inside
/// `data_received`, as a peer that reads while it sends would, so the
/// records waiting in the layer go out on the read path.
struct RoomOnRead(Rc<RefCell<Option<Rc<memory::Peer>>>>);

impl Protocol for RoomOnRead {
    fn data_received(&mut self, _: &Transport, _: &[u8]) {
        if let Some(peer) = self.0.borrow().as_ref() {
            peer.set_room(None);
        }
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        true
    }
}

/// Moves records both ways between `peer` and the client `c` for a few
/// turns; returns the plaintext the client read.
fn pump(ev: &EventLoop, peer: &memory::Peer, c: &mut rustls::ClientConnection) -> Vec<u8> {
    let mut plain = Vec::new();
    for _ in 0..20 {
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            peer.send(&out);
        }
        ev.run_once_timeout(Duration::from_millis(1)).unwrap();
        let written = peer.take_written();
        let mut records = &written[..];
        while !records.is_empty() {
            c.read_tls(&mut records).unwrap();
            c.process_new_packets().unwrap();
        }
        let _ = c.reader().read_to_end(&mut plain);
    }
    plain
}

#[test]
fn write_eof_goes_out_when_the_records_leave_on_the_read_path() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let slot = Rc::new(RefCell::new(None));
    let (t, peer) = memory::open(&ev, RoomOnRead(slot.clone())).unwrap();
    let peer = Rc::new(peer);
    t.start_tls(StartTls::server(&tls::server(&pki))).unwrap();
    let name = "localhost".try_into().unwrap();
    let mut c = rustls::ClientConnection::new(tls::raw_client(&pki), name).unwrap();
    pump(&ev, &peer, &mut c);
    assert!(!c.is_handshaking());
    // The "socket" is full: the reply waits in the layer, the core's
    // buffer is empty, and the EOF is asked for.
    peer.set_room(Some(0));
    t.write(&[b'r'; 10_000]);
    t.write_eof();
    *slot.borrow_mut() = Some(peer.clone());
    // The client sends 200 KiB; reading it, the server finds room and
    // sends. (rustls buffers 64 KiB at most: its records are taken as made.)
    let mut records = Vec::new();
    for _ in 0..25 {
        c.writer().write_all(&[b'q'; 8 << 10]).unwrap();
        while c.wants_write() {
            c.write_tls(&mut records).unwrap();
        }
    }
    peer.send(&records);
    let plain = pump(&ev, &peer, &mut c);
    assert_eq!(plain.len(), 10_000);
    assert!(peer.got_eof(), "the write side was shut after the records");
    // Then the client ends too: both sides done, the connection closes.
    c.send_close_notify();
    peer.send_eof();
    pump(&ev, &peer, &mut c);
    assert!(peer.is_closed());
}
