//! The write timeout over TLS: records rustls took but the socket refused
//! count as waiting output, however the write was made (a timer, a Deferred
//! callback: no dispatch of the connection's own follows); records the
//! socket takes in part count as progress, whether the deadline's check
//! sends them or a write, an EOF or a read's answer did; a handshake's wait is the
//! handshake deadline's, not the write timeout's. Manual time, in memory.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{rustls, StartTls};
use std::time::Duration;
use util::net::ManualConn;

const MINUTE: Duration = Duration::from_secs(60);

struct Setup {
    c: ManualConn,
    client: rustls::ClientConnection,
}

impl std::ops::Deref for Setup {
    type Target = ManualConn;
    fn deref(&self) -> &ManualConn {
        &self.c
    }
}

impl Setup {
    /// A TLS server connection in memory, its TLS started, no handshake yet.
    fn new() -> Setup {
        let pki = tls::localhost();
        let c = ManualConn::open();
        c.t.start_tls(StartTls::server(&tls::server(&pki))).unwrap();
        let name = "localhost".try_into().unwrap();
        let client = rustls::ClientConnection::new(tls::raw_client(&pki), name).unwrap();
        Setup { c, client }
    }

    /// The client's side of the handshake, until both are done.
    fn handshake(&mut self) {
        for _ in 0..50 {
            self.exchange();
            if !self.client.is_handshaking() && self.t.is_tls_handshake_done() {
                return;
            }
        }
        panic!("no handshake");
    }

    /// One round: the client's records in, the server's out to the client.
    fn exchange(&mut self) {
        tls::exchange(&mut self.client, &self.c.peer, || self.c.turn());
    }

    /// Writes `len` bytes from a loop callback (not a dispatch of this
    /// connection) while the socket takes `room` more bytes.
    fn write_from_a_callback(&self, len: usize, room: usize) {
        self.peer.set_room(Some(room));
        self.turn();
        let t = self.t.clone();
        self.ev.call_soon(move |_| t.write(&vec![9; len])).unwrap();
        self.turn();
        self.turn();
    }
}

/// rustls takes all 30 KB of plaintext, the socket 1,000 bytes of its
/// records: nothing is buffered in the core, the records wait in the layer.
#[test]
fn records_the_socket_refused_after_a_write_from_a_callback_are_timed_out() {
    let mut s = Setup::new();
    s.handshake();
    s.write_from_a_callback(30_000, 1000);
    assert_eq!(s.t.write_buffer_size(), 0, "all in rustls");
    assert_eq!(s.peer.take_written().len(), 1000);
    s.after(MINUTE - Duration::from_millis(1));
    assert_eq!(s.lost(), 0);
    s.after(Duration::from_millis(1));
    s.assert_timed_out("write timeout");
}

#[test]
fn a_write_eof_from_a_callback_on_a_full_socket_is_timed_out() {
    let mut s = Setup::new();
    s.handshake();
    s.peer.set_room(Some(0));
    let t = s.t.clone();
    s.ev.call_soon(move |_| t.write_eof()).unwrap();
    s.turn();
    s.turn();
    s.after(MINUTE);
    assert!(!s.peer.got_eof(), "close_notify never went out");
    s.assert_timed_out("write timeout");
}

/// Progress inside a record: the socket takes 500 bytes of the layer's
/// records a minute, with no writable edge.
#[test]
fn records_taken_in_part_without_an_edge_keep_the_connection() {
    let mut s = Setup::new();
    s.handshake();
    s.write_from_a_callback(100_000, 0);
    for _ in 0..10 {
        s.after(MINUTE / 2);
        s.peer.set_room_quietly(Some(500));
        s.after(MINUTE / 2);
        assert_eq!(s.lost(), 0, "it took some in each minute");
    }
    assert_eq!(s.peer.take_written().len(), 5000);
    s.after(MINUTE);
    s.assert_timed_out("write timeout");
}

