//! A TLS connection's reads are budgeted in records, not only in the
//! plaintext they carry: a peer that streams records with little or no data
//! in them (key updates around one-byte messages) gets one [`READ_BUDGET`]
//! per turn, each record charged 2 KiB on top of its bytes, instead of
//! holding the loop until its socket is drained; and the budget holds
//! across the reads of a turn.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::{Limits, Protocol, Transport};
use deferloop::{EventLoop, Loop};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::time::Duration;
use util::run_until;

const READ_BUDGET: usize = Limits::DEFAULT.read_budget;

/// Only a stall guard: the flood is about 130,000 records, each decrypted
/// (and its key update derived) by the debug build's crypto, which takes
/// seconds on a quiet machine and has taken over 30 s on a 2-core one
/// beside other builds.
const T: Duration = Duration::from_secs(300);

/// Records each turn's plaintext; checked by the test, not here.
struct Count {
    lp: Loop,
    /// (turn, plaintext bytes delivered in that turn)
    per_turn: Rc<RefCell<Vec<(u64, usize)>>>,
}

impl Protocol for Count {
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        let turn = self.lp.turn_count();
        let mut v = self.per_turn.borrow_mut();
        match v.last_mut() {
            Some((t, n)) if *t == turn => *n += data.len(),
            _ => v.push((turn, data.len())),
        }
    }
}

/// Sends `messages` messages of `len` bytes, each followed by `updates`
/// key updates (rustls accepts 32 between two messages), to a TLS server
/// that counts what it gets per turn; returns the records sent and the
/// most plaintext delivered in one turn.
fn flood(len: usize, updates: usize, messages: usize) -> (Vec<u8>, usize) {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let per_turn = Rc::new(RefCell::new(Vec::new()));
    let (lp, pt) = (ev.to_loop(), per_turn.clone());
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || Count {
                lp: lp.clone(),
                per_turn: pt.clone(),
            },
        )
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    // The flood is made in full before it is sent, so the socket stays
    // full while the server reads: how much it reads per turn is then the
    // server's choice, not the sender's pace.
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, addr);
        let message = vec![b'x'; len];
        let mut flood = Vec::new();
        for _ in 0..messages {
            c.writer().write_all(&message).unwrap();
            for _ in 0..updates {
                c.refresh_traffic_keys().unwrap();
            }
            while c.wants_write() {
                c.write_tls(&mut flood).unwrap();
            }
        }
        sock.write_all(&flood).unwrap();
        // Stay open until the server has read it all: a close with its
        // session tickets unread would reset the connection.
        let _ = wait.recv();
        flood
    });
    let total = |v: &Vec<(u64, usize)>| v.iter().map(|(_, n)| n).sum::<usize>();
    run_until(&ev, T, || total(&per_turn.borrow()) == len * messages);
    done.send(()).unwrap();
    drop(l);
    let records = client.join().unwrap();
    let most = per_turn.borrow().iter().map(|(_, n)| *n).max().unwrap();
    (records, most)
}

/// Records in a stream of whole records, by their 5-byte headers.
fn records_in(mut stream: &[u8]) -> usize {
    let mut n = 0;
    while stream.len() >= 5 {
        let len = u16::from_be_bytes([stream[3], stream[4]]) as usize;
        stream = &stream[5 + len..];
        n += 1;
    }
    n
}

/// The most plaintext one turn may deliver from a flood of `records` (its
/// bytes) carrying `plain` bytes in messages of `len`: one budget's worth,
/// each record charged 2 KiB on top of its bytes; then the read that
/// crossed it (at most a 16 KiB record and its header) and the message it
/// ended in.
fn most_per_turn(records: &[u8], plain: usize, len: usize) -> usize {
    let (bytes, plain) = (records.len() as f64, plain as f64);
    let charged = bytes + 2048.0 * records_in(records) as f64;
    let crossing = 17.0 * 1024.0 * charged / bytes;
    ((READ_BUDGET as f64 + crossing) * plain / charged) as usize + len
}

#[test]
fn a_flood_of_key_updates_is_read_a_budget_per_turn() {
    let messages = 4000;
    let (records, most) = flood(1, 32, messages);
    let bound = most_per_turn(&records, messages, 1);
    assert!(
        most <= bound,
        "{most} one-byte messages in one turn, over the budget's {bound}"
    );
}

/// Records that fill the read buffer before they spend the budget: the
/// budget holds across the reads of a turn, not per read.
#[test]
fn a_budget_holds_across_the_reads_of_a_turn() {
    let (len, messages) = (16 * 1024, 200);
    let (records, most) = flood(len, 20, messages);
    let bound = most_per_turn(&records, len * messages, len);
    assert!(
        most <= bound,
        "{} messages of 16 KiB in one turn, over the budget's {}",
        most / len,
        bound / len
    );
}
