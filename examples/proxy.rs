//! A TCP proxy: relays bytes both ways between each client and the target,
//! with backpressure in both directions — while one side's write buffer is
//! above its high-water mark, the other side is not read — and half-closes
//! passed through. Prints the address it bound as its first line.
//!
//! Run: `cargo run --example proxy -- 127.0.0.1:7002 127.0.0.1:7000`
//! (listen address, default `127.0.0.1:0`; target address, default: an echo
//! server started in the same process, so the example runs on its own).

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::EventLoop;
use std::cell::RefCell;
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;

/// The transport at the other end of a relay, once it exists.
type Other = Rc<RefCell<Option<Transport>>>;

/// One side of a relay. Both sides run the same code.
pub struct Relay {
    other: Other,
}

impl Relay {
    fn other(&self, f: impl FnOnce(&Transport)) {
        if let Some(t) = &*self.other.borrow() {
            f(t);
        }
    }
}

impl Protocol for Relay {
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
    fn connection_lost(&mut self, _: &Transport, _: Option<deferloop::Failure>) {
        self.other(|o| o.close());
    }
}

/// The client side: connects to the target when the client arrives, and
/// reads nothing from the client until that connection is up.
pub struct Inbound {
    target: SocketAddr,
    relay: Relay,
}

impl Protocol for Inbound {
    fn connection_made(&mut self, client: &Transport) {
        client.pause_reading();
        let to_client: Other = Rc::new(RefCell::new(Some(client.clone())));
        let (to_target, c1, c2) = (self.relay.other.clone(), client.clone(), client.clone());
        let connected = client
            .event_loop()
            .connect_tcp(self.target, Relay { other: to_client });
        let _ = connected.add_callbacks(
            move |target| {
                *to_target.borrow_mut() = Some(target);
                c1.resume_reading();
                Ok(())
            },
            move |f| {
                c2.abort_with(f);
                Ok(())
            },
        );
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.relay.data_received(t, data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        self.relay.pause_writing(t);
    }
    fn resume_writing(&mut self, t: &Transport) {
        self.relay.resume_writing(t);
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        self.relay.eof_received(t)
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<deferloop::Failure>) {
        self.relay.connection_lost(t, reason);
    }
}

/// Listens on `addr`, relaying every connection to `target`.
pub fn start(
    ev: &EventLoop,
    addr: SocketAddr,
    target: SocketAddr,
) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, move || Inbound {
        target,
        relay: Relay {
            other: Rc::new(RefCell::new(None)),
        },
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
