//! The loop's counters as Prometheus text, printed on a timer: what an
//! exporter would serve on `/metrics`. An echo server and a client that
//! keeps it busy give the counters something to count.
//!
//! Run: `cargo run --example stats_exporter -- [INTERVAL_MS] [EXPORTS]`
//! (every 1000 ms, 3 times, by default; then it exits).

use deferloop::net::{Protocol, Stream, Transport};
use deferloop::{EventLoop, Failure, LoopingCall, Stats};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

/// `stats` in the Prometheus text format, each metric named `deferloop_*`.
pub fn prometheus(stats: &Stats) -> String {
    let metrics: [(&str, &str, &str, u64); 10] = [
        (
            "connections_open",
            "gauge",
            "Stream connections open now.",
            stats.connections_open,
        ),
        (
            "connections_opened_total",
            "counter",
            "Stream connections made.",
            stats.connections_opened,
        ),
        (
            "bytes_received_total",
            "counter",
            "Bytes read from stream connections.",
            stats.bytes_received,
        ),
        (
            "bytes_sent_total",
            "counter",
            "Bytes written to stream connections.",
            stats.bytes_sent,
        ),
        ("timers", "gauge", "Timers waiting.", stats.timers),
        (
            "ready_callbacks",
            "gauge",
            "Callbacks in the ready queue.",
            stats.ready,
        ),
        (
            "io_sources",
            "gauge",
            "Registered I/O sources.",
            stats.io_sources,
        ),
        (
            "callbacks_run_total",
            "counter",
            "Callbacks run.",
            stats.callbacks_run,
        ),
        (
            "slow_callbacks_total",
            "counter",
            "Callbacks at or over the slow threshold (while timed).",
            stats.slow_callbacks,
        ),
        ("turns_total", "counter", "Loop turns.", stats.turns),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in metrics {
        let _ = writeln!(out, "# HELP deferloop_{name} {help}");
        let _ = writeln!(out, "# TYPE deferloop_{name} {kind}");
        let _ = writeln!(out, "deferloop_{name} {value}");
    }
    out
}

struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

/// Writes a line, reads the echo, again, until the stream ends (the loop
/// closing ends it too: nothing to report then).
fn chatter(s: Stream) {
    s.write(b"ping\n");
    s.clone()
        .read_line()
        .add_both(move |r: Result<String, Failure>| {
            if r.is_ok() {
                chatter(s);
            }
            Ok::<(), Failure>(())
        })
        .detach();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut args = std::env::args().skip(1);
    let interval = Duration::from_millis(args.next().map_or(Ok(1000), |a| a.parse())?);
    let exports: u32 = args.next().map_or(Ok(3), |a| a.parse())?;

    let ev = EventLoop::new()?;
    // Slow callbacks are counted while callbacks are timed (debug mode).
    ev.set_debug(true);
    let server = ev.listen_tcp("127.0.0.1:0".parse()?, || Echo)?;
    let port = server
        .local_addr()
        .as_inet()
        .ok_or("not an inet address")?
        .port();
    chatter(Stream::connect(&ev, ("localhost", port)));

    let mut left = exports;
    let export = LoopingCall::with_handle(&ev, move |lc| {
        let lp = deferloop::Loop::current()?;
        print!("{}", prometheus(&lp.stats()));
        std::io::stdout().flush()?;
        left = left.saturating_sub(1);
        if left == 0 {
            lc.stop()?;
        }
        Ok(())
    });
    ev.run_until(export.start_later(interval)?)?;
    Ok(())
}
