//! Runs the comparison: server processes, the interleaved schedule and the
//! measurements around each sample (the contenders are in contenders.rs, the
//! markdown report in report.rs); also the smoke that `cargo test` runs, and
//! the server side (`echo server NAME`).

use crate::client::{self, Load};
use crate::common::{self, svg};
use crate::contenders::*;
use crate::report::*;
use crate::{rr, servers, sys};
use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

// ---- the server process -------------------------------------------------

/// `echo server NAME`: prints the bound address, then serves until its
/// standard input closes (so it never outlives the harness). Each line read
/// from standard input is answered with `ALLOCS FREES` so far.
pub fn serve(name: &str) -> ! {
    common::answer_stdin(|out| {
        let (a, f) = sys::alloc_counts();
        write!(out, "{a} {f}")
    });
    let r = servers::run(name, common::print_bound);
    eprintln!("echo server {name}: {r:?}");
    std::process::exit(1)
}

/// A running server process; killed when dropped.
pub(crate) struct Server {
    pub(crate) label: &'static str,
    pub(crate) child: Child,
    pub(crate) stdin: RefCell<ChildStdin>,
    pub(crate) lines: Receiver<String>,
    pub(crate) addr: SocketAddr,
    pub(crate) counts_allocs: bool,
    pub(crate) python: bool,
    pub(crate) tls: bool,
    /// Serves the request/response workload (`rr.rs`), not the echo.
    pub(crate) request: bool,
    pub(crate) threads: usize,
}

impl Server {
    /// `cpus`: where the server may run (`None`: wherever this process may).
    pub(crate) fn start(
        c: Contender,
        python: Option<&str>,
        cpus: Option<&[usize]>,
    ) -> Result<Server, String> {
        let tls = matches!(c.kind, Kind::Rust(name) if name.ends_with("-tls"));
        let mut cmd = match c.kind {
            Kind::Rust(name) => {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                let mut cmd = Command::new(exe);
                cmd.args(["server", name]);
                if tls {
                    let (cert, key) = crate::tls::material();
                    cmd.env("ECHO_TLS_CERT", cert).env("ECHO_TLS_KEY", key);
                }
                cmd
            }
            Kind::Python(mode) => {
                let py = python.ok_or("no Python")?;
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/echo_server.py");
                let mut cmd = Command::new(py);
                cmd.arg(script).arg(mode);
                cmd
            }
        };
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        if let Some(cpus) = cpus {
            sys::pin_child(&mut cmd, cpus);
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
        let first = lines.recv_timeout(Duration::from_secs(30));
        let addr = match first {
            Ok(l) => l
                .trim()
                .parse()
                .map_err(|e| format!("bad address {l:?}: {e}"))?,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(format!("printed no address (exit: {status:?})"));
            }
        };
        let s = Server {
            label: c.label,
            child,
            stdin: RefCell::new(stdin),
            lines,
            addr,
            counts_allocs: matches!(c.kind, Kind::Rust(_)),
            python: matches!(c.kind, Kind::Python(_)),
            tls,
            request: matches!(c.kind, Kind::Rust(name) if name.starts_with("rr-")),
            threads: c.threads,
        };
        // The first query allocates the stdio buffers it needs: outside any
        // measured interval.
        if s.counts_allocs {
            s.allocs().ok_or("no answer to the allocation query")?;
        }
        Ok(s)
    }

    /// Allocations made by the server process so far.
    pub(crate) fn allocs(&self) -> Option<u64> {
        if !self.counts_allocs {
            return None;
        }
        let mut w = self.stdin.borrow_mut();
        writeln!(w, "stats").ok()?;
        w.flush().ok()?;
        let l = self.lines.recv_timeout(Duration::from_secs(5)).ok()?;
        l.split_whitespace().next()?.parse().ok()
    }

    pub(crate) fn cpu_seconds(&self) -> f64 {
        sys::cpu_seconds(self.child.id()).unwrap_or(f64::NAN)
    }

