//! The echo server on one loop per core: each loop accepts from its own
//! `SO_REUSEPORT` socket on the same port (Linux; elsewhere loop 0 hands
//! connections over). Loop 0 is the designated loop: it owns the process's
//! SIGINT/SIGTERM handlers (they drain and stop every loop), and reports
//! every second how many connections each loop has served, asking the
//! others through their `Remote`s. Prints the address it bound first.
//!
//! Run: `cargo run --release --example echo_cores -- 127.0.0.1:7000 [LOOPS [GRACE_SECS]]`
//! (GRACE_SECS: how long a signal's drain waits for open connections, 5 by
//! default).

use deferloop::cores::{Cores, Peers};
use deferloop::net::{Protocol, Transport};
use deferloop::{Error, Loop, Signal};
use std::cell::Cell;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

thread_local! {
    /// Connections this loop has served (each loop has its own).
    static SERVED: Cell<u64> = const { Cell::new(0) };
}

/// Echo, counting connections per loop.
pub struct Echo;

impl Protocol for Echo {
    fn connection_made(&mut self, _: &Transport) {
        SERVED.with(|s| s.set(s.get() + 1));
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

/// Asks every loop how many connections it served; `report` gets the list
/// on loop 0.
pub fn census(peers: &Peers, report: impl FnOnce(Vec<u64>) + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    for i in 0..peers.len() {
        let tx = tx.clone();
        let _ = peers.call(i, move |_| {
            let _ = tx.send((i, SERVED.with(Cell::get)));
        });
    }
    // Loop 0 collects the answers a little later, without blocking its turn.
    let p = peers.clone();
    let _ = peers.call(0, move |lp: &Loop| {
        let n = p.len();
        let _ = lp.call_later(Duration::from_millis(50), move |_| {
            let mut counts = vec![0; n];
            for (i, c) in rx.try_iter() {
                counts[i] = c;
            }
            report(counts);
        });
    });
}

/// Starts the pool on `addr` with `loops` loops, draining for at most
/// `grace` on a signal; every `period` loop 0 takes a census and gives it
/// to `report`.
pub fn start(
    addr: SocketAddr,
    loops: usize,
    grace: Duration,
    period: Duration,
    report: impl Fn(Vec<u64>) + Send + Sync + 'static,
) -> Result<Cores, Error> {
    let report = std::sync::Arc::new(report);
    Cores::builder()
        .loops(loops)
        .grace(grace)
        .listen_tcp(addr, |_| Echo)
        .on_first(move |lp, peers| {
            // The designated loop: process-wide duties go here. A signal
            // drains every loop, then they all stop.
            for sig in [Signal::INT, Signal::TERM] {
                let p = peers.clone();
                lp.add_signal_handler(sig, move |_, _| p.shutdown())?;
            }
            let peers = peers.clone();
            let every = deferloop::LoopingCall::new(lp.clone(), move || {
                let report = report.clone();
                census(&peers, move |counts| report(counts));
                Ok::<(), deferloop::Failure>(())
            });
            every.start_later(period)?.detach();
            Ok(())
        })
        .start(|_, _| Ok(()))
}

pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args = args.into_iter();
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let addr: SocketAddr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
    let loops = match args.next() {
        Some(n) => n.parse().map_err(|e| format!("loops {n:?}: {e}"))?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let grace = match args.next() {
        Some(g) => Duration::from_secs(g.parse().map_err(|e| format!("grace {g:?}: {e}"))?),
        None => Duration::from_secs(5),
    };
    let cores = start(addr, loops, grace, Duration::from_secs(1), |counts| {
        eprintln!("connections served per loop: {counts:?}");
    })?;
    println!("{}", cores.local_addrs()[0]);
    std::io::stdout().flush()?;
    cores.wait()?;
    Ok(())
}

#[allow(dead_code)]
fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo_cores: {e}");
            ExitCode::FAILURE
        }
    }
}
