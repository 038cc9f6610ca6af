//! Runs the comparison: a fresh server process per sample, the client that
//! opens the connections, the measurements, the interleaved schedule and the
//! markdown report; also the smoke that `cargo test` runs, and the server
//! side (`idle server NAME`).

use crate::common;
use crate::{servers, sys};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct Contender {
    label: &'static str,
    /// `idle server NAME`.
    name: &'static str,
}

const DEFERLOOP: Contender = Contender {
    label: "deferloop, Listener::set_idle_timeout",
    name: "deferloop",
};
const TOKIO: Contender = Contender {
    label: "tokio current-thread, timeout(read)",
    name: "tokio",
};
const CONTENDERS: [Contender; 2] = [DEFERLOOP, TOKIO];

/// What the client sends on every connection in the message round (and the
/// server echoes).
const MESSAGE: &[u8] = b"ping 0123456789\n";

/// Descriptors kept free in each process besides the connections.
const FD_HEADROOM: usize = 1000;

// ---- both processes -----------------------------------------------------------

/// Raises this process's soft limit on open files to its hard limit; returns
/// the limit now in force.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a pointer to ours.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `setrlimit` reads one `rlimit` through a pointer to ours.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return lim.rlim_max;
        }
    }
    lim.rlim_cur
}

/// The connection count from the fd limit `limit`, sized as if
/// one process held both ends of every pair (20,000 fds: about 9,000 pairs),
/// less [`FD_HEADROOM`]; each of our processes holds one end.
fn pairs_for(limit: u64) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX).min(1 << 20);
    (limit.saturating_sub(FD_HEADROOM) / 2).max(1)
}

// ---- the server process -------------------------------------------------

/// `idle server NAME`: prints the bound address, then serves until its
/// standard input closes. Each line read from standard input is answered with
/// `OPEN ALLOCS`: connections set up and not closed, allocations so far.
pub fn serve(name: &str) -> ! {
    common::answer_stdin(|out| {
        let open = servers::OPEN.load(Ordering::Relaxed);
        let (a, _) = sys::alloc_counts();
        write!(out, "{open} {a}")
    });
    let r = servers::run(name, common::print_bound);
    eprintln!("idle server {name}: {r:?}");
    std::process::exit(1)
}

/// A running server process; killed when dropped.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    addr: SocketAddr,
}

