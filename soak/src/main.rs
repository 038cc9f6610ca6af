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

// ---- measuring the process ------------------------------------------------

/// The system allocator, counting the bytes live on the heap and their peak.
struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);
static HEAP_PEAK: AtomicIsize = AtomicIsize::new(0);

fn heap_note(delta: isize) {
    let now = HEAP.fetch_add(delta, Relaxed) + delta;
    HEAP_PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counters are statistics only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        heap_note(l.size() as isize);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        heap_note(l.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        heap_note(-(l.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        heap_note(new as isize - l.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Resident set size, from /proc (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Gives freed memory back to the OS before RSS is read (glibc keeps it).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn raise_fd_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < n as libc::rlim_t {
            lim.rlim_cur = (n as libc::rlim_t).min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Sets a socket option of `t`'s socket to an `int` value.
fn set_int_opt(t: &Transport, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    if let Some(fd) = t.raw_fd() {
        // SAFETY: a valid open fd and a pointer to a local int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Closes `t` with a reset: SO_LINGER with a zero timeout, then `abort`.
fn reset(t: &Transport) {
    if let Some(fd) = t.raw_fd() {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid open fd and a pointer to a local `linger` of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    t.abort();
}

// ---- configuration and report ---------------------------------------------

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub secs: f64,
    pub conns: usize,
    pub threads: usize,
    pub seed: u64,
    pub max_size: usize,
    /// Share of the connections made over a Unix socket, in percent.
    pub unix_pct: u64,
    /// Allowed growth of RSS from start to end, in bytes.
    pub rss_slack: u64,
    /// Allowed growth of live heap bytes from start to end.
    pub heap_slack: isize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            secs: 10.0,
            conns: 200,
            threads: 4,
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            max_size: 256 * 1024,
            unix_pct: 25,
            rss_slack: 16 << 20,
            heap_slack: 256 << 10,
        }
    }
}

/// How a client connection ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Close,
    HalfClose,
    Reset,
    ServerPanic,
}

/// The client loop's counts.
#[derive(Debug, Default, Clone)]
pub struct ClientStats {
    pub connects: u64,
    pub connect_failures: u64,
    pub made: u64,
    /// Of `made`, over a Unix socket.
    pub unix_made: u64,
    pub lost: u64,
    pub lost_twice: u64,
    pub endings: [u64; 4],
    pub requests: u64,
    pub bytes_sent: u64,
    pub bytes_echoed: u64,
    pub clean_bytes_sent: u64,
    pub clean_bytes_echoed: u64,
    pub mismatched: u64,
    pub short_clean: u64,
    pub unexpected_errors: Vec<String>,
    pub deferreds: u64,
    pub deferreds_fired: u64,
    pub fired_twice: u64,
    pub watchdogs_set: u64,
    pub watchdogs_cancelled: u64,
    pub watchdogs_fired: u64,
    pub handler_calls: u64,
    pub timers_left: usize,
    pub sources_left: usize,
}

/// The server loop's counts.
#[derive(Debug, Default, Clone)]
pub struct ServerStats {
    pub accepted: u64,
    /// Of `accepted`, by the Unix listener.
    pub unix_accepted: u64,
    /// Listeners open to the end (TCP, and Unix if it could bind).
    pub listeners: usize,
    pub made: u64,
    pub lost: u64,
    pub lost_twice: u64,
    pub lost_clean: u64,
    pub lost_error: u64,
    pub lost_panic: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Bytes read on connections that ended cleanly.
    pub clean_bytes_in: u64,
    pub idle_set: u64,
    pub idle_cancelled: u64,
    pub idle_fired: u64,
    pub pool_jobs: u64,
    pub pool_fired: u64,
    pub handler_panics: u64,
    pub handler_other: u64,
    pub timers_left: usize,
    pub sources_left: usize,
}

/// What the run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub config: Config,
    pub elapsed: Duration,
    pub client: ClientStats,
    pub server: ServerStats,
    /// Threadsafe calls (sent, ran) into the client and the server loop.
    pub calls_client: (u64, u64),
    pub calls_server: (u64, u64),
    pub blocking_calls: (u64, u64),
    pub rss: (u64, u64, u64),
    pub heap: (isize, isize, isize),
    pub fds: (usize, usize),
    pub daemons: DaemonStats,
}

const ENDS: [End; 4] = [End::Close, End::HalfClose, End::Reset, End::ServerPanic];

impl Report {
    /// Every rule the run broke; empty means it passed.
    pub fn violations(&self) -> Vec<String> {
        let (c, s) = (&self.client, &self.server);
        let k_unix = self.config.unix_pct;
        let mut v = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                v.push(what);
            }
        };
        check(c.made > 0 && c.requests > 0, "nothing was exchanged".into());
        let d = &self.daemons;
        check(
            d.left_behind == 0,
            format!("{} child processes left unreaped", d.left_behind),
        );
        check(
            d.spawned > 0 && d.spawned >= d.exited + d.killed && d.output_mismatches == 0,
            format!(
                "children: {} spawned, {} exited, {} killed, {} with wrong output",
                d.spawned, d.exited, d.killed, d.output_mismatches
            ),
        );
        check(
            d.signals_sent == 0 || d.signals_heard > 0,
            format!("{} SIGUSR1 sent, none heard", d.signals_sent),
        );
        check(
            c.made == c.lost,
            format!("client: {} made, {} lost", c.made, c.lost),
        );
        check(
            s.made == s.lost,
            format!("server: {} made, {} lost", s.made, s.lost),
        );
        check(
            c.lost_twice + s.lost_twice == 0,
            "connection_lost called twice".into(),
        );
        check(
            s.unix_accepted == c.unix_made && (k_unix == 0 || c.unix_made > 0),
            format!(
                "{} connected over Unix sockets, {} accepted",
                c.unix_made, s.unix_accepted
            ),
        );
        check(
            s.accepted == c.made && s.made == c.made,
            format!(
                "{} connected, {} accepted, {} made",
                c.made, s.accepted, s.made
            ),
        );
        check(
            c.mismatched == 0,
            format!("{} echoed bytes differ", c.mismatched),
        );
        check(
            c.short_clean == 0 && c.clean_bytes_sent == c.clean_bytes_echoed,
            format!(
                "clean connections: {} sent, {} echoed, {} short",
                c.clean_bytes_sent, c.clean_bytes_echoed, c.short_clean
            ),
        );
        check(
            s.clean_bytes_in == c.clean_bytes_sent,
            format!(
                "clean connections: client sent {}, server read {}",
                c.clean_bytes_sent, s.clean_bytes_in
            ),
        );
        check(
            c.unexpected_errors.is_empty(),
            format!("unexpected connection errors: {:?}", c.unexpected_errors),
        );
        check(
            c.deferreds == c.deferreds_fired && c.fired_twice == 0,
            format!(
                "client Deferreds: {} made, {} fired, {} fired twice",
                c.deferreds, c.deferreds_fired, c.fired_twice
            ),
        );
        check(
            s.pool_jobs == s.pool_fired,
            format!(
                "pool Deferreds: {} made, {} fired",
                s.pool_jobs, s.pool_fired
            ),
        );
        check(
            c.watchdogs_set == c.watchdogs_cancelled && c.watchdogs_fired == 0,
            format!(
                "watchdogs: {} set, {} cancelled, {} fired",
                c.watchdogs_set, c.watchdogs_cancelled, c.watchdogs_fired
            ),
        );
        check(
            s.idle_set == s.idle_cancelled && s.idle_fired == 0,
            format!(
                "idle timers: {} set, {} cancelled, {} fired",
                s.idle_set, s.idle_cancelled, s.idle_fired
            ),
        );
        check(
            c.timers_left + s.timers_left == 0,
            format!(
                "timers left: client {}, server {}",
                c.timers_left, s.timers_left
            ),
        );
        check(
            c.sources_left == 0 && s.sources_left == s.listeners,
            format!(
                "I/O sources left: client {}, server {} ({} listeners)",
                c.sources_left, s.sources_left, s.listeners
            ),
        );
        check(
            s.lost_panic == c.endings[3] && s.handler_panics == c.endings[3],
            format!(
                "{} panics injected, {} connections lost to one, {} reported",
                c.endings[3], s.lost_panic, s.handler_panics
            ),
        );
        check(
            c.handler_calls + s.handler_other == 0,
            format!(
                "exception handler: client {}, server {} (not panics)",
                c.handler_calls, s.handler_other
            ),
        );
        for (name, (sent, ran)) in [
            ("client", self.calls_client),
            ("server", self.calls_server),
            ("blocking", self.blocking_calls),
        ] {
            check(
                sent == ran,
                format!("threadsafe calls into {name}: {sent} sent, {ran} ran"),
            );
        }
        check(
            self.fds.0 == self.fds.1,
            format!("fds: {} at start, {} at end", self.fds.0, self.fds.1),
        );
        check(
            self.rss.2 <= self.rss.0 + self.config.rss_slack,
            format!("RSS grew from {} to {}", mib(self.rss.0), mib(self.rss.2)),
        );
        check(
            self.heap.2 - self.heap.0 <= self.config.heap_slack,
            format!("heap grew from {} to {} bytes", self.heap.0, self.heap.2),
        );
        v
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, s, k) = (&self.client, &self.server, &self.config);
        let d = &self.daemons;
        writeln!(
            f,
            "daemons       SIGUSR1 sent {}, heard {} (bursts coalesce); children spawned {}, exited {}, killed {}, spawn failures {}, wrong output {}, left unreaped {}",
            d.signals_sent, d.signals_heard, d.spawned, d.exited, d.killed, d.spawn_failures, d.output_mismatches, d.left_behind
        )?;
        writeln!(
            f,
            "deferloop soak: {:.1} s, {} connections at a time, {} caller threads, seed {}, requests up to {} KiB",
            self.elapsed.as_secs_f64(),
            k.conns,
            k.threads,
            k.seed,
            k.max_size / 1024
        )?;
        writeln!(
            f,
            "connections   {} opened by the client ({} over Unix sockets; {} connect failures), {} accepted ({} Unix); connection_lost once each: client {}/{}, server {}/{}; twice: {}",
            c.made, c.unix_made, c.connect_failures, s.accepted, s.unix_accepted, c.lost, c.made, s.lost, s.made, c.lost_twice + s.lost_twice
        )?;
        writeln!(
            f,
            "endings       close {}, half-close {}, client reset {}, server panic {}; server saw clean {}, error {}, panic {}",
            c.endings[0], c.endings[1], c.endings[2], c.endings[3], s.lost_clean, s.lost_error, s.lost_panic
        )?;
        writeln!(
            f,
            "bytes         client sent {} ({} B), echoed back {} ({} B), mismatched {}; on clean connections sent {} B, echoed {} B; server read {} B, wrote {} B",
            gib(c.bytes_sent), c.bytes_sent, gib(c.bytes_echoed), c.bytes_echoed, c.mismatched,
            c.clean_bytes_sent, c.clean_bytes_echoed, s.bytes_in, s.bytes_out
        )?;
        writeln!(
            f,
            "deferreds     client requests {} made, {} fired, {} fired twice; pool jobs {} made, {} fired",
            c.deferreds, c.deferreds_fired, c.fired_twice, s.pool_jobs, s.pool_fired
        )?;
        writeln!(
            f,
            "timers        watchdogs set {}, cancelled {}, fired {}; idle timers set {}, cancelled {}, fired {}; left in heaps {}",
            c.watchdogs_set, c.watchdogs_cancelled, c.watchdogs_fired, s.idle_set, s.idle_cancelled, s.idle_fired, c.timers_left + s.timers_left
        )?;
        writeln!(
            f,
            "threadsafe    into client {} sent / {} ran, into server {} sent / {} ran, blocking {} / {}",
            self.calls_client.0, self.calls_client.1, self.calls_server.0, self.calls_server.1,
            self.blocking_calls.0, self.blocking_calls.1
        )?;
        writeln!(
            f,
            "faults        resets {}, protocol panics {} (reported {}), peers gone under a write or read: {} server connections lost with an error",
            c.endings[2], c.endings[3], s.handler_panics, s.lost_error
        )?;
        writeln!(
            f,
            "memory        RSS start {}, peak {}, end {}; heap live start {} B, peak {}, end {} B; fds {} -> {}",
            mib(self.rss.0), mib(self.rss.1), mib(self.rss.2), self.heap.0, mib(self.heap.1.max(0) as u64), self.heap.2,
            self.fds.0, self.fds.1
        )?;
        let v = self.violations();
        if v.is_empty() {
            write!(f, "verdict       PASS")
        } else {
            write!(f, "verdict       FAIL")?;
            for x in v {
                write!(f, "\n  - {x}")?;
            }
            Ok(())
        }
    }
}

// ---- a small deterministic RNG (xorshift64*) -------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Mostly small, sometimes large: 70 % up to 1 KiB, 25 % up to 64 KiB.
    fn size(&mut self, max: usize) -> usize {
        let cap = match self.below(100) {
            0..=69 => 1024,
            70..=94 => 64 * 1024,
            _ => max,
        }
        .min(max);
        1 + self.below(cap as u64) as usize
    }
}

// ---- the server ------------------------------------------------------------

/// The byte the client never sends in a payload; eight in a row make the
/// server's protocol panic (the injected fault).
const PANIC_BYTE: u8 = 0xff;
const PANIC_RUN: usize = 8;
const IDLE: Duration = Duration::from_secs(60);

struct Server {
    stats: RefCell<ServerStats>,
    live: Cell<u64>,
    pool_in_flight: Cell<u64>,
    /// TCP first, then Unix.
    listeners: RefCell<Vec<deferloop::net::Listener>>,
}

thread_local! {
    /// The server's state, for the audit's threadsafe queries.
    static SERVER: RefCell<Option<Rc<Server>>> = const { RefCell::new(None) };
}

/// On the server loop: (connections made, lost, accepted, pool jobs in flight).
fn server_state() -> (u64, u64, u64, u64) {
    SERVER.with(|s| {
        let s = s.borrow();
        let srv = s.as_ref().expect("the server thread");
        let st = srv.stats.borrow();
        let accepted = srv.listeners.borrow().iter().map(|l| l.accepted()).sum();
        (st.made, st.lost, accepted, srv.pool_in_flight.get())
    })
}

struct EchoConn {
    srv: Rc<Server>,
    idle: Option<Handle>,
    reads: u64,
    ff_run: usize,
    bytes_in: u64,
    lost: bool,
}

impl EchoConn {
    fn rearm(&mut self, t: &Transport) {
        if let Some(h) = self.idle.take() {
            if h.cancel() {
                self.srv.stats.borrow_mut().idle_cancelled += 1;
            }
        }
        let (srv, t2) = (self.srv.clone(), t.clone());
        let h = t
            .event_loop()
            .expect("the connection is open")
            .call_later(IDLE, move |_| {
                srv.stats.borrow_mut().idle_fired += 1;
                t2.abort();
            });
        if let Ok(h) = h {
            self.srv.stats.borrow_mut().idle_set += 1;
            self.idle = Some(h);
        }
    }
}

impl Protocol for EchoConn {
    fn connection_made(&mut self, t: &Transport) {
        let n = {
            let mut s = self.srv.stats.borrow_mut();
            s.made += 1;
            s.made
        };
        if n % 2 == 0 {
            // A small send buffer: echoes queue up in the write buffer, and
            // flow control (pause_writing → pause_reading) comes into play.
            set_int_opt(t, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 * 1024);
        }
        self.srv.live.set(self.srv.live.get() + 1);
        self.rearm(t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        for &b in data {
            self.ff_run = if b == PANIC_BYTE { self.ff_run + 1 } else { 0 };
            if self.ff_run == PANIC_RUN {
                panic!("soak: injected protocol panic");
            }
        }
        self.bytes_in += data.len() as u64;
        {
            let mut s = self.srv.stats.borrow_mut();
            s.bytes_in += data.len() as u64;
            s.bytes_out += data.len() as u64;
        }
        t.write(data);
        self.rearm(t);
        self.reads += 1;
        if self.reads.is_multiple_of(16) {
            // Some work for the pool, and a Deferred that must fire once.
            let sample: Vec<u8> = data.iter().take(64).copied().collect();
            let srv = self.srv.clone();
            srv.stats.borrow_mut().pool_jobs += 1;
            srv.pool_in_flight.set(srv.pool_in_flight.get() + 1);
            let _ = t
                .event_loop()
                .expect("the connection is open")
                .defer_to_thread(move || sample.iter().map(|&b| u64::from(b)).sum::<u64>())
                .add_both(move |_r: Result<u64, Failure>| {
                    srv.stats.borrow_mut().pool_fired += 1;
                    srv.pool_in_flight.set(srv.pool_in_flight.get() - 1);
                    Ok::<_, Failure>(())
                });
        }
    }

    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }

    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }

    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        let mut s = self.srv.stats.borrow_mut();
        if std::mem::replace(&mut self.lost, true) {
            s.lost_twice += 1;
            return;
        }
        s.lost += 1;
        match &reason {
            None => {
                s.lost_clean += 1;
                s.clean_bytes_in += self.bytes_in;
            }
            Some(f) if f.is_panic() => s.lost_panic += 1,
            Some(_) => s.lost_error += 1,
        }
        drop(s);
        self.srv.live.set(self.srv.live.get() - 1);
        if let Some(h) = self.idle.take() {
            if h.cancel() {
                self.srv.stats.borrow_mut().idle_cancelled += 1;
            }
        }
    }
}

