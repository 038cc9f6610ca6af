//! Soak and stress: two loops on loopback, for a fixed time, then an audit.
//!
//! A server loop (its own thread) echoes, with flow control, an idle timer
//! re-armed (cancelled and set) on every read, and every 16th read handed to
//! the thread pool (`defer_to_thread`). A client loop (another thread) keeps
//! `--conns` connections busy, over TCP or (`--unix` percent of them, 25 by
//! default) a Unix socket: each sends 1–30 requests of random size
//! (1 B – 256 KiB) and checks every echoed byte, with a Deferred and a
//! watchdog timer per request; then it closes, half-closes (`write_eof`, then
//! reads the rest of the echo), resets (SO_LINGER 0 and `abort` mid-request;
//! TCP only, a Unix socket has no reset), or sends the bytes that make the
//! server's protocol panic. Meanwhile
//! `--threads` threads call both loops through their `Remote`s (and block on
//! the server with `call_blocking`). A third loop keeps child processes
//! coming (`echo`, `cat` fed through stdin, `sleep` killed) while a thread
//! sends the process SIGUSR1 every 5 ms, which that loop handles.
//!
//! Afterwards, with every connection gone and both loops closed: every byte
//! sent on a connection that ended cleanly came back exactly, and every byte
//! that came back matched; `connection_lost` ran exactly once per
//! connection on both sides; every Deferred fired exactly once; no timer is
//! left; every threadsafe call ran; no fd is left open; and the heap and RSS
//! are back within a small bound of where they started. The report lists
//! the counts; any violation is printed and the exit status is 1. Every child
//! process was reaped (no zombie, none left running) and every SIGUSR1 burst was heard.
//!
//! Run: `cargo run --release -p deferloop-soak -- --secs 60 --conns 200`
//! (options: `--secs`, `--conns`, `--threads`, `--seed`, `--max-size`, `--unix`).
//! tests/soak.rs runs it for a few seconds as part of `cargo test`.

use deferloop::deferred::Deferred;
use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, ExceptionContext, Failure, Handle, Loop, Remote};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

// The parts, each with `use super::*`: the imports above serve them all.
mod client;
mod daemons;
mod report;
mod server;
mod sys;

use client::*;
use daemons::*;
pub use report::*;
use server::*;
use sys::*;

// ---- the run ---------------------------------------------------------------

/// Keeps the injected panics quiet: the default hook would print each one
/// and, with RUST_BACKTRACE set, symbolize a backtrace (whose debug-info
/// cache, tens of MiB, is never freed and would read as a leak).
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let injected = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("soak: injected"));
            if !injected {
                prev(info);
            }
        }));
    });
}