/// Writes made before the handshake wait for it, not for the peer to read:
/// a write timeout shorter than the handshake does not end it.
#[test]
fn writes_held_for_the_handshake_are_not_timed_out() {
    let mut s = Setup::new();
    s.t.set_write_timeout(Some(Duration::from_secs(1)));
    s.t.write(b"hello once the handshake is done");
    s.turn();
    s.after(Duration::from_secs(5));
    assert_eq!(s.lost(), 0, "5 s into a 10 s handshake deadline");
    s.handshake();
    s.exchange();
    let mut got = vec![0; 64];
    let n = std::io::Read::read(&mut s.client.reader(), &mut got).unwrap();
    assert_eq!(&got[..n], b"hello once the handshake is done");
    s.after(Duration::from_secs(3600));
    assert_eq!(s.lost(), 0);
}

/// The layer also sends outside the core's flush: with a write, an EOF, or
/// answering a read. What leaves that way is the peer taking some too.
fn sends_from(s: &mut Setup, how: &str) {
    match how {
        "write" => {
            let t = s.t.clone();
            s.ev.call_soon(move |_| t.write(b"tick")).unwrap();
        }
        "write_eof" => {
            let t = s.t.clone();
            s.ev.call_soon(move |_| t.write_eof()).unwrap();
        }
        "read" => {
            std::io::Write::write_all(&mut s.client.writer(), b"ping").unwrap();
            let mut out = Vec::new();
            while s.client.wants_write() {
                s.client.write_tls(&mut out).unwrap();
            }
            s.peer.send(&out);
        }
        _ => unreachable!(),
    }
    s.turn();
    s.turn();
}

/// The peer takes 500 bytes at 30 s, without an edge; they leave with a
/// write, an EOF or a read's answer: the minute's check counts them.
#[test]
fn records_sent_with_a_write_an_eof_or_a_read_count_as_progress() {
    for how in ["write", "write_eof", "read"] {
        let mut s = Setup::new();
        s.handshake();
        s.write_from_a_callback(30_000, 0);
        s.after(MINUTE / 2);
        s.peer.set_room_quietly(Some(500));
        sends_from(&mut s, how);
        assert_eq!(s.peer.take_written().len(), 500, "{how}");
        s.after(MINUTE / 2);
        assert_eq!(s.lost(), 0, "{how}: it took some 30 s ago");
        // And then nothing: one minute more.
        s.after(MINUTE);
        s.assert_timed_out("write timeout");
    }
}

/// The peer reads everything (no edge) and a write or EOF from a callback
/// sends the rest: nothing waits, so nothing times out.
#[test]
fn a_layer_emptied_by_a_write_or_an_eof_is_not_timed_out() {
    for how in ["write", "write_eof"] {
        let mut s = Setup::new();
        s.handshake();
        s.write_from_a_callback(30_000, 1000);
        s.after(Duration::from_secs(10));
        s.peer.set_room_quietly(None);
        sends_from(&mut s, how);
        assert!(s.peer.take_written().len() > 29_000, "{how}: all out");
        assert_eq!(how == "write_eof", s.peer.got_eof());
        s.after(Duration::from_secs(3600));
        assert_eq!(s.lost(), 0, "{how}: {:?}", s.seen.borrow().reason);
    }
}

/// rustls taking plaintext from the core's buffer is not the peer taking
/// it: only records that reach the socket count.
#[test]
fn plaintext_the_layer_takes_while_the_socket_refuses_is_not_progress() {
    let mut s = Setup::new();
    s.handshake();
    s.write_from_a_callback(30_000, 1000);
    let t = s.t.clone();
    s.ev.call_soon(move |_| t.write(b"behind")).unwrap();
    s.turn();
    s.turn();
    assert_eq!(
        s.t.write_buffer_size(),
        6,
        "behind the records, in the core"
    );
    // At 30 s the records leave with a read's answer, the 6 bytes stay.
    s.after(MINUTE / 2);
    s.peer.set_room_quietly(None);
    sends_from(&mut s, "read");
    s.peer.set_room_quietly(Some(0));
    assert!(s.peer.take_written().len() > 28_000);
    assert_eq!(s.t.write_buffer_size(), 6);
    // At 60 s that counts: a new wait from then.
    s.after(MINUTE / 2);
    assert_eq!(s.lost(), 0);
    // At 120 s the check's flush moves the 6 bytes into rustls, and the
    // socket takes none of its record.
    s.after(MINUTE);
    assert_eq!(s.peer.take_written().len(), 0);
    s.assert_timed_out("write timeout");
}
