//! A TCP proxy: relays bytes both ways between each client and the target,
//! with backpressure in both directions — while one side's write buffer is
//! above its high-water mark, the other side is not read — and half-closes
//! passed through. Prints the address it bound as its first line.
//!
//! Run: `cargo run --example proxy -- 127.0.0.1:7002 127.0.0.1:7000`
//! (listen address, default `127.0.0.1:0`; target address, default: an echo
//! server started in the same process, so the example runs on its own).

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

/// How long the target may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a side may take to flush once the other side is gone.
const LINGER: Duration = Duration::from_secs(5);

/// One side of a relay; both sides run this. The client side is made with the
/// target's address and connects when the client arrives; the target side is
/// made with the client's transport.
pub struct Relay {
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
        // This side handles its peer's backpressure by pausing the other side.
        t.set_read_while_write_paused(true);
        t.set_linger(LINGER);
        let (Some(target), Some(lp)) = (self.target, t.event_loop()) else {
            return;
        };
        // Writes to the target are buffered until it is up.
        let conn = lp.connect_tcp(
            target,
            Relay {
                target: None,
                other: Some(t.clone()),
            },
        );
        self.other = Some(conn.transport().clone());
        let client = t.clone();
        let _ = conn.connected().add_timeout(CONNECT_TIMEOUT, &lp).add_both(
            move |r: Result<Transport, Failure>| {
                if let Err(f) = r {
                    client.abort_with(f);
                }
                Ok(())
            },
        );
    }
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.other(|o| o.write(data));
    }
    /// Our peer is not reading what we send it: stop reading from the other side.
    fn pause_writing(&mut self, _: &Transport) {
        self.other(|o| o.pause_reading());
    }
    fn resume_writing(&mut self, _: &Transport) {
        self.other(|o| o.resume_reading());
    }
    /// Our peer finished sending: pass the half-close on, keep the other way open.
    fn eof_received(&mut self, _: &Transport) -> bool {
        self.other(|o| o.write_eof());
        true
    }
    /// Our side is gone: close the other (a pending connect is abandoned; a
    /// graceful close aborts after the linger time).
    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        self.other(|o| {
            if o.is_connecting() {
                o.abort()
            } else {
                o.close()
            }
        });
    }
}

/// Listens on `addr`, relaying every connection to `target`.
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

#[path = "echo_server.rs"]
#[allow(dead_code)]
mod echo_server;

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
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
