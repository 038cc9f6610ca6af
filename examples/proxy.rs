//! A TCP proxy: relays bytes both ways between each client and the target,
//! with backpressure in both directions — while one side's write buffer is
//! above its high-water mark, the other side is not read — and half-closes
//! passed through. Prints the address it bound as its first line.
//!
//! Run: `cargo run --example proxy -- 127.0.0.1:7002 127.0.0.1:7000`
//! (listen address, default `127.0.0.1:0`; target address, default: an echo
//! server started in the same process, so the example runs on its own).

use deferloop::net::{relay, Listener, Stream};
use deferloop::{EventLoop, Failure};
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// How long the target may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a side may take to flush once the other side is gone.
pub const LINGER: Duration = Duration::from_secs(5);

/// Listens on `addr`, relaying every connection to `target`. `relay` reads
/// one side only while the other takes what it is sent, passes half-closes
/// on, and closes both sides when both directions are done or one fails: a
/// connect still pending when the client goes (or past `CONNECT_TIMEOUT`) is
/// abandoned, a side that is up is flushed within `LINGER`.
pub fn start(
    ev: &EventLoop,
    addr: SocketAddr,
    target: SocketAddr,
) -> Result<Listener, deferloop::Error> {
    start_with(ev, addr, target, CONNECT_TIMEOUT, LINGER)
}

/// [`start`] with other timeouts than `CONNECT_TIMEOUT` and `LINGER`.
pub fn start_with(
    ev: &EventLoop,
    addr: SocketAddr,
    target: SocketAddr,
    connect_timeout: Duration,
    linger: Duration,
) -> Result<Listener, deferloop::Error> {
    let lp = ev.to_loop();
    Stream::listen_tcp(ev, addr, move |client| {
        let upstream = Stream::connect(&lp, target);
        client.set_linger(linger);
        upstream.set_linger(linger); // applies once it is up
                                     // The timeout cancels the connect, which fails the relay.
        upstream
            .connected()
            .add_timeout(connect_timeout, &lp)
            .add_both(|_| Ok::<_, Failure>(()))
            .detach();
        relay(&client, &upstream)
            .add_both(|_| Ok::<_, Failure>(()))
            .detach();
    })
}

#[path = "echo_server.rs"]
#[allow(dead_code)]
mod echo_server;

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let ev = EventLoop::new()?;
    let target = match args.next() {
        Some(t) => t.parse()?,
        None => {
            let echo = echo_server::start(&ev, "127.0.0.1:0".parse()?)?;
            let at = echo.local_addr().as_inet().expect("a TCP address");
            eprintln!("no target given: relaying to an echo server at {at}");
            at
        }
    };
    let listener = start(&ev, addr.parse()?, target)?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
    Ok(())
}
