//! A transaction over a line protocol, callback style: connect,
//! authenticate, begin, N writes each checked, commit. A conflict retries
//! the whole transaction with back-off, a timeout at any step aborts it, and
//! every failure names its step. The twin of `transaction_tokio.rs`.
//!
//! Run: `cargo run --example compare_transaction_deferloop`

use deferloop::deferred::{loop_fn, retry, Backoff, Jitter, RetryPolicy};
use deferloop::net::Stream;
use deferloop::{succeed, Deferred, EventLoop, Failure, Loop};
use std::net::SocketAddr;
use std::ops::ControlFlow::{Break, Continue};
use std::time::Duration;

#[path = "txn_backend.rs"]
mod txn_backend;

pub const STEP_TIMEOUT: Duration = Duration::from_millis(200);
const ATTEMPTS: u32 = 3;
const BACKOFF: Duration = Duration::from_millis(20);

/// A step went wrong: which one, and how.
#[derive(Debug)]
pub struct StepFailed {
    pub step: String,
    pub why: String,
}

impl std::fmt::Display for StepFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.why)
    }
}

impl std::error::Error for StepFailed {}

/// `d` within the step timeout; a failure is the step's.
fn step<T: 'static>(lp: &Loop, step: String, d: Deferred<T>) -> Deferred<T> {
    d.add_timeout(STEP_TIMEOUT, lp).add_errback(move |f| {
        let why = f.to_string();
        Err(Failure::new(StepFailed { step, why }))
    })
}

/// Sends `line`; the step succeeds if the answer is `OK`.
fn ask(lp: &Loop, s: &Stream, name: String, line: String) -> Deferred<()> {
    s.write(format!("{line}\n").as_bytes());
    step(lp, name.clone(), s.read_line()).add_callback(move |why| match why.as_str() {
        "OK" => Ok(()),
        _ => Err(Failure::new(StepFailed { step: name, why })),
    })
}

/// One attempt: every step in order, on a new connection, closed however
/// it ends.
fn attempt(lp: &Loop, addr: SocketAddr, token: &str, writes: &[(String, String)]) -> Deferred<()> {
    let mut steps = vec![
        ("auth".into(), format!("AUTH {token}")),
        ("begin".into(), "BEGIN".into()),
    ];
    let sets = writes.iter().enumerate();
    steps.extend(sets.map(|(i, (k, v))| (format!("write {i}"), format!("SET {k} {v}"))));
    steps.push(("commit".into(), "COMMIT".into()));
    let (lp, s) = (lp.clone(), Stream::connect(lp, addr));
    let conn = s.clone();
    step(&lp, "connect".into(), s.connected())
        .add_callback(move |()| {
            loop_fn(steps.into_iter(), move |mut steps| match steps.next() {
                Some((name, line)) => ask(&lp, &conn, name, line).map(|()| Continue(steps)),
                None => succeed(Break(())),
            })
        })
        .finally(move || {
            s.close();
            Ok(())
        })
}

/// The transaction, retried on a conflict with back-off; fires with the
/// number of attempts it took.
pub fn transact(
    lp: &Loop,
    addr: SocketAddr,
    token: &str,
    writes: Vec<(String, String)>,
) -> Deferred<u32> {
    let policy = RetryPolicy::new()
        .attempts(ATTEMPTS)
        .backoff(Backoff::exponential(BACKOFF).jitter(Jitter::None))
        .retry_if(|f| {
            f.downcast_ref::<StepFailed>()
                .is_some_and(|e| e.why == "CONFLICT")
        })
        .reraise();
    let (lp2, token) = (lp.clone(), token.to_owned());
    retry(lp, policy, move |n| {
        attempt(&lp2, addr, &token, &writes).map(move |()| n + 1)
    })
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let ev = EventLoop::new()?;
    for (name, script) in txn_backend::scenarios() {
        let (addr, _) = txn_backend::spawn(script);
        match ev.run_until(transact(&ev, addr, "secret", txn_backend::writes())) {
            Ok(n) => println!("{name}: committed after {n} attempt(s)"),
            Err(f) => println!("{name}: {f}"),
        }
    }
    Ok(())
}