/// Runs the soak described by `cfg` and returns what it measured.
pub fn run(cfg: &Config) -> Report {
    quiet_injected_panics();
    raise_fd_limit(8 * cfg.conns as u64 + 256);
    trim();
    let fds0 = open_fds();
    let heap0 = HEAP.load(Relaxed);
    let rss0 = rss_bytes();
    HEAP_PEAK.store(heap0, Relaxed);
    let rss_peak = Arc::new(AtomicU64::new(rss0));
    let t0 = Instant::now();

    let stop = Arc::new(AtomicBool::new(false));
    let (peak2, stop2) = (rss_peak.clone(), stop.clone());
    let sampler = thread::spawn(move || {
        while !stop2.load(Relaxed) {
            peak2.fetch_max(rss_bytes(), Relaxed);
            thread::sleep(Duration::from_millis(50));
        }
    });
    let (tx, rx) = mpsc::channel();
    let path = (cfg.unix_pct > 0)
        .then(|| std::env::temp_dir().join(format!("deferloop-soak-{}.sock", std::process::id())));
    let server = thread::spawn(move || server_thread(tx, path));
    let (addr, unix, server_remote) = rx.recv().expect("server up");
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let cfg2 = cfg.clone();
    let client = thread::spawn(move || client_thread(cfg2, (addr, unix), tx, done_tx));
    let client_remote = rx.recv().expect("client up");
    let stop_daemons = Arc::new(AtomicBool::new(false));
    let sd = stop_daemons.clone();
    let daemons = thread::spawn(move || daemons_thread(sd));
    let (sd, sent) = (stop_daemons.clone(), Arc::new(AtomicU64::new(0)));
    let sent2 = sent.clone();
    let signaller = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50)); // the handler is in place
        while !sd.load(Relaxed) {
            // SAFETY: kill(2) to our own process with SIGUSR1, which the
            // daemon loop handles until this thread has stopped.
            unsafe { libc::kill(libc::getpid(), libc::SIGUSR1) };
            sent2.fetch_add(1, Relaxed);
            thread::sleep(Duration::from_millis(5));
        }
    });

    // Callers: threadsafe calls into both loops, and blocking calls.
    let counts: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
    let callers: Vec<_> = (0..cfg.threads)
        .map(|i| {
            let (cr, sr, stop, n) = (
                client_remote.clone(),
                server_remote.clone(),
                stop.clone(),
                counts.clone(),
            );
            thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Relaxed) {
                    for (k, r) in [(0, &cr), (2, &sr)] {
                        let n2 = n.clone();
                        if r.call_soon_threadsafe(move |_| {
                            n2[k + 1].fetch_add(1, Relaxed);
                        })
                        .is_ok()
                        {
                            n[k].fetch_add(1, Relaxed);
                        }
                    }
                    if (round + i as u64).is_multiple_of(50) {
                        n[4].fetch_add(1, Relaxed);
                        let r = sr.call_blocking(Duration::from_secs(10), |_| {
                            deferloop::deferred::succeed(())
                        });
                        if r.is_ok() {
                            n[5].fetch_add(1, Relaxed);
                        } else {
                            eprintln!("soak caller: blocking call failed: {r:?}");
                        }
                    }
                    round += 1;
                    thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();

    // The client says when its last connection has gone (after the deadline).
    let connected = done_rx.recv().unwrap_or(0);
    stop.store(true, Relaxed);
    stop_daemons.store(true, Relaxed);
    signaller.join().expect("signal thread");
    let mut daemon_stats = daemons.join().expect("daemon thread");
    daemon_stats.signals_sent = sent.load(Relaxed);
    daemon_stats.left_behind = reap_leftovers();
    for c in callers {
        c.join().expect("caller thread");
    }
    // Every call queued before this one has run once it returns (FIFO).
    let barrier = |r: &Remote| {
        let _ = r.call_blocking(
            Duration::from_secs(30),
            |_| deferloop::deferred::succeed(()),
        );
    };
    barrier(&client_remote);
    // The server is done when it has accepted, and lost, every connection
    // the client made, and the pool has delivered every job.
    let wait_from = Instant::now();
    while wait_from.elapsed() < Duration::from_secs(60) {
        let state = server_remote.call_blocking(Duration::from_secs(30), |_| {
            deferloop::deferred::succeed(server_state())
        });
        match state {
            Ok((made, lost, accepted, jobs))
                if made == lost && accepted >= connected && jobs == 0 =>
            {
                break
            }
            Ok(_) => thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                eprintln!("soak: querying the server failed: {e}");
                break;
            }
        }
    }
    let elapsed = t0.elapsed();
    let _ = client_remote.stop();
    let _ = server_remote.stop();
    let client_stats = client.join().expect("client thread");
    let server_stats = server.join().expect("server thread");
    drop((client_remote, server_remote));
    sampler.join().expect("sampler thread");

    trim();
    let n = |i: usize| counts[i].load(Relaxed);
    Report {
        config: cfg.clone(),
        elapsed,
        client: client_stats,
        server: server_stats,
        calls_client: (n(0), n(1)),
        calls_server: (n(2), n(3)),
        blocking_calls: (n(4), n(5)),
        rss: (rss0, rss_peak.load(Relaxed), rss_bytes()),
        heap: (heap0, HEAP_PEAK.load(Relaxed), HEAP.load(Relaxed)),
        fds: (fds0, open_fds()),
        daemons: daemon_stats,
    }
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--secs" => cfg.secs = value()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--conns" => cfg.conns = value()?.parse().map_err(|e| format!("--conns: {e}"))?,
            "--threads" => cfg.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--seed" => cfg.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--max-size" => {
                cfg.max_size = value()?.parse().map_err(|e| format!("--max-size: {e}"))?
            }
            "--unix" => cfg.unix_pct = value()?.parse().map_err(|e| format!("--unix: {e}"))?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(cfg)
}

#[allow(dead_code)]
fn main() {
    let cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    let report = run(&cfg);
    let mut out = String::new();
    let _ = write!(out, "{report}");
    println!("{out}");
    if !report.violations().is_empty() {
        std::process::exit(1);
    }
}
