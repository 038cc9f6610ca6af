//! A TCP echo client: sends `count` messages of `size` bytes, one at a time,
//! checks every echo, and prints the round trips per second.
//!
//! Run (with `echo_server` listening on 127.0.0.1:7000):
//! `cargo run --release --example echo_client -- 127.0.0.1:7000 [size=1024] [count=10000]`

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::Cell;
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
        t.event_loop().stop();
    }
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .ok_or("usage: echo_client ADDR [size] [count]")?;
    let size: usize = args.next().map_or(Ok(1024), |s| s.parse())?;
    let count: u64 = args.next().map_or(Ok(10_000), |s| s.parse())?;
    let ev = EventLoop::new()?;
    let done = Rc::new(Cell::new(None));
    let t0 = Instant::now();
    let connected = ev.connect_tcp(addr.parse()?, Pinger::new(size, count, done.clone()));
    ev.run_until(connected)
        .map_err(|f| format!("connect to {addr} failed: {f}"))?;
    let outcome = match done.take() {
        Some(o) => o,
        None => {
            ev.run()?; // until the last echo: `connection_lost` stops the loop
            done.take().expect("the connection ended")
        }
    };
    let n = outcome?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{n} round trips of {size} bytes in {secs:.3} s: {:.0} per second",
        n as f64 / secs
    );
    Ok(())
}
