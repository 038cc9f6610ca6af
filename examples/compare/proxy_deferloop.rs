//! TCP proxy with backpressure both ways, callback style. The twin of
//! `proxy_tokio.rs`.
//!
//! Run: `cargo run --example compare_proxy_deferloop -- 127.0.0.1:7002 127.0.0.1:7000`

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::net::SocketAddr;

/// One side of a relay; both sides run this. The client side knows the
/// target and connects when the client arrives.
struct Relay {
    target: Option<SocketAddr>,
    other: Option<Transport>,
}

impl Relay {
    fn other(&self, f: impl FnOnce(&Transport)) {
        if let Some(t) = &self.other {
            f(t);
        }
    }
}

impl Protocol for Relay {
    fn connection_made(&mut self, t: &Transport) {
        t.set_read_while_write_paused(true); // we pause the other side instead
        let (Some(target), Some(lp)) = (self.target, t.event_loop()) else {
            return;
        };
        let conn = lp.connect_tcp(
            target,
            Relay {
                target: None,
                other: Some(t.clone()),
            },
        );
        self.other = Some(conn.transport().clone()); // writable before it is up
        let client = t.clone();
        let _ = conn
            .connected()
            .add_both(move |r: Result<Transport, Failure>| {
                if let Err(f) = r {
                    client.abort_with(f);
                }
                Ok(())
            });
    }
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.other(|o| o.write(data));
    }
    // Our peer does not keep up: stop reading the other side until it does.
    fn pause_writing(&mut self, _: &Transport) {
        self.other(|o| o.pause_reading());
    }
    fn resume_writing(&mut self, _: &Transport) {
        self.other(|o| o.resume_reading());
    }
    // Half-close: pass the peer's EOF on, keep the other direction open.
    fn eof_received(&mut self, _: &Transport) -> bool {
        self.other(|o| o.write_eof());
        true
    }
    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        self.other(|o| o.close());
    }
}

pub fn start(
    ev: &EventLoop,
    addr: SocketAddr,
    target: SocketAddr,
) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, move || Relay {
        target: Some(target),
        other: None,
    })
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
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