impl Server {
    fn start(c: Contender, cpu: Option<usize>) -> Result<Server, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.args(["server", c.name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(cpu) = cpu {
            sys::pin_child(&mut cmd, &[cpu]);
        }
        let mut child = cmd.spawn().map_err(|e| format!("start: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let addr = match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => l
                .trim()
                .parse()
                .map_err(|e| format!("bad address {l:?}: {e}")),
            Err(_) => Err("printed no address".to_string()),
        };
        let mut s = Server {
            child,
            stdin,
            lines,
            addr: "127.0.0.1:0".parse().unwrap(),
        };
        s.addr = addr?;
        // The first query allocates the stdio buffers it needs: outside any
        // measured interval.
        s.query()?;
        Ok(s)
    }

    /// (open connections, allocations so far).
    fn query(&mut self) -> Result<(usize, u64), String> {
        let fail = |e: &dyn std::fmt::Display| format!("server query: {e}");
        writeln!(self.stdin, "stats").map_err(|e| fail(&e))?;
        self.stdin.flush().map_err(|e| fail(&e))?;
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(5))
            .map_err(|e| fail(&e))?;
        let mut f = l.split_whitespace().map(str::parse::<u64>);
        match (f.next(), f.next()) {
            (Some(Ok(open)), Some(Ok(allocs))) => Ok((open as usize, allocs)),
            _ => Err(fail(&format!("bad answer {l:?}"))),
        }
    }

    /// Polls until `n` connections are open; the time it took from `since`.
    fn wait_open(&mut self, n: usize, since: Instant, limit: Duration) -> Result<Duration, String> {
        loop {
            let (open, _) = self.query()?;
            if open == n {
                return Ok(since.elapsed());
            }
            if since.elapsed() > limit {
                return Err(format!("{open} connections open, not {n}, after {limit:?}"));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Resident memory, KiB (`VmRSS` in `/proc/PID/status`).
    fn rss_kib(&self) -> Result<u64, String> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .map_err(|e| format!("status: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| "no VmRSS".to_string())
    }

    /// CPU time of the server's main thread — its loop — so far, in µs
    /// (`/proc/PID/schedstat`, in ns; the helper thread that answers the
    /// harness's polls is not counted).
    fn loop_cpu_us(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/schedstat", self.child.id()))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |ns| ns / 1e3)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- one sample ------------------------------------------------------------

struct Sample {
    round: usize,
    /// Client: every connect returned, ms.
    connect_ms: f64,
    /// Server: every connection set up (timer armed), ms from the first connect.
    accept_ms: f64,
    /// The server loop's CPU over the accepting, µs per connection.
    accept_cpu_us: f64,
    /// (RSS with N idle connections − RSS with none) / N, bytes.
    rss_idle: f64,
    /// Allocations the server made while accepting, per connection.
    allocs: f64,
    /// One message written on every connection, every echo read back, ms.
    message_ms: f64,
    /// The server loop's CPU over the message round, µs per connection.
    message_cpu_us: f64,
    /// (RSS after the message round − RSS with none) / N, bytes.
    rss_after: f64,
    /// Client closed them all, server saw every close, ms.
    close_ms: f64,
    /// Handshakes the kernel could not queue for accept (`ListenOverflows`,
    /// system-wide) while connecting.
    overflows: f64,
}

/// `TcpExt: ListenOverflows` from `/proc/net/netstat`: times a completed
/// handshake found a listener's accept queue full (its last ACK is dropped,
/// and the connection is made when the server's SYN-ACK is retransmitted,
/// about a second later).
fn listen_overflows() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/net/netstat") else {
        return f64::NAN;
    };
    let mut tcp_ext = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (tcp_ext.next(), tcp_ext.next()) else {
        return f64::NAN;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "ListenOverflows")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// One sample: a fresh server, `n` connections opened one after the other
/// (blocking connects from one thread), a message on each, all closed.
fn sample(c: Contender, n: usize, cpu: Option<usize>) -> Result<Sample, String> {
    let mut s = Server::start(c, cpu)?;
    let (open, a0) = s.query()?;
    if open != 0 {
        return Err(format!("{open} connections open before any connect"));
    }
    let (rss0, cpu0) = (s.rss_kib()?, s.loop_cpu_us());
    let overflows0 = listen_overflows();
    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let c = TcpStream::connect(s.addr).map_err(|e| format!("connect {i} of {n}: {e}"))?;
        conns.push(c);
    }
    let connect = t0.elapsed();
    let accept = s.wait_open(n, t0, Duration::from_secs(60))?;
    let cpu1 = s.loop_cpu_us();
    let overflows = listen_overflows() - overflows0;
    let (_, a1) = s.query()?;
    let rss1 = s.rss_kib()?;

    for c in &conns {
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| format!("timeout: {e}"))?;
    }
    let t1 = Instant::now();
    for (i, mut c) in conns.iter().enumerate() {
        c.write_all(MESSAGE)
            .map_err(|e| format!("write {i}: {e}"))?;
    }
    let mut buf = [0u8; MESSAGE.len()];
    for (i, mut c) in conns.iter().enumerate() {
        c.read_exact(&mut buf)
            .map_err(|e| format!("read {i}: {e}"))?;
        if buf != MESSAGE {
            return Err(format!("connection {i}: the echo differs"));
        }
    }
    let message = t1.elapsed();
    let cpu2 = s.loop_cpu_us();
    let rss2 = s.rss_kib()?;

    // Closed with a reset (linger 0): no TIME_WAIT left behind to slow the
    // next sample's connects.
    for c in &conns {
        set_linger_zero(c).map_err(|e| format!("linger: {e}"))?;
    }
    let t2 = Instant::now();
    drop(conns);
    let close = s.wait_open(0, t2, Duration::from_secs(60))?;
    let per = |kib: u64| (kib as f64 - rss0 as f64) * 1024.0 / n as f64;
    Ok(Sample {
        round: 0,
        connect_ms: connect.as_secs_f64() * 1e3,
        accept_ms: accept.as_secs_f64() * 1e3,
        accept_cpu_us: (cpu1 - cpu0) / n as f64,
        rss_idle: per(rss1),
        allocs: (a1 - a0) as f64 / n as f64,
        message_ms: message.as_secs_f64() * 1e3,
        message_cpu_us: (cpu2 - cpu1) / n as f64,
        rss_after: per(rss2),
        close_ms: close.as_secs_f64() * 1e3,
        overflows,
    })
}

/// `SO_LINGER` with a zero timeout: closing sends a reset.
fn set_linger_zero(s: &TcpStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `setsockopt` reads `size_of::<linger>()` bytes from `&l`, a
    // valid `linger`, for the open socket `s`.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---- the full run ----------------------------------------------------------

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Pins this process (the client) to the second allowed CPU; returns the
/// server's CPU, or `None` (and a note) with a single CPU.
fn pin_client(notes: &mut Vec<String>) -> Option<usize> {
    let cpus = sys::allowed_cpus();
    if cpus.len() < 2 {
        notes.push("Not pinned: one CPU; server and client share it.".into());
        return None;
    }
    if let Err(e) = sys::pin_self(cpus[1]) {
        notes.push(format!("Could not pin the client to CPU {}: {e}.", cpus[1]));
    }
    Some(cpus[0])
}

/// Every round runs each contender once, the order alternating (A B, B A, …).
fn run_rounds(
    n: usize,
    rounds: usize,
    cpu: Option<usize>,
    notes: &mut Vec<String>,
) -> Vec<Vec<Sample>> {
    let mut per: Vec<Vec<Sample>> = CONTENDERS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..CONTENDERS.len() {
            let i = (round + k) % CONTENDERS.len();
            let c = CONTENDERS[i];
            match sample(c, n, cpu) {
                Ok(mut x) => {
                    x.round = round;
                    eprintln!(
                        "idle round {}: {:<38} accept {:>6.1} ms ({:>5.2} µs CPU/conn, {} overflows), {:>5.0} B/conn, message round {:>6.1} ms ({:>5.2} µs CPU/conn)",
                        round + 1,
                        c.label,
                        x.accept_ms,
                        x.accept_cpu_us,
                        x.overflows,
                        x.rss_idle,
                        x.message_ms,
                        x.message_cpu_us,
                    );
                    per[i].push(x);
                }
                Err(e) => {
                    eprintln!("idle round {}: {}: {e}", round + 1, c.label);
                    notes.push(format!(
                        "{}, round {}: sample failed: {e}",
                        c.label,
                        round + 1
                    ));
                }
            }
        }
    }
    per
}

/// The comparison (`cargo bench --bench idle`).
pub fn full() {
    let started = Instant::now();
    let limit = raise_fd_limit();
    let n = env_usize("IDLE_CONNECTIONS").unwrap_or_else(|| pairs_for(limit));
    let rounds = env_usize("IDLE_ROUNDS").unwrap_or(7).max(1);
    let mut notes = Vec::new();
    let cpu = pin_client(&mut notes);
    let per = run_rounds(n, rounds, cpu, &mut notes);
    print_method(n, limit, rounds, cpu);
    for note in &notes {
        println!("- {note}");
    }
    report(n, &per);
    println!(
        "\nThe idle-connections comparison took {:.0} s.",
        started.elapsed().as_secs_f64()
    );
}

fn print_method(n: usize, limit: u64, rounds: usize, cpu: Option<usize>) {
    println!("\n### How the idle-connections comparison runs\n");
    println!(
        "Both processes raise their open-file limit to the hard limit ({limit}); the connection \
         count is sized from it as if one process held both ends of every pair: \
         ({limit} − {FD_HEADROOM}) / 2 = {n} connections. Each sample starts a fresh server \
         process (this bench binary, `idle server NAME`, benches/idle/servers.rs), single-threaded, \
         pinned to CPU {}; the client is this process on the other CPU. It connects {n} times, one \
         blocking connect after the other, and polls the server (through a pipe, every 0.5 ms) for \
         how many connections it has set up — accepted, protocol or task made, idle timer armed. \
         Then it writes one {}-byte message on every connection and reads every echo back (each \
         read pushes that connection's idle deadline back), then closes them all. {rounds} rounds, \
         each running both contenders, the order alternating (A B, B A, …).",
        cpu.map_or("(any)".into(), |c| c.to_string()),
        MESSAGE.len(),
    );
    println!(
        "\nThe idle timeout is {} s (nothing expires while measured). deferloop: a `Protocol` that \
         echoes, `Listener::set_idle_timeout` (a timer per connection, re-armed lazily: a read \
         records the time), reads into the loop's shared buffer. tokio: a task per connection, \
         `tokio::time::timeout(idle, stream.read(&mut buf))` in a loop on a {}-byte `Vec` (tokio's \
         examples/echo.rs), the listener given the same backlog as deferloop's.",
        servers::IDLE_TIMEOUT.as_secs(),
        servers::TOKIO_BUF
    );
    println!();
    println!(
        "- accept all: from the first connect until the server had set up all {n}; \"connect\": \
         until the client's last connect returned (the kernel completes the handshake before \
         the server accepts).\n\
         - CPU: the server loop thread's CPU time (`/proc/PID/schedstat`) over the accepting \
         (\"accept\") and over the message round (\"message\"), per connection.\n\
         - memory: the server's `VmRSS` with {n} idle connections less that with none, per \
         connection; \"after a message\": the same once every connection has read and answered one \
         message. Kernel socket memory is in neither.\n\
         - allocs: allocations the server made while accepting, per connection.\n\
         - message round: the first write until the last echo was read; close: the client \
         closing all (with a reset, so that no TIME_WAIT slows the next sample) until the server \
         saw every close.\n\
         - listen overflows: how many completed handshakes found the accept queue full \
         while connecting (`ListenOverflows` in `/proc/net/netstat`, system-wide; median). The \
         kernel drops such a handshake's last ACK and makes the connection when the server's \
         SYN-ACK is retransmitted, about a second later: a server that falls behind the client \
         by more than the backlog takes a second longer to accept them all.\n\
         - Ratios: the median of per-round ratios deferloop / tokio, with their min–max."
    );
}

type Stat = (f64, f64, f64);

fn stats(v: &[Sample], f: &dyn Fn(&Sample) -> f64) -> Option<Stat> {
    let mut v: Vec<f64> = v.iter().map(f).filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| common::summary(&mut v))
}

/// The median and min–max of per-round ratios `a / b`.
fn paired(a: &[Sample], b: &[Sample], f: &dyn Fn(&Sample) -> f64) -> Option<Stat> {
    let mut v: Vec<f64> = a
        .iter()
        .filter_map(|x| {
            let y = b.iter().find(|y| y.round == x.round)?;
            Some(f(x) / f(y))
        })
        .filter(|r| r.is_finite())
        .collect();
    (!v.is_empty()).then(|| common::summary(&mut v))
}

fn report(n: usize, per: &[Vec<Sample>]) {
    println!("\n### {n} idle connections, each with an idle timeout\n");
    println!(
        "| contender | accept all ms | min–max | connect ms | accept CPU µs/conn | memory B/conn | min–max | after a message B/conn | allocs/conn | message round ms | min–max | message CPU µs/conn | close ms | listen overflows |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (c, v) in CONTENDERS.iter().zip(per) {
        let Some((acc, alo, ahi)) = stats(v, &|s| s.accept_ms) else {
            println!("| {} | failed | | | | | | | | | | | | |", c.label);
            continue;
        };
        let med = |f: &dyn Fn(&Sample) -> f64| stats(v, f).map_or(f64::NAN, |x| x.0);
        let (mem, mlo, mhi) = stats(v, &|s| s.rss_idle).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let (msg, glo, ghi) = stats(v, &|s| s.message_ms).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        println!(
            "| {} | {acc:.1} | {alo:.1}–{ahi:.1} | {:.1} | {:.2} | {mem:.0} | {mlo:.0}–{mhi:.0} | {:.0} | {:.2} | {msg:.1} | {glo:.1}–{ghi:.1} | {:.2} | {:.1} | {:.0} |",
            c.label,
            med(&|s| s.connect_ms),
            med(&|s| s.accept_cpu_us),
            med(&|s| s.rss_after),
            med(&|s| s.allocs),
            med(&|s| s.message_cpu_us),
            med(&|s| s.close_ms),
            med(&|s| s.overflows),
        );
    }
    let (d, t) = (&per[0], &per[1]);
    let x = |f: &dyn Fn(&Sample) -> f64| {
        paired(d, t, f).map_or("n/a".into(), |r| {
            format!("{:.2}× (per round {:.2}–{:.2}×)", r.0, r.1, r.2)
        })
    };
    println!(
        "\n- Beside tokio (deferloop / tokio; below 1 is deferloop's advantage): time to accept \
         all {} at {} the server CPU per connection; memory per idle connection {}, after a \
         message {}; the message round {} at {} the server CPU per message.",
        x(&|s| s.accept_ms),
        x(&|s| s.accept_cpu_us),
        x(&|s| s.rss_idle),
        x(&|s| s.rss_after),
        x(&|s| s.message_ms),
        x(&|s| s.message_cpu_us),
    );
}

// ---- the smoke (cargo test) ---------------------------------------------------

/// `cargo test`: each server takes 200 connections, answers one message on
/// each (checked byte for byte) and sees them close; the report's code runs
/// on those samples. A watchdog ends it if anything hangs.
pub fn smoke() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        eprintln!("idle smoke: still running after 60 s; giving up");
        std::process::exit(1);
    });
    assert_eq!(pairs_for(20_000), 9_500);
    assert_eq!(pairs_for(10), 1);
    let n = 200;
    let per: Vec<Vec<Sample>> = CONTENDERS
        .iter()
        .map(|&c| vec![sample(c, n, None).unwrap_or_else(|e| panic!("{}: {e}", c.label))])
        .collect();
    println!("idle smoke: the report from {n} connections (not figures)");
    report(n, &per);
    println!("idle smoke: ok");
}