/// Where the server listens: TCP, and the Unix socket path if any.
type Listening = (SocketAddr, Option<PathBuf>, Remote);

fn server_thread(ready: mpsc::Sender<Listening>, unix: Option<PathBuf>) -> ServerStats {
    let ev = EventLoop::new().expect("server loop");
    let srv = Rc::new(Server {
        stats: RefCell::default(),
        live: Cell::new(0),
        pool_in_flight: Cell::new(0),
        listeners: RefCell::new(Vec::new()),
    });
    SERVER.with(|s| *s.borrow_mut() = Some(srv.clone()));
    let s2 = srv.clone();
    ev.set_exception_handler(move |_: &Loop, cx: &ExceptionContext<'_>| {
        let mut s = s2.stats.borrow_mut();
        match cx.failure {
            Some(f) if f.is_panic() => s.handler_panics += 1,
            _ => {
                s.handler_other += 1;
                eprintln!(
                    "soak server: {} {:?}",
                    cx.message,
                    cx.failure.map(|f| f.to_string())
                );
            }
        }
    });
    let factory = |srv: &Rc<Server>| {
        let srv = srv.clone();
        move || EchoConn {
            srv: srv.clone(),
            idle: None,
            reads: 0,
            ff_run: 0,
            bytes_in: 0,
            lost: false,
        }
    };
    let listener = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), factory(&srv))
        .expect("listen");
    let addr = listener.local_addr().as_inet().unwrap();
    srv.listeners.borrow_mut().push(listener);
    let unix = unix.and_then(|path| {
        let _ = std::fs::remove_file(&path);
        match ev.listen_unix(&path, factory(&srv)) {
            Ok(l) => {
                srv.listeners.borrow_mut().push(l);
                Some(path)
            }
            Err(e) => {
                eprintln!("soak server: no Unix socket at {}: {e}", path.display());
                None
            }
        }
    });
    // The remote is handed out from the first turn: a blocking call made
    // before the loop runs fails with `NotRunning` (the callers start at once).
    let remote = ev.remote();
    ev.call_soon(move |_| ready.send((addr, unix, remote)).unwrap())
        .expect("server loop open");
    ev.run().expect("server run");
    let mut stats = srv.stats.borrow().clone();
    let listeners = std::mem::take(&mut *srv.listeners.borrow_mut());
    stats.listeners = listeners.len();
    stats.accepted = listeners.iter().map(|l| l.accepted()).sum();
    stats.unix_accepted = listeners.get(1).map_or(0, |l| l.accepted());
    // The count of sources is taken with the listeners still open.
    stats.timers_left = ev.timer_count();
    stats.sources_left = ev.io_source_count();
    drop(listeners);
    SERVER.with(|s| s.borrow_mut().take());
    drop(srv);
    drop(ev);
    stats
}

