//! Fan-out, callback style: ask three backends, take the first success, give
//! up after a timeout, report every failure. The twin of `fan_out_tokio.rs`.
//!
//! Run: `cargo run --example compare_fan_out_deferloop`

use deferloop::deferred::Cancelled;
use deferloop::net::Stream;
use deferloop::{race, Deferred, EventLoop, Failure, Loop};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "backends.rs"]
mod backends;

/// One backend's answer: the first line it sends back. However it ends
/// (answer, failure, cancel), the connection goes.
fn ask(lp: &Loop, addr: SocketAddr) -> Deferred<String> {
    let s = Stream::connect(lp, addr);
    s.write(b"what colour?\n");
    s.read_line().add_both(move |r: Result<String, Failure>| {
        s.abort();
        r
    })
}

/// The first answer as `(backend index, answer)`; every failure is printed as
/// it happens; losers are cancelled once there is a winner or the time is up.
pub fn fan_out(lp: &Loop, backends: &[SocketAddr], timeout: Duration) -> Deferred<(usize, String)> {
    let asks: Vec<_> = backends
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            ask(lp, addr).add_errback(move |f| {
                if !f.check::<Cancelled>() {
                    println!("backend {i} failed: {f}");
                }
                Err(f)
            })
        })
        .collect();
    race(asks).add_timeout(timeout, lp)
}

#[allow(dead_code)]
fn main() -> Result<(), deferloop::Error> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let ev = EventLoop::new()?;
    for (addrs, timeout) in backends::scenarios() {
        match ev.run_until(fan_out(&ev, &addrs, timeout)) {
            Ok((i, answer)) => println!("answer from backend {i}: {answer}"),
            Err(f) => println!("no answer: {f:#}"),
        }
    }
    Ok(())
}
