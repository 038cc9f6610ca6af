//! The read bound over TLS: a read takes more than the high-water mark
//! allows only while the socket takes what is written, and over TLS that
//! means the layer's records, not the plaintext rustls accepted. An echo
//! whose records the socket refuses is followed by reads bounded by the mark
//! again, as over a plain socket (`net_memory`). In memory, driven by hand.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{rustls, StartTls};
use deferloop::net::{memory, Transport};
use deferloop::EventLoop;
use std::io::{Read, Write};
use util::net::{Rec, Shared};

struct Echo {
    ev: EventLoop,
    t: Transport,
    peer: memory::Peer,
    seen: Shared,
    client: rustls::ClientConnection,
}

impl Echo {
    /// An echo server in memory, TLS started and its handshake done.
    fn new() -> Echo {
        let pki = tls::localhost();
        let ev = EventLoop::new().unwrap();
        let (rec, seen) = Rec::echo();
        let (t, peer) = memory::open(&ev, rec).unwrap();
        t.start_tls(StartTls::server(&tls::server(&pki))).unwrap();
        let name = "localhost".try_into().unwrap();
        let client = rustls::ClientConnection::new(tls::raw_client(&pki), name).unwrap();
        let mut e = Echo {
            ev,
            t,
            peer,
            seen,
            client,
        };
        for _ in 0..50 {
            e.exchange();
        }
        assert!(!e.client.is_handshaking() && e.t.is_tls_handshake_done());
        e
    }

    fn turn(&self) {
        self.ev.call_soon(|_| {}).unwrap();
        self.ev.run_once().unwrap();
    }

    /// One round: the client's records in, the server's out to the client;
    /// returns the plaintext the client read.
    fn exchange(&mut self) -> usize {
        let ev = &self.ev;
        tls::exchange(&mut self.client, &self.peer, || {
            ev.call_soon(|_| {}).unwrap();
            ev.run_once().unwrap();
        });
        let mut plain = Vec::new();
        let _ = self.client.reader().read_to_end(&mut plain);
        plain.len()
    }

    /// The client sends `len` bytes (rustls buffers 64 KiB of plaintext at a
    /// time: sent in pieces); returns what came back over `rounds` rounds.
    fn send(&mut self, len: usize, rounds: usize) -> usize {
        let mut back = 0;
        for chunk in vec![7u8; len].chunks(16 << 10) {
            self.client.writer().write_all(chunk).unwrap();
            back += self.exchange();
        }
        for _ in 0..rounds {
            back += self.exchange();
        }
        back
    }

    /// The client's records for `len` bytes, all handed to the server's
    /// "socket" at once, before any turn reads them.
    fn send_at_once(&mut self, len: usize) {
        let mut records = Vec::new();
        for chunk in vec![5u8; len].chunks(16 << 10) {
            self.client.writer().write_all(chunk).unwrap();
            while self.client.wants_write() {
                self.client.write_tls(&mut records).unwrap();
            }
        }
        self.peer.send(&records);
    }

    fn read(&self) -> usize {
        self.seen.borrow().bytes.len()
    }
}

#[test]
fn a_tls_peer_whose_socket_refused_the_echo_is_read_a_mark_at_a_time() {
    let mut e = Echo::new();
    let (high, _) = e.t.write_buffer_limits();
    // Keeps up: every echo goes out.
    for _ in 0..3 {
        assert_eq!(e.send(100_000, 3), 100_000);
    }

    // The socket refuses all of the next echo: rustls takes the plaintext,
    // its records wait in the layer.
    e.peer.set_room(Some(0));
    assert_eq!(e.send(1000, 3), 0);
    assert_eq!(e.t.write_buffer_size(), 0, "the layer took it");

    // The client goes on sending; the server reads up to the mark and one
    // minimum read over it, then pauses.
    let before = e.read();
    e.send_at_once(1_000_000);
    for _ in 0..5 {
        e.turn();
    }
    let read = e.read() - before;
    assert!(e.t.is_writing_paused());
    assert!(
        read <= high + 4096,
        "read {read} bytes after the socket refused the records (mark {high})"
    );
}

#[test]
fn a_tls_peer_that_keeps_up_is_read_a_whole_message_at_a_time() {
    let mut e = Echo::new();
    assert_eq!(e.send(100_000, 3), 100_000);
    assert_eq!(e.send(100_000, 3), 100_000);
    let before = e.seen.borrow().events.len();
    // One message, all of it in before a turn: one read.
    e.send_at_once(100_000);
    e.turn();
    let events = e.seen.borrow().events[before..].to_vec();
    assert_eq!(events, [util::net::Ev::Data(100_000)]);
}