// ---- the client ------------------------------------------------------------

struct Client {
    addr: SocketAddr,
    unix: Option<PathBuf>,
    cfg: Config,
    rng: RefCell<Rng>,
    stats: RefCell<ClientStats>,
    live: Cell<usize>,
    deadline: Instant,
    done: RefCell<Option<mpsc::Sender<u64>>>,
}

impl Client {
    /// Opens connections until `conns` are live, while there is time.
    fn maintain(self: &Rc<Self>, lp: &Loop) {
        while Instant::now() < self.deadline && self.live.get() < self.cfg.conns {
            self.live.set(self.live.get() + 1);
            self.stats.borrow_mut().connects += 1;
            let (requests, end, unix) = {
                let mut rng = self.rng.borrow_mut();
                let requests = 1 + rng.below(30) as usize;
                let unix = self
                    .unix
                    .as_ref()
                    .filter(|_| rng.below(100) < self.cfg.unix_pct);
                let end = match rng.below(100) {
                    0..=49 => End::Close,
                    50..=69 => End::HalfClose,
                    // A Unix socket cannot be reset: it closes instead.
                    70..=89 if unix.is_some() => End::Close,
                    70..=89 => End::Reset,
                    _ => End::ServerPanic,
                };
                (requests, end, unix)
            };
            let conn = ClientConn {
                client: self.clone(),
                unix: unix.is_some(),
                requests_left: requests,
                end,
                expect: VecDeque::new(),
                pending: None,
                sent: 0,
                echoed: 0,
                lost: false,
                closing: false,
                eof_sent: false,
                reset_scheduled: false,
                timers: Vec::new(),
            };
            let me = self.clone();
            let connecting = match unix {
                Some(path) => lp.connect_unix(path, conn).connected(),
                None => lp.connect_tcp(self.addr, conn).connected(),
            };
            let _ = connecting.add_both(move |r: Result<Transport, Failure>| {
                if let Err(f) = r {
                    // Failed before connection_made: no protocol call.
                    eprintln!("soak client: connect failed: {f}");
                    me.stats.borrow_mut().connect_failures += 1;
                    me.live.set(me.live.get() - 1);
                    let me2 = me.clone();
                    let _ = Loop::current().map(|lp| {
                        lp.call_later(Duration::from_millis(10), move |lp| me2.maintain(lp))
                    });
                }
                Ok::<_, Failure>(())
            });
        }
        if self.live.get() == 0 && Instant::now() >= self.deadline {
            if let Some(tx) = self.done.borrow_mut().take() {
                let _ = tx.send(self.stats.borrow().made);
            }
        }
    }
}

