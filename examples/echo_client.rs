//! A TCP echo client: sends `count` messages of `size` bytes, one at a time,
//! checks every echo, and prints the round trips per second.
//!
//! Run (with `echo_server` listening on 127.0.0.1:7000):
//! `cargo run --release --example echo_client -- 127.0.0.1:7000 [size=1024] [count=10000]`
//!
//! Bad arguments, a refused connect, or a connection that ends early: one line
//! on stderr, exit status 1.

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::Cell;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

/// Sends a message, waits for all of it to come back, sends the next.
pub struct Pinger {
    msg: Vec<u8>,
    got: usize,
    left: u64,
    done: Rc<Cell<Option<Result<u64, String>>>>,
    sent: u64,
}

impl Pinger {
    pub fn new(size: usize, count: u64, done: Rc<Cell<Option<Result<u64, String>>>>) -> Pinger {
        let msg = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
        Pinger {
            msg,
            got: 0,
            left: count,
            done,
            sent: 0,
        }
    }

    fn send(&mut self, t: &Transport) {
        if self.left == 0 {
            t.close();
            return;
        }
        self.left -= 1;
        self.sent += 1;
        self.got = 0;
        t.write(&self.msg);
    }
}

impl Protocol for Pinger {
    fn connection_made(&mut self, t: &Transport) {
        self.send(t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if !self.msg[self.got..].starts_with(data) {
            t.abort_with(Failure::msg("the echo differs from what was sent"));
            return;
        }
        self.got += data.len();
        if self.got == self.msg.len() {
            self.send(t);
        }
    }

    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        let outcome = match reason {
            None if self.left == 0 => Ok(self.sent),
            None => Err("the server closed early".to_owned()),
            Some(f) => Err(f.to_string()),
        };
        self.done.set(Some(outcome));
        if let Some(lp) = t.event_loop() {
            lp.stop();
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub addr: SocketAddr,
    pub size: usize,
    pub count: u64,
}

const USAGE: &str = "usage: echo_client ADDR [SIZE=1024] [COUNT=10000]";

/// Parses `ADDR [SIZE] [COUNT]`; the error is one line, ending with the usage.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut args = args.into_iter();
    let addr = args.next().ok_or_else(|| format!("no address; {USAGE}"))?;
    let addr = addr
        .parse()
        .map_err(|e| format!("address {addr:?}: {e}; {USAGE}"))?;
    // Both at least 1: an empty message would never be echoed, so never end.
    let mut positive = |name: &str, default: u64| match args.next() {
        None => Ok(default),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name} {s:?}: not a positive integer; {USAGE}")),
        },
    };
    let size = positive("size", 1024)?;
    let size = usize::try_from(size).map_err(|_| format!("size {size}: too large"))?;
    let count = positive("count", 10_000)?;
    match args.next() {
        Some(extra) => Err(format!("unexpected argument {extra:?}; {USAGE}")),
        None => Ok(Args { addr, size, count }),
    }
}

/// Runs the client; returns the round trips made. Every error is one message:
/// the connect failure, or why the connection ended early.
pub fn run(args: &Args) -> Result<u64, Box<dyn std::error::Error>> {
    let ev = EventLoop::new()?;
    let done = Rc::new(Cell::new(None));
    let connected = ev.connect_tcp(args.addr, Pinger::new(args.size, args.count, done.clone()));
    // The failure already names the address: no need to say it again.
    ev.run_until(connected)?;
    if let Some(outcome) = done.take() {
        return Ok(outcome?);
    }
    ev.run()?; // until the last echo: `connection_lost` stops the loop
    Ok(done.take().expect("the connection ended")?)
}

#[allow(dead_code)]
fn main() -> ExitCode {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let t0 = Instant::now();
    let outcome = parse_args(std::env::args().skip(1))
        .map_err(Box::<dyn std::error::Error>::from)
        .and_then(|a| Ok((run(&a)?, a.size)));
    match outcome {
        Ok((n, size)) => {
            let secs = t0.elapsed().as_secs_f64();
            let rate = n as f64 / secs;
            println!("{n} round trips of {size} bytes in {secs:.3} s: {rate:.0} per second");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echo_client: {e:#}"); // `:#`: with the failure's causes
            ExitCode::FAILURE
        }
    }
}