    /// The main thread's sleeps: n/a for a server whose main thread only
    /// waits for its serving threads.
    pub(crate) fn sleeps(&self) -> f64 {
        if self.threads > 1 {
            return f64::NAN;
        }
        sys::sleeps(self.child.id()).map_or(f64::NAN, |n| n as f64)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `echo load ADDR SIZE SECONDS [CONNECTIONS]`: the load client alone, every
/// round trip counted (no warm-up), so a profile of the server divides by it.
pub fn load(args: &[String]) {
    let usage = "usage: echo load ADDR SIZE SECONDS [CONNECTIONS]";
    let arg = |i: usize| args.get(i).expect(usage);
    let load = Load {
        addr: arg(0).parse().expect(usage),
        size: arg(1).parse().expect(usage),
        conns: args.get(3).map_or(CONNECTIONS, |c| c.parse().expect(usage)),
        warmup: Duration::ZERO,
        measure: Duration::from_secs_f64(arg(2).parse().expect(usage)),
        verify: false,
        tls: std::env::var_os("ECHO_LOAD_TLS").is_some(),
        request: std::env::var_os("ECHO_LOAD_REQUEST").is_some(),
    };
    let out = client::run(&load, || {}, || {});
    for e in &out.errors {
        eprintln!("{e}");
    }
    println!(
        "{:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, mean {:.3} ms ({} round trips)",
        out.rps(),
        out.hist.quantile_ms(0.5).unwrap_or(f64::NAN),
        out.hist.quantile_ms(0.99).unwrap_or(f64::NAN),
        out.hist.mean_ms().unwrap_or(f64::NAN),
        out.requests
    );
}

// ---- one sample ------------------------------------------------------------

pub(crate) fn sample(s: &Server, load: &Load) -> Result<Sample, String> {
    let snap = || (s.cpu_seconds(), s.sleeps(), s.allocs());
    let before = RefCell::new(None);
    let after = RefCell::new(None);
    let out = client::run(
        load,
        || *before.borrow_mut() = Some(snap()),
        || *after.borrow_mut() = Some(snap()),
    );
    if let Some(e) = out.errors.first() {
        return Err(format!(
            "{} of {} connections failed: {e}",
            out.errors.len(),
            load.conns
        ));
    }
    if out.requests == 0 {
        return Err("no round trip completed".into());
    }
    let ((c0, s0, a0), (c1, s1, a1)) = (before.take().unwrap(), after.take().unwrap());
    let n = out.requests as f64;
    let cpu = c1 - c0;
    Ok(Sample {
        round: 0,
        rps: out.rps(),
        p50: out.hist.quantile_ms(0.5).unwrap_or(f64::NAN),
        p99: out.hist.quantile_ms(0.99).unwrap_or(f64::NAN),
        cpu_us: cpu / n * 1e6,
        cpu_use: cpu / out.elapsed.as_secs_f64(),
        allocs: match (a0, a1) {
            (Some(a0), Some(a1)) => Some((a1 - a0) as f64 / n),
            _ => None,
        },
        sleeps: (s1 - s0) / n,
    })
}

// ---- the full run ----------------------------------------------------------

/// `ECHO_ONLY=deferloop,mio,…`: only these servers (by `echo server NAME`),
/// for a quick look at a few; the report runs them all.
pub(crate) fn wanted(c: &Contender) -> bool {
    let name = match c.kind {
        Kind::Rust(n) | Kind::Python(n) => n,
    };
    std::env::var("ECHO_ONLY").map_or(true, |only| only.split(',').any(|o| o == name))
}

/// `ECHO_SIZES=102400`: only these message sizes; the report runs [`SIZES`].
pub(crate) fn sizes() -> Vec<usize> {
    std::env::var("ECHO_SIZES").map_or(SIZES.to_vec(), |v| {
        v.split(',').filter_map(|s| s.parse().ok()).collect()
    })
}

pub(crate) fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn arg_after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

/// What server `s` is measured on, for progress lines and notes.
pub(crate) fn workload(s: &Server, size: usize) -> String {
    if s.request {
        "request/response".into()
    } else {
        format!("echo {}", kib(size))
    }
}

/// The full comparison (`cargo bench --bench echo`).
pub fn full(args: &[String]) {
    let started = Instant::now();
    let plan = Plan {
        rounds: env_f64("ECHO_ROUNDS", 7.0) as usize,
        measure: Duration::from_secs_f64(env_f64("ECHO_SECONDS", 3.0)),
        py_rounds: env_f64("ECHO_PY_ROUNDS", 3.0) as usize,
        py_measure: Duration::from_secs_f64(env_f64("ECHO_PY_SECONDS", 3.0)),
        warmup: Duration::from_millis(500),
    };
    let mut notes: Vec<String> = Vec::new();
    // Every CPU, before this process pins itself: where the servers with
    // two threads run (they would inherit the client's CPU otherwise).
    let all_cpus = sys::allowed_cpus();
    let (server_cpu, client_cpu) = pin_client(&mut notes);
    let python = arg_after(args, "--python");
    let py_versions = python_peers(python, arg_after(args, "--no-python"), &mut notes);
    let mut servers: Vec<Server> = Vec::new();
    let mut rr_servers: Vec<Server> = Vec::new();
    for c in contenders().chain(RR_CONTENDERS) {
        if matches!(c.kind, Kind::Python(_)) && py_versions.is_none() || !wanted(&c) {
            continue;
        }
        let one = server_cpu.map(|c| [c]);
        let cpus = match (c.threads > 1, &one) {
            (true, _) => Some(&all_cpus[..]),
            (false, Some(one)) => Some(&one[..]),
            (false, None) => None,
        };
        match Server::start(c, python, cpus) {
            Ok(s) if s.request => rr_servers.push(s),
            Ok(s) => servers.push(s),
            Err(e) => notes.push(format!(
                "{} skipped: its server did not start ({e}).",
                c.label
            )),
        }
    }
    for s in servers.iter().chain(&rr_servers) {
        // Process warm-up: fault in code and buffers, let the server's own
        // allocations settle before anything is counted.
        let warm = Load {
            addr: s.addr,
            size: 1024,
            conns: CONNECTIONS,
            warmup: Duration::ZERO,
            measure: Duration::from_secs(1),
            verify: true,
            tls: s.tls,
            request: s.request,
        };
        let out = client::run(&warm, || {}, || {});
        if let Some(e) = out.errors.first() {
            notes.push(format!("{}: warm-up failed: {e}", s.label));
        }
    }
    let sizes = sizes();
    let results: Vec<_> = sizes
        .iter()
        .map(|&size| run_rounds(&servers, size, &plan, &mut notes))
        .collect();
    let rr = run_rounds(&rr_servers, rr::REPLY, &plan, &mut notes);

    print_method(&plan, server_cpu, client_cpu, py_versions.is_some());
    if let Some(v) = &py_versions {
        println!("- Python peers: {v} (protocol mode: `data_received` writes the data back).");
    }
    for n in &notes {
        println!("- {n}");
    }
    for (per, &size) in results.iter().zip(&sizes) {
        report_size(&labels(&servers), size, CONNECTIONS, per);
    }
    report_rr(&labels(&rr_servers), CONNECTIONS, &rr);
    println!(
        "\nThe echo comparison took {:.0} s.",
        started.elapsed().as_secs_f64()
    );
    if let Some(out) = arg_after(args, "--chart") {
        write_chart(out);
    }
}

/// Pins this process (the client) to the second allowed CPU; returns the
/// server's and the client's CPU, or `None`s with a note if there is one CPU.
pub(crate) fn pin_client(notes: &mut Vec<String>) -> (Option<usize>, Option<usize>) {
    let cpus = sys::allowed_cpus();
    if cpus.len() < 2 {
        notes.push(format!(
            "Not pinned: this process may use {} CPU(s); server and client share them.",
            cpus.len()
        ));
        return (None, None);
    }
    if let Err(e) = sys::pin_self(cpus[1]) {
        notes.push(format!("Could not pin the client to CPU {}: {e}.", cpus[1]));
    }
    (Some(cpus[0]), Some(cpus[1]))
}

/// The Python peers' versions if `python` can run them, else `None` and a note.
pub(crate) fn python_peers(
    python: Option<&str>,
    why_not: Option<&str>,
    notes: &mut Vec<String>,
) -> Option<String> {
    let Some(py) = python else {
        notes.push(format!(
            "Python peers skipped: {}",
            why_not.unwrap_or("no `--python` given.")
        ));
        return None;
    };
    let out = Command::new(py)
        .args([
            "-c",
            "import sys, uvloop, twisted; print(sys.version.split()[0], uvloop.__version__, twisted.__version__)",
        ])
        .output();
    let text = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            notes.push(format!(
                "Python peers skipped: {py} cannot import uvloop and twisted."
            ));
            return None;
        }
    };
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        [p, u, t] => Some(format!("Python {p}, uvloop {u}, Twisted {t}")),
        _ => {
            notes.push(format!(
                "Python peers skipped: unexpected versions {text:?}."
            ));
            None
        }
    }
}