/// One request in flight.
struct Pending {
    resolver: deferloop::Resolver<usize>,
    watchdog: Handle,
    left: usize,
    size: usize,
}

struct ClientConn {
    client: Rc<Client>,
    /// Over a Unix socket (else TCP).
    unix: bool,
    requests_left: usize,
    end: End,
    /// Bytes sent and not yet echoed, in order.
    expect: VecDeque<u8>,
    pending: Option<Pending>,
    sent: u64,
    echoed: u64,
    lost: bool,
    closing: bool,
    eof_sent: bool,
    reset_scheduled: bool,
    /// Resume-reading and reset timers, cancelled if the connection goes first.
    timers: Vec<Handle>,
}

impl ClientConn {
    fn start_request(&mut self, t: &Transport) {
        let c = self.client.clone();
        if self.requests_left == 0 || Instant::now() >= c.deadline {
            self.finish(t);
            return;
        }
        self.requests_left -= 1;
        let last = self.requests_left == 0;
        let size = c.rng.borrow_mut().size(c.cfg.max_size);
        let payload: Vec<u8> = {
            let mut rng = c.rng.borrow_mut();
            (0..size).map(|_| (rng.next() % 255) as u8).collect()
        };
        // A Deferred per request: fired once, by the echo or by the loss.
        let (d, resolver) = Deferred::<usize>::new();
        let c2 = c.clone();
        let _ = d.add_both(move |_r: Result<usize, Failure>| {
            c2.stats.borrow_mut().deferreds_fired += 1;
            Ok::<_, Failure>(())
        });
        let t2 = t.clone();
        let c3 = c.clone();
        let watchdog = t
            .event_loop()
            .expect("the connection is open")
            .call_later(Duration::from_secs(30), move |_| {
                c3.stats.borrow_mut().watchdogs_fired += 1;
                eprintln!("soak client: a request stalled for 30 s");
                t2.abort();
            })
            .expect("loop open");
        {
            let mut s = c.stats.borrow_mut();
            s.deferreds += 1;
            s.watchdogs_set += 1;
            s.requests += 1;
            s.bytes_sent += size as u64;
        }
        self.sent += size as u64;
        self.expect.extend(&payload);
        self.pending = Some(Pending {
            resolver,
            watchdog,
            left: size,
            size,
        });
        t.write(&payload);
        if c.rng.borrow_mut().below(4) == 0 {
            // A slow reader for a few milliseconds: the server's echo backs up.
            t.pause_reading();
            let delay = Duration::from_micros(500 + c.rng.borrow_mut().below(10_000));
            let t4 = t.clone();
            let h = t
                .event_loop()
                .expect("the connection is open")
                .call_later(delay, move |_| t4.resume_reading());
            self.timers.extend(h.ok());
        }
        if last && self.end == End::HalfClose {
            self.eof_sent = true;
            t.write_eof();
        }
        if last && self.end == End::Reset {
            // Reset mid-request, up to a few milliseconds in.
            self.reset_scheduled = true;
            let delay = Duration::from_micros(c.rng.borrow_mut().below(3000));
            let t3 = t.clone();
            let h = t
                .event_loop()
                .expect("the connection is open")
                .call_later(delay, move |_| reset(&t3));
            self.timers.extend(h.ok());
        }
    }

