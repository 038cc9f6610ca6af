//! Runs the comparison: server processes, the interleaved schedule, the
//! measurements around each sample, and the markdown report; also the smoke
//! that `cargo test` runs, and the server side (`echo server NAME`).

use crate::client::{self, Load};
use crate::common::{self, svg, Better};
use crate::{rr, servers, sys};
use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How a contender's server is started.
#[derive(Clone, Copy)]
enum Kind {
    /// `echo server NAME`: this binary.
    Rust(&'static str),
    /// `python scripts/echo_server.py MODE`.
    Python(&'static str),
}

#[derive(Clone, Copy)]
struct Contender {
    label: &'static str,
    kind: Kind,
    /// Threads serving: a server with more than one is not pinned (it and
    /// the client share the cores).
    threads: usize,
}

const CALLBACKS: &str = "deferloop callbacks";
const COROUTINES: &str = "deferloop coroutines";
const READS: &str = "deferloop Deferred reads";
const MARK256: &str = "deferloop callbacks, 256 KiB mark (control)";
const TOKIO: &str = "tokio current-thread";
const MIO: &str = "mio by hand";
const EMBEDDED: &str = "deferloop in tokio";
const LOOPS2: &str = "deferloop 2 loops";
const TOKIO_MT2: &str = "tokio multi-thread, 2 workers";

const CONTENDERS: [Contender; 12] = [
    Contender {
        label: CALLBACKS,
        kind: Kind::Rust("deferloop"),
        threads: 1,
    },
    Contender {
        label: COROUTINES,
        kind: Kind::Rust("deferloop-coro"),
        threads: 1,
    },
    Contender {
        label: READS,
        kind: Kind::Rust("deferloop-reads"),
        threads: 1,
    },
    Contender {
        label: MARK256,
        kind: Kind::Rust("deferloop-mark256"),
        threads: 1,
    },
    Contender {
        label: TOKIO,
        kind: Kind::Rust("tokio"),
        threads: 1,
    },
    Contender {
        label: MIO,
        kind: Kind::Rust("mio"),
        threads: 1,
    },
    Contender {
        label: EMBEDDED,
        kind: Kind::Rust("deferloop-in-tokio"),
        threads: 1,
    },
    Contender {
        label: LOOPS2,
        kind: Kind::Rust("deferloop-2loops"),
        threads: 2,
    },
    Contender {
        label: TOKIO_MT2,
        kind: Kind::Rust("tokio-mt2"),
        threads: 2,
    },
    Contender {
        label: "asyncio protocol",
        kind: Kind::Python("asyncio"),
        threads: 1,
    },
    Contender {
        label: "uvloop protocol",
        kind: Kind::Python("uvloop"),
        threads: 1,
    },
    Contender {
        label: "Twisted protocol",
        kind: Kind::Python("twisted"),
        threads: 1,
    },
];

/// With `--features tls`: deferloop and tokio over TLS (`tls.rs`).
const TLS_CALLBACKS: &str = "deferloop callbacks, TLS";
const TOKIO_TLS: &str = "tokio-rustls current-thread";

#[cfg(feature = "tls")]
const TLS_CONTENDERS: &[Contender] = &[
    Contender {
        label: TLS_CALLBACKS,
        kind: Kind::Rust("deferloop-tls"),
        threads: 1,
    },
    Contender {
        label: TOKIO_TLS,
        kind: Kind::Rust("tokio-tls"),
        threads: 1,
    },
];
#[cfg(not(feature = "tls"))]
const TLS_CONTENDERS: &[Contender] = &[];

/// The request/response workload's servers (`rr.rs`), measured apart from
/// the echo.
const RR_RAW: &str = "raw Protocol, lines split by hand";
const RR_READS: &str = "Stream, read_line()";
const RR_CONTENDERS: [Contender; 2] = [
    Contender {
        label: RR_RAW,
        kind: Kind::Rust("rr-raw"),
        threads: 1,
    },
    Contender {
        label: RR_READS,
        kind: Kind::Rust("rr-reads"),
        threads: 1,
    },
];

/// Every contender this build has.
fn contenders() -> impl Iterator<Item = Contender> {
    CONTENDERS.into_iter().chain(TLS_CONTENDERS.iter().copied())
}

const SIZES: [usize; 3] = [1024, 10 * 1024, 100 * 1024];
const CONNECTIONS: usize = 10;

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
struct Server {
    label: &'static str,
    child: Child,
    stdin: RefCell<ChildStdin>,
    lines: Receiver<String>,
    addr: SocketAddr,
    counts_allocs: bool,
    python: bool,
    tls: bool,
    /// Serves the request/response workload (`rr.rs`), not the echo.
    request: bool,
    threads: usize,
}

impl Server {
    /// `cpus`: where the server may run (`None`: wherever this process may).
    fn start(c: Contender, python: Option<&str>, cpus: Option<&[usize]>) -> Result<Server, String> {
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
    fn allocs(&self) -> Option<u64> {
        if !self.counts_allocs {
            return None;
        }
        let mut w = self.stdin.borrow_mut();
        writeln!(w, "stats").ok()?;
        w.flush().ok()?;
        let l = self.lines.recv_timeout(Duration::from_secs(5)).ok()?;
        l.split_whitespace().next()?.parse().ok()
    }

    fn cpu_seconds(&self) -> f64 {
        sys::cpu_seconds(self.child.id()).unwrap_or(f64::NAN)
    }

    /// The main thread's sleeps: n/a for a server whose main thread only
    /// waits for its serving threads.
    fn sleeps(&self) -> f64 {
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

struct Sample {
    /// The round it was taken in: ratios pair samples of the same round.
    round: usize,
    rps: f64,
    p50: f64,
    p99: f64,
    /// Server CPU (user + sys) per request, µs.
    cpu_us: f64,
    /// Share of one core the server used.
    cpu_use: f64,
    allocs: Option<f64>,
    /// Times the server's loop slept (blocked in its poll), per request.
    sleeps: f64,
}

fn sample(s: &Server, load: &Load) -> Result<Sample, String> {
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

struct Plan {
    rounds: usize,
    measure: Duration,
    py_rounds: usize,
    py_measure: Duration,
    warmup: Duration,
}

/// `ECHO_ONLY=deferloop,mio,…`: only these servers (by `echo server NAME`),
/// for a quick look at a few; the report runs them all.
fn wanted(c: &Contender) -> bool {
    let name = match c.kind {
        Kind::Rust(n) | Kind::Python(n) => n,
    };
    std::env::var("ECHO_ONLY").map_or(true, |only| only.split(',').any(|o| o == name))
}

/// `ECHO_SIZES=102400`: only these message sizes; the report runs [`SIZES`].
fn sizes() -> Vec<usize> {
    std::env::var("ECHO_SIZES").map_or(SIZES.to_vec(), |v| {
        v.split(',').filter_map(|s| s.parse().ok()).collect()
    })
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn arg_after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

fn kib(size: usize) -> String {
    format!("{} KiB", size / 1024)
}

/// What server `s` is measured on, for progress lines and notes.
fn workload(s: &Server, size: usize) -> String {
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
        report_size(&servers, size, CONNECTIONS, per);
    }
    report_rr(&rr_servers, CONNECTIONS, &rr);
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
fn pin_client(notes: &mut Vec<String>) -> (Option<usize>, Option<usize>) {
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
fn python_peers(
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
fn run_rounds(
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
const PAIRED: [&str; 7] = [
    READS,
    MIO,
    CALLBACKS,
    TOKIO,
    EMBEDDED,
    TLS_CALLBACKS,
    TOKIO_TLS,
];

/// Indexes of `servers` in run order: the unpaired ones as listed, then [`PAIRED`].
fn run_order(servers: &[Server]) -> Vec<usize> {
    let rank = |i: &usize| PAIRED.iter().position(|&l| l == servers[*i].label);
    let mut order: Vec<usize> = (0..servers.len()).collect();
    // Stable: unpaired (None) first in their order, then by place in PAIRED.
    order.sort_by_key(rank);
    order
}

fn print_method(plan: &Plan, server_cpu: Option<usize>, client_cpu: Option<usize>, python: bool) {
    println!("\n### How the echo comparison runs\n");
    println!(
        "Each server runs alone in its own process, single-threaded, TCP_NODELAY on, \
         pinned to CPU {}: the Rust ones are this bench binary (`echo server NAME`, \
         benches/echo/servers.rs), the Python peers `scripts/echo_server.py`. The load client \
         is this process: {CONNECTIONS} blocking threads pinned to CPU {}, one connection \
         each, one `x…\\n` message in flight per connection, the reply matched by byte count. \
         Per size, {} rounds each run every contender once, each round starting one \
         contender further on (A B C D, B C D A, …), with the contenders a target compares run back to back; a sample is {} s of warm-up on fresh connections, then {} s measured.{} Every \
         server was warmed up for 1 s first.",
        server_cpu.map_or("(any)".into(), |c| c.to_string()),
        client_cpu.map_or("(any)".into(), |c| c.to_string()),
        plan.rounds,
        plan.warmup.as_secs_f64(),
        plan.measure.as_secs_f64(),
        if python {
            format!(
                " Python peers take part in the first {} rounds, with {} s measured.",
                plan.py_rounds,
                plan.py_measure.as_secs_f64()
            )
        } else {
            String::new()
        }
    );
    println!(
        "\n{LOOPS2} (`deferloop::cores::Cores` with two loops on `SO_REUSEPORT` sockets) and {TOKIO_MT2} serve \
         from two threads and are not pinned: they and the load client share both cores, so \
         they show what a second loop gives when the load generator competes for the same \
         cores, not what it gives on a core of its own; their sleeps/req is n/a (the main \
         thread only waits). {EMBEDDED} is the callbacks server driven from a tokio \
         current-thread runtime through the loop's fd (`AsyncFd`), its timeout (a tokio \
         sleep) and a turn that never waits (examples/embed_tokio.rs)."
    );
    println!();
    println!(
        "- req/s: round trips completed in the measured phase over its length; \
         \"vs callbacks\": the median over the rounds of its ratio to {CALLBACKS} in the same \
         round (so a disturbance that hits a whole round cancels); every ratio and target \
         below is such a median of per-round ratios.\n\
         - p50/p99: latency of one round trip from the client's 10 µs histogram (vmbench's \
         weighted interpolation), median over the samples.\n\
         - server CPU: the server process's user + system time from `/proc/PID/stat` over \
         the measured phase, per request; ratio to {MIO} (per round, as above); \"use\" is the share of one core.\n\
         - sleeps/req: voluntary context switches of the server's loop thread \
         (`/proc/PID/status`) per request: how often it blocked waiting for events. Each \
         costs a sleep and a wake-up in the kernel, so a server that batches more events \
         per turn spends less CPU per request while it is not saturated.\n\
         - allocs/req: allocations and reallocations counted by the server's global \
         allocator over the measured phase, per request (Rust servers only)."
    );
}

/// Prints whether the median per-round ratio `(median, min, max)` is at
/// least (`Better::Higher`) or at most (`Better::Lower`) `threshold`, with
/// the spread of the per-round ratios.
fn paired_target(what: &str, (r, lo, hi): (f64, f64, f64), better: Better, threshold: f64) {
    let (met, bound, recorded) = match better {
        Better::Higher => (r >= threshold, "needed", format!("{threshold:.2}")),
        Better::Lower => (r <= threshold, "allowed", format!("<={threshold:.2}")),
    };
    let verdict = if met { "met" } else { "**not met**" };
    let shown = common::shown(r, threshold);
    println!(
        "\n- Target: {what}: measured {shown}× ({bound} {threshold:.2}×; per round \
         {lo:.2}–{hi:.2}×): {verdict}"
    );
    common::record(&["target", what, &shown, &recorded, verdict]);
}

/// The table, the targets and the style comparison for one message size.
fn report_size(servers: &[Server], size: usize, conns: usize, per: &[Vec<Sample>]) {
    let find = |label: &str| servers.iter().position(|s| s.label == label);
    let stats = |i: usize, f: &dyn Fn(&Sample) -> f64| -> Option<(f64, f64, f64)> {
        let mut v: Vec<f64> = per[i].iter().map(f).filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then(|| common::summary(&mut v))
    };
    let med = |label: &str, f: &dyn Fn(&Sample) -> f64| {
        find(label).and_then(|i| stats(i, f)).map(|x| x.0)
    };
    // A ratio is the median of per-round ratios (each pairs two samples
    // taken within one round, so a disturbance that hits a whole round
    // cancels), with their min–max.
    let paired = |i: usize, base: &str, f: &dyn Fn(&Sample) -> f64| {
        let j = find(base)?;
        let mut v: Vec<f64> = per[i]
            .iter()
            .filter_map(|a| {
                let b = per[j].iter().find(|b| b.round == a.round)?;
                Some(f(a) / f(b))
            })
            .filter(|x| x.is_finite())
            .collect();
        (!v.is_empty()).then(|| common::summary(&mut v))
    };
    let callbacks = find(CALLBACKS);
    println!(
        "\n### TCP echo, {} messages, {conns} connections\n",
        kib(size)
    );
    println!(
        "| contender | req/s | min–max | vs callbacks | p50 ms | p99 ms | server CPU µs/req | min–max | vs mio | CPU use | sleeps/req | allocs/req |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let section_rps = format!("echo {}: requests/s", kib(size));
    let section_cpu = format!("echo {}: server CPU per request", kib(size));
    for (i, s) in servers.iter().enumerate() {
        let Some((r, rlo, rhi)) = stats(i, &|s| s.rps) else {
            println!("| {} | failed | | | | | | | | | | |", s.label);
            continue;
        };
        let (c, clo, chi) = stats(i, &|s| s.cpu_us).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let median = |f: &dyn Fn(&Sample) -> f64| stats(i, f).map_or(f64::NAN, |x| x.0);
        let allocs = stats(i, &|s| s.allocs.unwrap_or(f64::NAN))
            .map_or("n/a".into(), |x| format!("{:.3}", x.0));
        let ratio = |base: &str, f: &dyn Fn(&Sample) -> f64| {
            paired(i, base, f).map_or("n/a".into(), |x| format!("{:.2}×", x.0))
        };
        println!(
            "| {} | {:.0} | {:.0}–{:.0} | {} | {:.3} | {:.3} | {:.2} | {:.2}–{:.2} | {} | {:.0} % | {:.2} | {allocs} |",
            s.label,
            r,
            rlo,
            rhi,
            ratio(CALLBACKS, &|s| s.rps),
            median(&|s| s.p50),
            median(&|s| s.p99),
            c,
            clo,
            chi,
            ratio(MIO, &|s| s.cpu_us),
            median(&|s| s.cpu_use) * 100.0,
            median(&|s| s.sleeps)
        );
        common::record_value(&section_rps, s.label, "req/s", Better::Higher, r, rlo, rhi);
        common::record_value(&section_cpu, s.label, "µs/req", Better::Lower, c, clo, chi);
    }

    let what = format!("echo {}: requests/s at least tokio's", kib(size));
    match callbacks.and_then(|i| paired(i, TOKIO, &|s| s.rps)) {
        Some(r) => paired_target(&what, r, Better::Higher, 1.0),
        None => not_measured(&what),
    }
    // The no-regression bound (since 651641d), then the tighter goal (since bab4175).
    for limit in [1.10, 1.05] {
        let what = format!(
            "echo {}: server CPU per request at most {limit:.2}× the hand-written mio server's",
            kib(size)
        );
        match callbacks.and_then(|i| paired(i, MIO, &|s| s.cpu_us)) {
            Some(r) => paired_target(&what, r, Better::Lower, limit),
            None => not_measured(&what),
        }
    }
    let what = format!(
        "echo {}: no heap allocation per echoed request in the deferloop server",
        kib(size)
    );
    match med(CALLBACKS, &|s| s.allocs.unwrap_or(f64::NAN)) {
        Some(a) => {
            let verdict = if a == 0.0 { "met" } else { "**not met**" };
            println!("\n- Target: {what}: measured {a:.3} per request (needed 0): {verdict}");
            common::record(&["target", &what, &format!("{a:.3}"), "0", verdict]);
        }
        None => not_measured(&what),
    }
    // The convenience of Deferred reads, beside the raw protocol
    // (the callbacks server: `data_received` writes the slice back).
    let what = format!(
        "echo {}: Deferred reads server CPU per request at most 1.05× the raw protocol server's",
        kib(size)
    );
    match find(READS).and_then(|i| paired(i, CALLBACKS, &|s| s.cpu_us)) {
        Some(r) => paired_target(&what, r, Better::Lower, 1.05),
        None => not_measured(&what),
    }
    if let Some(tls) = find(TLS_CALLBACKS) {
        let what = format!(
            "echo {} over TLS: server CPU per request at most 1.10× tokio-rustls's",
            kib(size)
        );
        match paired(tls, TOKIO_TLS, &|s| s.cpu_us) {
            Some(r) => paired_target(&what, r, Better::Lower, 1.10),
            None => not_measured(&what),
        }
        // rustls's buffered API allocates for each record it seals or opens:
        // reported, not a target.
        if let Some(a) = med(TLS_CALLBACKS, &|s| s.allocs.unwrap_or(f64::NAN)) {
            println!("- TLS: the deferloop server made {a:.2} allocations per echoed request (rustls's per-record buffers).");
        }
    }
    report_embedding_and_loops(size, &find, &paired);
    let coroutines = find(COROUTINES);
    if let (Some(cpu), Some(rps)) = (
        coroutines.and_then(|i| paired(i, CALLBACKS, &|s| s.cpu_us)),
        coroutines.and_then(|i| paired(i, CALLBACKS, &|s| s.rps)),
    ) {
        println!(
            "- Style, on the same loop: coroutines need {:.2}× the server CPU per request of \
             callbacks, and reach {:.2}× their requests/s.",
            cpu.0, rps.0
        );
    }
}

/// The request/response table and its target: the `Stream` server's CPU per
/// request beside the raw protocol's.
fn report_rr(servers: &[Server], conns: usize, per: &[Vec<Sample>]) {
    let find = |label: &str| servers.iter().position(|s| s.label == label);
    let stats = |i: usize, f: &dyn Fn(&Sample) -> f64| -> Option<(f64, f64, f64)> {
        let mut v: Vec<f64> = per[i].iter().map(f).filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then(|| common::summary(&mut v))
    };
    let paired = |i: usize, j: usize, f: &dyn Fn(&Sample) -> f64| {
        let mut v: Vec<f64> = per[i]
            .iter()
            .filter_map(|a| {
                let b = per[j].iter().find(|b| b.round == a.round)?;
                Some(f(a) / f(b))
            })
            .filter(|x| x.is_finite())
            .collect();
        (!v.is_empty()).then(|| common::summary(&mut v))
    };
    println!(
        "\n### Request/response, `GET <key>` lines answered with {} B, {conns} connections\n",
        rr::REPLY
    );
    println!(
        "The same load client and measurements as the echo, one request in flight per \
         connection; the two servers (benches/echo/rr.rs) compute the same answer and differ \
         in how they read lines: a raw `Protocol` that splits `data_received` by hand (complete \
         lines answered from the loop's read buffer), and a `Stream` whose `read_line()` \
         callback writes the answer and asks for the next line.\n"
    );
    println!(
        "| contender | req/s | min–max | p50 ms | p99 ms | server CPU µs/req | min–max | vs raw | CPU use | allocs/req |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let raw = find(RR_RAW);
    for (i, s) in servers.iter().enumerate() {
        let Some((r, rlo, rhi)) = stats(i, &|s| s.rps) else {
            println!("| {} | failed | | | | | | | | |", s.label);
            continue;
        };
        let (c, clo, chi) = stats(i, &|s| s.cpu_us).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let median = |f: &dyn Fn(&Sample) -> f64| stats(i, f).map_or(f64::NAN, |x| x.0);
        let vs = raw
            .and_then(|j| paired(i, j, &|s| s.cpu_us))
            .map_or("n/a".into(), |x| format!("{:.2}×", x.0));
        println!(
            "| {} | {r:.0} | {rlo:.0}–{rhi:.0} | {:.3} | {:.3} | {c:.2} | {clo:.2}–{chi:.2} | {vs} | {:.0} % | {:.3} |",
            s.label,
            median(&|s| s.p50),
            median(&|s| s.p99),
            median(&|s| s.cpu_use) * 100.0,
            median(&|s| s.allocs.unwrap_or(f64::NAN)),
        );
        common::record_value(
            "request/response: server CPU per request",
            s.label,
            "µs/req",
            Better::Lower,
            c,
            clo,
            chi,
        );
    }
    let what =
        "request/response: Stream server CPU per request at most 1.15× the raw protocol server's";
    match (find(RR_READS), raw) {
        (Some(i), Some(j)) => match paired(i, j, &|s| s.cpu_us) {
            Some(r) => paired_target(what, r, Better::Lower, 1.15),
            None => not_measured(what),
        },
        _ => not_measured(what),
    }
}

/// The median, min and max of per-round ratios of contender `i` to `base`.
type Paired<'a> = dyn Fn(usize, &str, &dyn Fn(&Sample) -> f64) -> Option<(f64, f64, f64)> + 'a;

/// The embedding target, and the many-loops comparison.
fn report_embedding_and_loops(size: usize, find: &dyn Fn(&str) -> Option<usize>, paired: &Paired) {
    let what = format!(
        "echo {}: deferloop embedded in tokio: server CPU per request at most 1.10× plain deferloop's",
        kib(size)
    );
    match find(EMBEDDED).and_then(|i| paired(i, CALLBACKS, &|s| s.cpu_us)) {
        Some(r) => paired_target(&what, r, Better::Lower, 1.10),
        None => not_measured(&what),
    }
    let Some(i) = find(LOOPS2) else { return };
    let x = |base: &str, f: &dyn Fn(&Sample) -> f64| {
        paired(i, base, f).map_or("n/a".into(), |r| {
            format!("{:.2}× ({:.2}–{:.2})", r.0, r.1, r.2)
        })
    };
    println!(
        "- Many loops ({LOOPS2} and {TOKIO_MT2} unpinned; the load client shares both cores \
         with them): 2 loops reach {} the requests/s of 1 loop and {} those of tokio's \
         multi-thread runtime with 2 workers, at {} and {} their server CPU per request.",
        x(CALLBACKS, &|s| s.rps),
        x(TOKIO_MT2, &|s| s.rps),
        x(CALLBACKS, &|s| s.cpu_us),
        x(TOKIO_MT2, &|s| s.cpu_us),
    );
}

fn not_measured(what: &str) {
    println!("\n- Target: {what}: not measured (a contender has no sample): **not met**");
    common::record(&["target", what, "n/a", "n/a", "**not met**"]);
}

/// Draws every table recorded in `$DEFERLOOP_BENCH_RESULTS` into `out`.
fn write_chart(out: &str) {
    let Some(path) = std::env::var_os("DEFERLOOP_BENCH_RESULTS") else {
        eprintln!("--chart needs DEFERLOOP_BENCH_RESULTS: no chart written");
        return;
    };
    let text = std::fs::read_to_string(&path).expect("read the results file");
    let rows = svg::parse(&text);
    let svg = svg::chart(
        "deferloop benchmarks: medians, whiskers from min to max (scripts/bench_report.sh)",
        &rows,
    );
    svg::check_tags(&svg);
    std::fs::write(out, svg).expect("write the chart");
    eprintln!("wrote {out}");
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
        report_size(&servers, size, 2, &per);
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
    report_rr(&rr_servers, 2, &per);
    println!("echo smoke: ok");
}
