//! TCP proxy with backpressure both ways, callback style. The twin of
//! `proxy_tokio.rs`.
//!
//! Run: `cargo run --example compare_proxy_deferloop -- 127.0.0.1:7002 127.0.0.1:7000`

use deferloop::net::{relay, Listener, Stream};
use deferloop::{EventLoop, Failure};
use std::net::SocketAddr;

/// Relays each client to `target` until both directions are done. `relay`
/// reads one side only while the other takes what it is sent (backpressure),
/// passes each side's EOF on as a half-close, and closes both at the end.
pub fn start(
    ev: &EventLoop,
    addr: SocketAddr,
    target: SocketAddr,
) -> Result<Listener, deferloop::Error> {
    let lp = ev.to_loop();
    Stream::listen_tcp(ev, addr, move |client| {
        let upstream = Stream::connect(&lp, target);
        // A reset or a refused connect ends the relay; nothing to report.
        relay(&client, &upstream)
            .add_both(|_| Ok::<_, Failure>(()))
            .detach();
    })
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let target = args.next().ok_or("usage: proxy LISTEN TARGET")?;
    let ev = EventLoop::new()?;
    println!(
        "{}",
        start(&ev, addr.parse()?, target.parse()?)?.local_addr()
    );
    ev.run()?;
    Ok(())
}