    fn complete_request(&mut self) {
        let p = self.pending.take().expect("a request in flight");
        let cancelled = p.watchdog.cancel();
        // Fired with no borrow held: its callbacks count too.
        let twice = p.resolver.callback(p.size).is_err();
        let mut s = self.client.stats.borrow_mut();
        s.watchdogs_cancelled += u64::from(cancelled);
        s.fired_twice += u64::from(twice);
    }

    /// No request in flight, none to send (the last one is done, or time
    /// is up): end the connection as chosen.
    fn finish(&mut self, t: &Transport) {
        if std::mem::replace(&mut self.closing, true) {
            return;
        }
        match self.end {
            End::Close => t.close(),
            // The server flushes its echo and closes; then so do we.
            End::HalfClose if !self.eof_sent => {
                self.eof_sent = true;
                t.write_eof();
            }
            End::HalfClose => {}
            End::Reset if !self.reset_scheduled => reset(t),
            End::Reset => {}
            End::ServerPanic => t.write(&[PANIC_BYTE; PANIC_RUN]),
        }
    }
}

impl Protocol for ClientConn {
    fn connection_made(&mut self, t: &Transport) {
        let mut s = self.client.stats.borrow_mut();
        s.made += 1;
        s.unix_made += u64::from(self.unix);
        drop(s);
        self.start_request(t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let n = data.len().min(self.expect.len());
        let mut bad = (data.len() - n) as u64;
        for (&got, want) in data.iter().zip(self.expect.drain(..n)) {
            bad += u64::from(got != want);
        }
        self.echoed += data.len() as u64;
        {
            let mut s = self.client.stats.borrow_mut();
            s.bytes_echoed += data.len() as u64;
            s.mismatched += bad;
        }
        let mut rest = data.len();
        while rest > 0 {
            let Some(p) = self.pending.as_mut() else {
                break;
            };
            let k = rest.min(p.left);
            p.left -= k;
            rest -= k;
            if p.left == 0 {
                self.complete_request();
                self.start_request(t);
            }
        }
    }

    fn connection_lost(&mut self, _t: &Transport, reason: Option<Failure>) {
        let c = self.client.clone();
        let mut s = c.stats.borrow_mut();
        if std::mem::replace(&mut self.lost, true) {
            s.lost_twice += 1;
            return;
        }
        s.lost += 1;
        for h in self.timers.drain(..) {
            h.cancel();
        }
        s.endings[ENDS.iter().position(|e| *e == self.end).unwrap()] += 1;
        let clean = matches!(self.end, End::Close | End::HalfClose);
        if clean {
            s.clean_bytes_sent += self.sent;
            s.clean_bytes_echoed += self.echoed;
            if !self.expect.is_empty() || self.pending.is_some() {
                s.short_clean += 1;
            }
            if let Some(f) = &reason {
                s.unexpected_errors
                    .push(format!("{:?} connection lost with {f}", self.end));
            }
        }
        drop(s);
        if let Some(p) = self.pending.take() {
            let cancelled = p.watchdog.cancel();
            let why = reason.unwrap_or_else(|| Failure::msg("connection closed mid-request"));
            let twice = p.resolver.errback(why).is_err();
            let mut s = c.stats.borrow_mut();
            s.watchdogs_cancelled += u64::from(cancelled);
            s.fired_twice += u64::from(twice);
        }
        c.live.set(c.live.get() - 1);
        let _ = Loop::current().map(|lp| lp.call_soon(move |lp| c.maintain(lp)));
    }
}

fn client_thread(
    cfg: Config,
    (addr, unix): (SocketAddr, Option<PathBuf>),
    ready: mpsc::Sender<Remote>,
    done: mpsc::Sender<u64>,
) -> ClientStats {
    let ev = EventLoop::new().expect("client loop");
    let client = Rc::new(Client {
        addr,
        unix,
        rng: RefCell::new(Rng(cfg.seed | 1)),
        deadline: Instant::now() + Duration::from_secs_f64(cfg.secs),
        cfg,
        stats: RefCell::default(),
        live: Cell::new(0),
        done: RefCell::new(Some(done)),
    });
    let c2 = client.clone();
    ev.set_exception_handler(move |_: &Loop, cx: &ExceptionContext<'_>| {
        c2.stats.borrow_mut().handler_calls += 1;
        eprintln!(
            "soak client: {} {:?}",
            cx.message,
            cx.failure.map(|f| f.to_string())
        );
    });
    ready.send(ev.remote()).unwrap();
    client.maintain(&ev);
    ev.run().expect("client run");
    let mut stats = client.stats.borrow().clone();
    stats.timers_left = ev.timer_count();
    stats.sources_left = ev.io_source_count();
    drop(ev);
    stats
}

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

