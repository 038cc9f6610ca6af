//! A process supervisor: runs a command, restarts it with back-off whenever
//! it exits, and stops cleanly on SIGTERM or SIGINT — it sends the child
//! SIGTERM, waits for it (killing it after the stop timeout), and exits 0
//! with no child left behind. A second signal stops it at once.
//!
//! The supervision is one [`loop_fn`]: each step runs the child once and
//! waits, for its exit or a signal, then for the back-off or a signal. The
//! state it carries is the next delay; the signals arrive on a
//! [`DeferredQueue`], raced against each wait with [`race_either`] (the
//! loser, a timer or a queue getter, is cancelled).
//!
//! Run: `cargo run --example supervisor -- [--stop-timeout-ms N] CMD [ARGS...]`,
//! e.g. `cargo run --example supervisor -- sh -c 'date; sleep 1; exit 1'`.
//! Prints `started PID` for each start, on stdout.

use deferloop::deferred::{defer_later, fail, loop_fn, race_either, DeferredQueue, Either};
use deferloop::process::{Process, ProcessProtocol};
use deferloop::{succeed, Deferred, EventLoop, Loop, Signal};
use std::io::Write;
use std::ops::ControlFlow::{self, Break, Continue};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The first restart delay; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A child that ran this long resets the back-off.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Passes the child's output through as it comes.
struct PassThrough;

impl ProcessProtocol for PassThrough {
    fn out_received(&mut self, _: &Process, data: &[u8]) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(data);
        let _ = out.flush();
    }
    fn err_received(&mut self, _: &Process, data: &[u8]) {
        let _ = std::io::stderr().write_all(data);
    }
}

/// What one step of the supervision ends with: the next restart delay
/// (`Continue`), or stopped (`Break`).
type Step = ControlFlow<(), Duration>;

/// The next signal put on `signals`.
fn next_signal(signals: &DeferredQueue<Signal>) -> Deferred<Signal> {
    signals.get().unwrap_or_else(fail) // the backlog is unbounded
}

/// Runs `argv` (program, then arguments) until a signal arrives on
/// `signals`, restarting it with back-off whenever it exits; fires once it
/// has stopped and its child is gone. Fails if the command cannot start the
/// first time (a later failure to start is retried like an exit).
pub fn supervise(
    lp: &Loop,
    argv: Vec<String>,
    signals: DeferredQueue<Signal>,
    stop_timeout: Duration,
) -> Deferred<()> {
    let (lp, mut ever_started) = (lp.clone(), false);
    loop_fn(FIRST_BACKOFF, move |delay| {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let first = !std::mem::replace(&mut ever_started, true);
        match lp.spawn_process(&mut cmd, PassThrough) {
            Ok(p) => run_once(&lp, &p, delay, &signals, stop_timeout, argv[0].clone()),
            Err(e) if first => fail(e),
            Err(e) => {
                eprintln!("supervisor: {e}");
                back_off(&lp, delay, &signals)
            }
        }
    })
}

/// The child's life: until it exits (then the back-off), or until a signal
/// (then it is stopped).
fn run_once(
    lp: &Loop,
    p: &Process,
    delay: Duration,
    signals: &DeferredQueue<Signal>,
    stop_timeout: Duration,
    name: String,
) -> Deferred<Step> {
    println!("started {}", p.pid());
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    let (lp, p, signals) = (lp.clone(), p.clone(), signals.clone());
    race_either(p.wait(), next_signal(&signals)).add_callback(move |first| match first {
        Either::Left(status) => {
            let delay = if started.elapsed() >= STABLE_AFTER {
                FIRST_BACKOFF
            } else {
                delay
            };
            eprintln!("supervisor: {name} exited ({status}); restarting in {delay:?}");
            back_off(&lp, delay, &signals)
        }
        Either::Right(_) => stop(&lp, &p, &signals, stop_timeout).map(Break),
    })
}

/// Waits `delay`, then runs the child again with the next delay, doubled;
/// a signal during the wait stops the supervision.
fn back_off(lp: &Loop, delay: Duration, signals: &DeferredQueue<Signal>) -> Deferred<Step> {
    let next = (delay * 2).min(MAX_BACKOFF);
    race_either(defer_later(lp, delay, || Ok(())), next_signal(signals)).map(move |first| {
        match first {
            Either::Left(()) => Continue(next),
            Either::Right(_) => Break(()),
        }
    })
}

/// SIGTERM, then SIGKILL after `stop_timeout` or at a second signal; fires
/// once the child has exited.
fn stop(
    lp: &Loop,
    p: &Process,
    signals: &DeferredQueue<Signal>,
    stop_timeout: Duration,
) -> Deferred<()> {
    let _ = p.signal(Signal::TERM);
    let too_long = race_either(
        defer_later(lp, stop_timeout, || Ok(())),
        next_signal(signals),
    );
    let p = p.clone();
    race_either(p.wait(), too_long).add_callback(move |first| match first {
        Either::Left(_) => succeed(()),
        Either::Right(_) => {
            let _ = p.kill();
            p.wait().map(drop)
        }
    })
}

/// `[--stop-timeout-ms N] CMD [ARGS...]`.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = args.into_iter().collect();
    let mut stop_timeout = Duration::from_secs(5);
    if args.first().map(String::as_str) == Some("--stop-timeout-ms") {
        let ms = args.get(1).ok_or("--stop-timeout-ms needs a value")?;
        stop_timeout = Duration::from_millis(
            ms.parse()
                .map_err(|e| format!("--stop-timeout-ms {ms:?}: {e}"))?,
        );
        args.drain(..2);
    }
    if args.is_empty() {
        return Err("usage: supervisor [--stop-timeout-ms N] CMD [ARGS...]".into());
    }
    let ev = EventLoop::new()?;
    let signals = DeferredQueue::unbounded();
    for sig in [Signal::INT, Signal::TERM] {
        let q = signals.clone();
        ev.add_signal_handler(sig, move |_, sig| {
            let _ = q.put(sig);
        })?;
    }
    ev.run_until(supervise(&ev, args, signals, stop_timeout))?;
    // Closing the loop kills and reaps a child still running.
    ev.close()?;
    Ok(())
}

#[allow(dead_code)]
fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}
