//! The load client, vmbench's `echo_client` in Rust: C blocking threads, one
//! connection each (TCP_NODELAY on), a closed loop of one `x…\n` message in
//! flight per connection, the reply matched by byte count, a shared deadline,
//! and a 10 µs-bucket latency histogram (or, with `request`, the
//! request/response workload of `rr.rs`). A warm-up phase runs first on the same
//! connections; only round trips that end inside the measured phase count.

use crate::common::hist::Histogram;
use crate::rr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const WARM: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// One load run.
pub struct Load {
    pub addr: SocketAddr,
    /// Message size in bytes (the last one is `\n`).
    pub size: usize,
    pub conns: usize,
    pub warmup: Duration,
    pub measure: Duration,
    /// Compare every reply with the message (the smoke does; the full run
    /// matches by byte count only, as vmbench does).
    pub verify: bool,
    /// Speak TLS (the handshake is made before the warm-up; see `tls.rs`).
    pub tls: bool,
    /// The request/response workload (`rr.rs`) instead of the echo: send
    /// `GET key-I\n`, read an answer of `rr::REPLY` bytes (`size` unused).
    pub request: bool,
}

/// What a load run measured.
pub struct Outcome {
    /// Round trips completed inside the measured phase.
    pub requests: u64,
    /// Length of the measured phase.
    pub elapsed: Duration,
    pub hist: Histogram,
    /// One line per connection that failed.
    pub errors: Vec<String>,
}

impl Outcome {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `load`; `at_start` is called just before the measured phase begins
/// and `at_end` just after it ends (to read the server's counters).
pub fn run(load: &Load, at_start: impl FnOnce(), at_end: impl FnOnce()) -> Outcome {
    let phase = AtomicU8::new(WARM);
    let ready = Barrier::new(load.conns + 1);
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..load.conns)
            .map(|i| {
                let (phase, ready) = (&phase, &ready);
                sc.spawn(move || connection(load, i, phase, ready))
            })
            .collect();
        ready.wait();
        std::thread::sleep(load.warmup);
        at_start();
        phase.store(MEASURE, Ordering::Relaxed);
        let t0 = Instant::now();
        std::thread::sleep(load.measure);
        phase.store(STOP, Ordering::Relaxed);
        let elapsed = t0.elapsed();
        at_end();
        let mut out = Outcome {
            requests: 0,
            elapsed,
            hist: Histogram::default(),
            errors: Vec::new(),
        };
        for w in workers {
            match w.join().expect("a client thread panicked") {
                Ok((n, h)) => {
                    out.requests += n;
                    out.hist.merge(&h);
                }
                Err(e) => out.errors.push(e),
            }
        }
        out
    })
}

fn connection(
    load: &Load,
    i: usize,
    phase: &AtomicU8,
    ready: &Barrier,
) -> Result<(u64, Histogram), String> {
    let conn = connect(load.addr, load.tls);
    ready.wait();
    let mut s = conn.map_err(|e| format!("connect to {}: {e}", load.addr))?;
    let (msg, reply) = if load.request {
        let msg = rr::request(i);
        let reply = rr::answer(&msg[..msg.len() - 1]).to_vec();
        (msg, reply)
    } else {
        let mut msg = vec![b'x'; load.size];
        msg[load.size - 1] = b'\n';
        (msg.clone(), msg)
    };
    let mut buf = vec![0u8; reply.len()];
    let mut hist = Histogram::default();
    let mut n = 0;
    while phase.load(Ordering::Relaxed) != STOP {
        let t0 = Instant::now();
        s.write_all(&msg).map_err(|e| format!("write: {e}"))?;
        let mut got = 0;
        while got < reply.len() {
            match s.read(&mut buf[got..]) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        if load.verify && buf != reply {
            return Err("the reply differs from the one expected".into());
        }
        if phase.load(Ordering::Relaxed) == MEASURE {
            hist.record(t0.elapsed());
            n += 1;
        }
    }
    Ok((n, hist))
}

fn connect(addr: SocketAddr, tls: bool) -> std::io::Result<Box<dyn crate::tls::Io + Send>> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    if tls {
        return crate::tls::client(s);
    }
    Ok(Box::new(s))
}