// ---- daemons: signals and child processes -----------------------------------

/// What the daemon loop saw: signals heard, children spawned and how each ended.
#[derive(Debug, Default, Clone)]
pub struct DaemonStats {
    pub signals_sent: u64,
    pub signals_heard: u64,
    pub spawned: u64,
    pub exited: u64,
    pub killed: u64,
    pub output_mismatches: u64,
    pub spawn_failures: u64,
    /// Children found unreaped after the loop closed (zombies or live).
    pub left_behind: u64,
}

/// A child's protocol: collects stdout, checks it on exit.
struct Kid {
    expect: Vec<u8>,
    got: Vec<u8>,
    stats: Rc<RefCell<DaemonStats>>,
}

impl deferloop::process::ProcessProtocol for Kid {
    fn out_received(&mut self, _: &deferloop::process::Process, data: &[u8]) {
        self.got.extend_from_slice(data);
    }
    fn process_exited(
        &mut self,
        _: &deferloop::process::Process,
        status: Result<std::process::ExitStatus, deferloop::Failure>,
    ) {
        let mut st = self.stats.borrow_mut();
        if status.is_ok_and(|s| s.success()) {
            st.exited += 1;
            if self.got != self.expect {
                st.output_mismatches += 1;
            }
        } else {
            st.killed += 1;
        }
    }
}

