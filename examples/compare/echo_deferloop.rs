//! Echo server, callback style. The twin of `echo_tokio.rs`.
//!
//! Run: `cargo run --example compare_echo_deferloop -- 127.0.0.1:7000`

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::EventLoop;
use std::net::SocketAddr;

struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    // Backpressure: do not read from a peer that does not read its echo.
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, || Echo)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let ev = EventLoop::new()?;
    println!("{}", start(&ev, addr.parse()?)?.local_addr());
    ev.run()?;
    Ok(())
}
