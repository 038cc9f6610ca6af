//! A TLS connection's reads are budgeted in records, not only in the
//! plaintext they carry: a peer that streams records with little or no data
//! in them (key updates around one-byte messages) gets one [`READ_BUDGET`]
//! per turn, each byte of its records that is not plaintext charged 64
//! times, instead of holding the loop until its socket is drained.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::rustls;
use deferloop::net::{Protocol, Transport, READ_BUDGET};
use deferloop::{EventLoop, Loop};
use std::cell::RefCell;
use std::io::Write;
use std::net::TcpStream;
use std::rc::Rc;
use std::time::Duration;
use util::run_until;

const T: Duration = Duration::from_secs(30);

/// Plaintext bytes the flood carries: one per message.
const MESSAGES: usize = 4000;

/// Key updates after each message: rustls accepts 32 between two messages.
const UPDATES: usize = 32;

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

#[test]
fn a_flood_of_key_updates_is_read_a_budget_per_turn() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let per_turn = Rc::new(RefCell::new(Vec::new()));
    let (lp, pt) = (ev.handle(), per_turn.clone());
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
    let config = tls::raw_client(&pki);
    // The flood is made in full before it is sent, so the socket stays
    // full while the server reads: how much it reads per turn is then the
    // server's choice, not the sender's pace.
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let mut sock = TcpStream::connect(addr).unwrap();
        let name = "localhost".try_into().unwrap();
        let mut c = rustls::ClientConnection::new(config, name).unwrap();
        while c.is_handshaking() {
            c.complete_io(&mut sock).unwrap();
        }
        let mut flood = Vec::new();
        for _ in 0..MESSAGES {
            c.writer().write_all(b"x").unwrap();
            for _ in 0..UPDATES {
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
        flood.len()
    });
    let total = |v: &Vec<(u64, usize)>| v.iter().map(|(_, n)| n).sum::<usize>();
    run_until(&ev, T, || total(&per_turn.borrow()) == MESSAGES);
    done.send(()).unwrap();
    drop(l);
    let records = client.join().unwrap();
    let v = per_turn.borrow();
    // Bytes of records per message in this flood, all but one of them not
    // plaintext, each of those charged 64 times more; so the most one turn
    // may deliver: one budget's worth, and the 4 KiB read that crossed it.
    let ratio = records / MESSAGES;
    let charge = ratio + 64 * (ratio - 1);
    let most = v.iter().map(|(_, n)| *n).max().unwrap();
    assert!(
        most * charge <= READ_BUDGET + 65 * 4096 + charge,
        "{most} messages in one turn: {} bytes of records, charged {}, over a budget of {READ_BUDGET}",
        most * ratio,
        most * charge
    );
}
