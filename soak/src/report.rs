//! What a soak runs (`Config`) and what it found (`Report`, with its
//! violations and its printed form).

use super::*;

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
pub(crate) enum End {
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

pub(crate) const ENDS: [End; 4] = [End::Close, End::HalfClose, End::Reset, End::ServerPanic];

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

pub(crate) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

pub(crate) fn gib(b: u64) -> String {
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
