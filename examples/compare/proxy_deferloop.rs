//! TCP proxy with backpressure both ways, callback style. The twin of
//! `proxy_tokio.rs`.
//!
//! Run: `cargo run --example compare_proxy_deferloop -- 127.0.0.1:7002 127.0.0.1:7000`

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

/// The other side of the relay, once connected.
type Other = Rc<RefCell<Option<Transport>>>;

/// One side of a relay; both sides run this.
struct Relay {
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

/// The client side: connects to the target, reads nothing until it is up.
struct Inbound {
    target: SocketAddr,
    relay: Relay,
}

impl Protocol for Inbound {
    fn connection_made(&mut self, client: &Transport) {
        client.pause_reading();
        let back_to_client = Rc::new(RefCell::new(Some(client.clone())));
        let relay = Relay {
            other: back_to_client,
        };
        let (to_target, ok, failed) = (self.relay.other.clone(), client.clone(), client.clone());
        let _ = client
            .event_loop()
            .connect_tcp(self.target, relay)
            .add_callbacks(
                move |target| {
                    *to_target.borrow_mut() = Some(target);
                    ok.resume_reading();
                    Ok(())
                },
                move |f| {
                    failed.abort_with(f);
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
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.relay.connection_lost(t, reason);
    }
}

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
