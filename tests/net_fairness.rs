//! Fairness: a connection that always has data does not starve the others.
//! Reads are capped per connection per dispatch, and the rest waits a turn.

mod util;

use deferloop::net::{Limits, Protocol, Transport};
use deferloop::{EventLoop, Loop};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use util::run_until;

const READ_BUDGET: usize = Limits::DEFAULT.read_budget;

const T: Duration = Duration::from_secs(20);

/// Answers "ping" with "pong"; counts everything else, per turn.
struct Server {
    lp: Loop,
    flood_bytes: Rc<Cell<usize>>,
    /// (turn, bytes read from a flooding connection in that turn)
    per_turn: Rc<RefCell<Vec<(u64, usize)>>>,
    /// Every accepted connection, in order: the flood's is the first.
    conns: Rc<RefCell<Vec<Transport>>>,
}

impl Protocol for Server {
    fn connection_made(&mut self, t: &Transport) {
        self.conns.borrow_mut().push(t.clone());
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if data == b"ping" {
            t.write(b"pong");
            return;
        }
        self.flood_bytes.set(self.flood_bytes.get() + data.len());
        let turn = self.lp.turn_count();
        let mut v = self.per_turn.borrow_mut();
        match v.last_mut() {
            Some((t, n)) if *t == turn => *n += data.len(),
            _ => v.push((turn, data.len())),
        }
    }
}

/// Records the turn at which "pong" arrived, and what arrived (checked by the
/// test, not here: the loop contains a protocol's panics).
struct Pinger {
    lp: Loop,
    got_pong_at: Rc<Cell<Option<u64>>>,
    got: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Protocol for Pinger {
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.got.borrow_mut().push(data.to_vec());
        self.got_pong_at.set(Some(self.lp.turn_count()));
    }
}

#[test]
fn a_flooding_connection_does_not_delay_a_ping_on_another() {
    let ev = EventLoop::new().unwrap();
    let flood_bytes = Rc::new(Cell::new(0));
    let per_turn = Rc::new(RefCell::new(Vec::new()));
    let conns = Rc::new(RefCell::new(Vec::new()));
    let (lp, fb, pt, cs) = (
        ev.to_loop(),
        flood_bytes.clone(),
        per_turn.clone(),
        conns.clone(),
    );
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Server {
            lp: lp.clone(),
            flood_bytes: fb.clone(),
            per_turn: pt.clone(),
            conns: cs.clone(),
        })
        .unwrap();
    let addr: SocketAddr = l.local_addr().as_inet().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // `full` is set once the flood's socket buffers are full after `want_full`.
    let (want_full, full) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (stop2, want_full2, full2) = (stop.clone(), want_full.clone(), full.clone());
    let flooder = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        let chunk = vec![b'f'; 1 << 16];
        while !stop2.load(Ordering::Relaxed) {
            match s.write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if want_full2.load(Ordering::SeqCst) {
                        full2.store(true, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => break,
            }
        }
    });
    // Let the flood run until the server is busy with it.
    run_until(&ev, T, || flood_bytes.get() > 8 << 20);
    let got_pong_at = Rc::new(Cell::new(None));
    let got = Rc::new(RefCell::new(Vec::new()));
    let pinger = ev
        .run_until(
            ev.connect_tcp(
                addr,
                Pinger {
                    lp: ev.to_loop(),
                    got_pong_at: got_pong_at.clone(),
                    got: got.clone(),
                },
            )
            .connected(),
        )
        .unwrap();
    // The flood must still have data while the ping is served, whatever the
    // flooding thread's scheduling: stop reading it until its socket buffers
    // are full (nothing reads them while the loop is not turning), then ping.
    let flood = conns.borrow()[0].clone();
    flood.pause_reading();
    want_full.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + T;
    while !full.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flood never filled its buffers"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    flood.resume_reading();
    let sent_at = ev.turn_count();
    let before = flood_bytes.get();
    pinger.write(b"ping");
    run_until(&ev, T, || got_pong_at.get().is_some());
    for data in got.borrow().iter() {
        assert_eq!(data, b"pong");
    }
    let turns = got_pong_at.get().unwrap() - sent_at;
    assert!(
        flood_bytes.get() > before,
        "the flood was still being read meanwhile"
    );
    assert!(turns <= 4, "the ping took {turns} turns");
    let max_per_turn = per_turn.borrow().iter().map(|(_, n)| *n).max().unwrap();
    assert!(
        max_per_turn <= READ_BUDGET,
        "read {max_per_turn} bytes from one connection in one turn"
    );
    stop.store(true, Ordering::Relaxed);
    l.stop_listening().result().unwrap().unwrap();
    drop(ev); // closes the flood connection
    flooder.join().unwrap();
}