/// All rounds at one message size, interleaved: per server, its samples.
pub(crate) fn run_rounds(
    servers: &[Server],
    size: usize,
    plan: &Plan,
    notes: &mut Vec<String>,
) -> Vec<Vec<Sample>> {
    let mut per: Vec<Vec<Sample>> = servers.iter().map(|_| Vec::new()).collect();
    let order = run_order(servers);
    for round in 0..plan.rounds.max(plan.py_rounds) {
        // Each round starts one contender further on (A B C, B C A, C A B…),
        // so no contender always runs first, right after the previous round's
        // last (the heaviest, when the Python peers take part).
        let n = servers.len();
        for i in (0..n).map(|k| order[(round + k) % n]) {
            let s = &servers[i];
            let (rounds, measure) = if s.python {
                (plan.py_rounds, plan.py_measure)
            } else {
                (plan.rounds, plan.measure)
            };
            if round >= rounds {
                continue;
            }
            let load = Load {
                addr: s.addr,
                size,
                conns: CONNECTIONS,
                warmup: plan.warmup,
                measure,
                verify: false,
                tls: s.tls,
                request: s.request,
            };
            match sample(s, &load) {
                Ok(mut x) => {
                    x.round = round;
                    eprintln!(
                        "{} round {}: {:<22} {:>9.0} req/s, {:>6.2} µs CPU/req",
                        workload(s, size),
                        round + 1,
                        s.label,
                        x.rps,
                        x.cpu_us
                    );
                    per[i].push(x);
                }
                Err(e) => {
                    eprintln!(
                        "{} round {}: {}: {e}",
                        workload(s, size),
                        round + 1,
                        s.label
                    );
                    notes.push(format!(
                        "{}, {} round {}: sample failed: {e}",
                        s.label,
                        workload(s, size),
                        round + 1
                    ));
                }
            }
        }
    }
    per
}

