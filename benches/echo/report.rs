//! The markdown report of a run: the method, each size's table and targets,
//! the request/response table, and the chart.

use crate::common::{self, svg, Better};
use crate::contenders::*;
use crate::rr;
use std::time::Duration;

/// What one sample of one server measured.
pub(crate) struct Sample {
    /// The round it was taken in: ratios pair samples of the same round.
    pub(crate) round: usize,
    pub(crate) rps: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    /// Server CPU (user + sys) per request, µs.
    pub(crate) cpu_us: f64,
    /// Share of one core the server used.
    pub(crate) cpu_use: f64,
    pub(crate) allocs: Option<f64>,
    /// Times the server's loop slept (blocked in its poll), per request.
    pub(crate) sleeps: f64,
}

/// How a run samples: rounds, and how long each sample measures and warms up.
pub(crate) struct Plan {
    pub(crate) rounds: usize,
    pub(crate) measure: Duration,
    pub(crate) py_rounds: usize,
    pub(crate) py_measure: Duration,
    pub(crate) warmup: Duration,
}

/// A message size as the tables name it ("1 KiB").
pub(crate) fn kib(size: usize) -> String {
    format!("{} KiB", size / 1024)
}

pub(crate) fn print_method(
    plan: &Plan,
    server_cpu: Option<usize>,
    client_cpu: Option<usize>,
    python: bool,
) {
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
pub(crate) fn paired_target(
    what: &str,
    (r, lo, hi): (f64, f64, f64),
    better: Better,
    threshold: f64,
) {
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
pub(crate) fn report_size(labels: &[&str], size: usize, conns: usize, per: &[Vec<Sample>]) {
    let find = |label: &str| labels.iter().position(|l| *l == label);
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
    for (i, &label) in labels.iter().enumerate() {
        let Some((r, rlo, rhi)) = stats(i, &|s| s.rps) else {
            println!("| {} | failed | | | | | | | | | | |", label);
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
            label,
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
        common::record_value(&section_rps, label, "req/s", Better::Higher, r, rlo, rhi);
        common::record_value(&section_cpu, label, "µs/req", Better::Lower, c, clo, chi);
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
pub(crate) fn report_rr(labels: &[&str], conns: usize, per: &[Vec<Sample>]) {
    let find = |label: &str| labels.iter().position(|l| *l == label);
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
    for (i, &label) in labels.iter().enumerate() {
        let Some((r, rlo, rhi)) = stats(i, &|s| s.rps) else {
            println!("| {} | failed | | | | | | | | |", label);
            continue;
        };
        let (c, clo, chi) = stats(i, &|s| s.cpu_us).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let median = |f: &dyn Fn(&Sample) -> f64| stats(i, f).map_or(f64::NAN, |x| x.0);
        let vs = raw
            .and_then(|j| paired(i, j, &|s| s.cpu_us))
            .map_or("n/a".into(), |x| format!("{:.2}×", x.0));
        println!(
            "| {} | {r:.0} | {rlo:.0}–{rhi:.0} | {:.3} | {:.3} | {c:.2} | {clo:.2}–{chi:.2} | {vs} | {:.0} % | {:.3} |",
            label,
            median(&|s| s.p50),
            median(&|s| s.p99),
            median(&|s| s.cpu_use) * 100.0,
            median(&|s| s.allocs.unwrap_or(f64::NAN)),
        );
        common::record_value(
            "request/response: server CPU per request",
            label,
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
pub(crate) type Paired<'a> =
    dyn Fn(usize, &str, &dyn Fn(&Sample) -> f64) -> Option<(f64, f64, f64)> + 'a;

/// The embedding target, and the many-loops comparison.
pub(crate) fn report_embedding_and_loops(
    size: usize,
    find: &dyn Fn(&str) -> Option<usize>,
    paired: &Paired,
) {
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

pub(crate) fn not_measured(what: &str) {
    println!("\n- Target: {what}: not measured (a contender has no sample): **not met**");
    common::record(&["target", what, "n/a", "n/a", "**not met**"]);
}

/// Draws every table recorded in `$DEFERLOOP_BENCH_RESULTS` into `out`.
pub(crate) fn write_chart(out: &str) {
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
