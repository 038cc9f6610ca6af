//! A TCP echo server: every byte of every connection goes back until the peer
//! closes. Prints the address it bound as its first line.
//!
//! On SIGTERM or SIGINT it stops gracefully: it stops accepting, lets the open
//! connections finish for up to 10 s (then closes them), and exits 0. A
//! second signal makes it stop at once.
//!
//! Run: `cargo run --release --example echo_server -- 127.0.0.1:7000`
//! (the address defaults to `127.0.0.1:0`, any free port).

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::shutdown::{Phase, Shutdown};
use deferloop::EventLoop;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Echoes, and stops reading while the peer is not reading its echo (so a
/// peer that only sends cannot grow our buffer without bound).
pub struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

/// Listens on `addr` with an [`Echo`] per connection.
pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, || Echo)
}

/// How long open connections get to finish after SIGTERM.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// `[ADDR]`: serves until SIGTERM or SIGINT, then drains and returns.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args = args.into_iter();
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}; usage: echo_server [ADDR]").into());
    }
    let addr: SocketAddr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
    let ev = EventLoop::new()?;
    let listener = start(&ev, addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    let shutdown = Shutdown::new(&ev);
    shutdown.add_listener(&listener);
    shutdown.set_deadline(Phase::During, DRAIN_DEADLINE);
    shutdown.stop_on_signals()?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
    if shutdown.was_forced() {
        eprintln!("echo_server: stopped at once (second signal)");
    }
    Ok(())
}

#[allow(dead_code)]
fn main() -> ExitCode {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo_server: {e}");
            ExitCode::FAILURE
        }
    }
}