/// The contenders that targets pair, in this order, run last in the run
/// order: next to their partner, a few seconds apart, so that a wave of
/// disturbance hits both samples of a pair rather than one. A round's start
/// moves one place a round, so it reaches this tail (and splits a pair across
/// the round's two ends) only if there are more rounds than contenders before it.
pub(crate) const PAIRED: [&str; 7] = [
    READS,
    MIO,
    CALLBACKS,
    TOKIO,
    EMBEDDED,
    TLS_CALLBACKS,
    TOKIO_TLS,
];

/// Indexes of `servers` in run order: the unpaired ones as listed, then [`PAIRED`].
pub(crate) fn run_order(servers: &[Server]) -> Vec<usize> {
    let rank = |i: &usize| PAIRED.iter().position(|&l| l == servers[*i].label);
    let mut order: Vec<usize> = (0..servers.len()).collect();
    // Stable: unpaired (None) first in their order, then by place in PAIRED.
    order.sort_by_key(rank);
    order
}

// ---- the smoke (cargo test) ---------------------------------------------------

/// `cargo test`: the harness's self-checks, then every Rust server echoes
/// (checked byte for byte) under a few hundred milliseconds of load. Never
/// needs Python; a watchdog ends it if anything hangs.
pub fn smoke() {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("echo smoke: still running after 120 s; giving up");
        std::process::exit(1);
    });
    crate::common::hist::selftest();
    assert_eq!(common::summary(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
    assert_eq!(
        common::summary(&mut [4.0, 1.0]).0,
        2.5,
        "even count: mean of the middle two"
    );
    assert_eq!(
        common::shown(1.104, 1.10),
        "1.104",
        "a near miss is not shown as the limit"
    );
    assert_eq!(common::shown(1.2, 1.10), "1.20");
    svg::selftest();
    let servers: Vec<Server> = contenders()
        .filter(|c| matches!(c.kind, Kind::Rust(_)))
        .map(|c| Server::start(c, None, None).unwrap_or_else(|e| panic!("{}: {e}", c.label)))
        .collect();
    for s in servers.iter().filter(|s| !s.tls) {
        servers::check_echo(s.addr).unwrap_or_else(|e| panic!("{}: {e}", s.label));
    }
    let smoke_sample = |s: &Server, size: usize| {
        let load = Load {
            addr: s.addr,
            size,
            conns: 2,
            warmup: Duration::from_millis(20),
            measure: Duration::from_millis(100),
            verify: true,
            tls: s.tls,
            request: s.request,
        };
        let x = sample(s, &load).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        assert!(
            x.allocs.is_some(),
            "{}: the allocation count answers",
            s.label
        );
        vec![x]
    };
    for size in [1024, 100 * 1024] {
        let per: Vec<Vec<Sample>> = servers.iter().map(|s| smoke_sample(s, size)).collect();
        // The report's code on the smoke's tiny samples: its figures mean nothing.
        println!("echo smoke: the report at {size} B, from 0.1 s samples (not figures)");
        report_size(&labels(&servers), size, 2, &per);
    }
    let rr_servers: Vec<Server> = RR_CONTENDERS
        .into_iter()
        .map(|c| Server::start(c, None, None).unwrap_or_else(|e| panic!("{}: {e}", c.label)))
        .collect();
    for s in &rr_servers {
        rr::check(s.addr).unwrap_or_else(|e| panic!("{}: {e}", s.label));
    }
    let per: Vec<Vec<Sample>> = rr_servers
        .iter()
        .map(|s| smoke_sample(s, rr::REPLY))
        .collect();
    println!("echo smoke: the request/response report, from 0.1 s samples (not figures)");
    report_rr(&labels(&rr_servers), 2, &per);
    println!("echo smoke: ok");
}

/// The servers' labels, in order: what the report names them by.
fn labels(servers: &[Server]) -> Vec<&'static str> {
    servers.iter().map(|s| s.label).collect()
}
