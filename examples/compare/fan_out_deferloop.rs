//! Fan-out, callback style: ask three backends, take the first success, give
//! up after a timeout, report every failure. The twin of `fan_out_tokio.rs`.
//!
//! Run: `cargo run --example compare_fan_out_deferloop`

use deferloop::deferred::Cancelled;
use deferloop::net::{Protocol, Transport};
use deferloop::{race, Deferred, EventLoop, Failure, Loop, Resolver};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "backends.rs"]
mod backends;

/// Sends the question, fires `answer` with the first line that comes back.
struct AskOnce {
    answer: Resolver<String>,
    line: Vec<u8>,
}

impl Protocol for AskOnce {
    fn connection_made(&mut self, t: &Transport) {
        t.write(b"what colour?\n");
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.line.extend_from_slice(data);
        if let Some(end) = self.line.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&self.line[..end]).into();
            self.answer.callback_if_pending(line);
            t.close();
        }
    }

    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        // Without an answer this is a failure; after one (or a cancel) the
        // Deferred has fired already, and this does nothing.
        let why = reason.unwrap_or_else(|| Failure::msg("closed without an answer"));
        self.answer.errback_if_pending(why);
    }
}

/// One backend's answer. Cancelling it closes the connection.
fn ask(lp: &Loop, addr: SocketAddr) -> Deferred<String> {
    let (answer, r) = Deferred::new();
    let conn = lp.connect_tcp(
        addr,
        AskOnce {
            answer: r,
            line: Vec::new(),
        },
    );
    let t = conn.transport().clone();
    // However it ends (answer, failure, cancel), the connection goes.
    conn.connected()
        .add_callback(move |_| answer)
        .add_both(move |r: Result<String, Failure>| {
            t.abort();
            r
        })
}

/// The first answer as `(backend index, answer)`; every failure is printed as
/// it happens; losers are cancelled once there is a winner or the time is up.
pub fn fan_out(lp: &Loop, backends: &[SocketAddr], timeout: Duration) -> Deferred<(usize, String)> {
    let asks = backends
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
    let ev = EventLoop::new()?;
    for (addrs, timeout) in backends::scenarios() {
        match ev.run_until(fan_out(&ev, &addrs, timeout)) {
            Ok((i, answer)) => println!("answer from backend {i}: {answer}"),
            Err(f) => println!("no answer: {f}"),
        }
    }
    Ok(())
}