/// Spawns a child of one of three kinds: `echo`, `cat` fed through stdin,
/// or `sleep` killed soon after.
fn spawn_kid(lp: &Loop, stats: &Rc<RefCell<DaemonStats>>, n: u64) {
    let text = format!("kid {n}\n");
    let (mut cmd, expect, feed, kill) = match n % 3 {
        0 => {
            let mut c = std::process::Command::new("echo");
            c.arg(format!("kid {n}"));
            (c, text.into_bytes(), None, false)
        }
        1 => (
            std::process::Command::new("cat"),
            text.clone().into_bytes(),
            Some(text),
            false,
        ),
        _ => {
            let mut c = std::process::Command::new("sleep");
            c.arg("5");
            (c, Vec::new(), None, true)
        }
    };
    let kid = Kid {
        expect,
        got: Vec::new(),
        stats: stats.clone(),
    };
    let stats2 = stats.clone();
    stats.borrow_mut().spawned += 1;
    match lp.spawn_process(&mut cmd, kid) {
        Ok(p) => {
            if let Some(t) = feed {
                p.write(t.as_bytes());
                p.close_stdin();
            }
            if kill {
                let _ = p.kill();
            }
        }
        Err(_) => {
            let mut st = stats2.borrow_mut();
            st.spawned -= 1;
            st.spawn_failures += 1;
        }
    }
}

