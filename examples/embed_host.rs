//! deferloop hosting another loop: a "guest" loop (here another deferloop,
//! as a library that owns its loop would be) is driven from the host's
//! callbacks, the way glib hosts a `GSource`: a reader on the guest's fd, a
//! host timer for the guest's timeout, and a guest turn that never waits.
//! The host serves an echo server, the guest a line counter that answers
//! `N\n` per line; both on one thread. Prints both addresses.
//!
//! Run: `cargo run --example embed_host`, then `nc 127.0.0.1 PORT` to each.

use deferloop::net::{Protocol, Transport};
use deferloop::{Error, EventLoop, Handle, Loop, LoopingCall};
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::unix::io::{AsRawFd, RawFd};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

/// What the host calls when the guest stops.
type OnStop = RefCell<Option<Box<dyn FnOnce(&Loop)>>>;

/// A guest loop driven by a host loop.
pub struct Hosted {
    guest: Loop,
    fd: RawFd,
    /// The host timer set for the guest's next timeout.
    timer: RefCell<Option<Handle>>,
    on_stop: OnStop,
}

/// Starts driving `guest` from `host`'s turns until the guest is stopped;
/// then the host stops watching it and calls `on_stop`.
pub fn host(
    host: &Loop,
    guest: Loop,
    on_stop: impl FnOnce(&Loop) + 'static,
) -> Result<Rc<Hosted>, Error> {
    let fd = guest.as_raw_fd(); // readable: guest I/O, remote calls, work from the host
    let h = Rc::new(Hosted {
        guest,
        fd,
        timer: RefCell::new(None),
        on_stop: RefCell::new(Some(Box::new(on_stop))),
    });
    let h2 = h.clone();
    host.add_reader(fd, move |lp| h2.turn(lp))?;
    h.rearm(host);
    Ok(h)
}

impl Hosted {
    /// One guest turn that never waits, then the host timer set again.
    fn turn(self: &Rc<Self>, host: &Loop) {
        match self.guest.run_once_timeout(Duration::ZERO) {
            Ok(false) => self.rearm(host),
            Ok(true) | Err(_) => {
                host.remove_reader(self.fd);
                if let Some(t) = self.timer.borrow_mut().take() {
                    t.cancel();
                }
                let f = self.on_stop.borrow_mut().take();
                if let Some(f) = f {
                    f(host);
                }
            }
        }
    }

    /// A host timer for the guest's timeout (zero: the host's next turn).
    fn rearm(self: &Rc<Self>, host: &Loop) {
        if let Some(t) = self.timer.borrow_mut().take() {
            t.cancel();
        }
        let Some(t) = self.guest.timeout() else {
            return; // only the fd can bring the guest work
        };
        let me = self.clone();
        let timer = host.call_later(t, move |lp| me.turn(lp));
        *self.timer.borrow_mut() = timer.ok();
    }
}

/// The host's protocol: echo.
struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

/// The guest's protocol: answers each line with `LINES TICKS`: the lines it
/// has seen, and the ticks of the guest's 50 ms timer so far.
struct Counter {
    lines: u64,
    ticks: Rc<Cell<u64>>,
}

impl Protocol for Counter {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        for _ in data.iter().filter(|&&b| b == b'\n') {
            self.lines += 1;
            t.write(format!("{} {}\n", self.lines, self.ticks.get()).as_bytes());
        }
    }
}

/// Serves an echo server on the host loop and a line counter on a guest
/// loop hosted by it, until the guest is stopped; `bound` gets the guest's
/// `Remote` (to stop it from anywhere) and both addresses.
pub fn serve(
    echo: SocketAddr,
    counter: SocketAddr,
    bound: impl FnOnce(deferloop::Remote, SocketAddr, SocketAddr),
) -> Result<(), Box<dyn std::error::Error>> {
    let host_ev = EventLoop::new()?;
    let guest_ev = EventLoop::new()?;
    let e = host_ev.listen_tcp(echo, || Echo)?;
    // The guest's timers fire through the host's: a tick every 50 ms.
    let ticks = Rc::new(Cell::new(0));
    let t = ticks.clone();
    let tick = LoopingCall::new(guest_ev.to_loop(), move || {
        t.set(t.get() + 1);
        Ok::<(), deferloop::Failure>(())
    });
    tick.start(Duration::from_millis(50))?.detach();
    let c = guest_ev.listen_tcp(counter, move || Counter {
        lines: 0,
        ticks: ticks.clone(),
    })?;
    let _hosted = host(&host_ev, guest_ev.to_loop(), |host| host.stop())?;
    bound(
        guest_ev.remote(),
        e.local_addr().as_inet().expect("tcp"),
        c.local_addr().as_inet().expect("tcp"),
    );
    host_ev.run()?;
    Ok(())
}

fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args = args.into_iter();
    let mut addr = |name: &str| -> Result<SocketAddr, String> {
        let a = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
        a.parse().map_err(|e| format!("{name} address {a:?}: {e}"))
    };
    let (echo, counter) = (addr("echo")?, addr("counter")?);
    serve(echo, counter, |_, e, c| {
        println!("host: echo on {e}; guest: line counter on {c}; one thread");
    })
}

#[allow(dead_code)]
fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embed_host: {e}");
            ExitCode::FAILURE
        }
    }
}