/// Spawns a child every 20 ms until `stop`, then stops the loop.
fn tick(lp: &Loop, stop: Arc<AtomicBool>, stats: Rc<RefCell<DaemonStats>>, n: u64) {
    if stop.load(Relaxed) {
        lp.stop();
        return;
    }
    spawn_kid(lp, &stats, n);
    let _ = lp.call_later(Duration::from_millis(20), move |lp| {
        tick(lp, stop, stats, n + 1)
    });
}

/// A loop with a SIGUSR1 handler that keeps a few children running until
/// `stop`; then closes (killing and reaping what is left).
fn daemons_thread(stop: Arc<AtomicBool>) -> DaemonStats {
    let ev = EventLoop::new().expect("daemon loop");
    let stats = Rc::new(RefCell::new(DaemonStats::default()));
    let s2 = stats.clone();
    let handler = ev
        .add_signal_handler(deferloop::Signal::USR1, move |_, _| {
            s2.borrow_mut().signals_heard += 1;
        })
        .expect("SIGUSR1 handler");
    tick(&ev, stop, stats.clone(), 0);
    let _ = ev.run();
    handler.remove();
    // Let the children spawned last finish, then close: the rest are killed.
    let settle = ev.call_later(Duration::from_millis(300), |lp| lp.stop());
    let _ = ev.run();
    drop(settle);
    ev.close().expect("close the daemon loop");
    drop(ev);
    let out = stats.borrow().clone();
    out
}

/// Reaps whatever children the process still has: each one is a zombie or
/// a child left running by someone (counted, then killed and reaped).
fn reap_leftovers() -> u64 {
    let mut left = 0;
    loop {
        // SAFETY: waitpid(-1, WNOHANG) with a null status pointer: asks for
        // any exited child without blocking.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r > 0 {
            left += 1; // a zombie
        } else if r == 0 {
            // A live child: nobody reaps it. Count it and stop looking.
            return left + 1;
        } else {
            return left; // ECHILD: no child at all
        }
    }
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
