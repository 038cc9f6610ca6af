//! A small HTTP/1.1 server that answers every request with "Hello, world!",
//! with keep-alive and pipelining, fit for `wrk` or `ab -k`, and the defences
//! a server facing strangers needs. Prints the address it bound first.
//!
//! Run: `cargo run --release --example http_hello -- 127.0.0.1:8080
//! [--head-timeout-ms 10000]`, then `wrk -c 10 -d 10 http://127.0.0.1:8080/`.
//!
//! Heads are parsed by `httparse`; the framing rules are RFC 9112's. A request
//! that cannot be framed safely is answered with an error, then the connection
//! is half-closed and drained for at most [`LINGER`] (§9.6), so that closing
//! with unread input does not reset the answer away:
//! - 400: Content-Length and Transfer-Encoding together; a Content-Length
//!   that is not plain digits, or given twice (even with the same value);
//!   HTTP/1.1 without Host, or two Hosts; a control character in a header.
//! - 501: a chunked body (this server does not decode them; any other
//!   transfer coding is a 400). 505: a version other than HTTP/1.0 or 1.1.
//! - 431: a head over 8 KiB or 64 lines. 413: a body over 8 KiB. Both are
//!   decided from the head, however its bytes arrive (see [`request`]).
//! - 408: a request not complete within the head timeout (slowloris); an idle
//!   keep-alive connection is closed silently then.
//!
//! Backpressure: while the peer does not read its responses (the write buffer
//! is over its high-water mark) no more requests are parsed and reading is
//! paused, so a client that pipelines and never reads holds at most one read
//! and one write buffer of this server's memory; if its buffer has not
//! drained to the low-water mark within the head timeout, it is dropped.
//!
//! Requests that arrive whole in one read are answered straight from the read
//! buffer; only a request split across reads is copied.

pub mod request;

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::{EventLoop, Handle};
use request::Request;
use std::cell::{Cell, RefCell};
use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

/// How long a request may take to arrive (counted from the previous answer,
/// or from the connection's start), by default.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection that is ending is drained before it is dropped.
pub const LINGER: Duration = Duration::from_secs(2);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n";
const BODY: &[u8] = b"Hello, world!";
const KEEP_ALIVE: &[u8] = b"Connection: keep-alive\r\n\r\n";
const CLOSE: &[u8] = b"Connection: close\r\n\r\n";

/// What the connection's timer does when its deadline passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request, none of it here yet: close.
    Idle,
    /// Part of a request is here: 408, then end the connection.
    Reading,
    /// Waiting for the peer to read its responses: drop it.
    Stalled,
    /// The last response is out, the peer's input drained: drop it.
    Draining,
}

/// What the protocol shares with its timer: one `call_later` per connection,
/// moved on with `Handle::reset` (Twisted's `DelayedCall.reset`) each time the
/// connection starts to wait, so it runs only when a wait has lasted too long.
struct Shared {
    timeout: Duration,
    state: Cell<State>,
    timer: RefCell<Option<Handle>>,
}

impl Shared {
    /// Enters `state`, giving the peer `for_` to move it on; false if the
    /// timer has already run (the connection is ending).
    fn wait(&self, state: State, for_: Duration) -> bool {
        self.state.set(state);
        let timer = self.timer.borrow();
        timer.as_ref().is_some_and(|t| t.reset(for_).is_ok())
    }
}

/// Arms the timer of the connection, due in `after`.
fn arm(t: &Transport, s: &Rc<Shared>, after: Duration) {
    let Some(lp) = t.event_loop() else { return };
    let (t2, s2) = (t.clone(), s.clone());
    let timer = lp.call_later(after, move |_| match s2.state.get() {
        State::Idle => t2.close(),
        State::Reading => refuse(&t2, &s2, "408 Request Timeout"),
        State::Stalled | State::Draining => t2.abort(),
    });
    *s.timer.borrow_mut() = timer.ok();
}

/// Ends the connection as §9.6 asks: half-close, then drain what the peer
/// still sends, for at most [`LINGER`].
fn finish(t: &Transport, s: &Rc<Shared>) {
    t.write_eof();
    if !s.wait(State::Draining, LINGER) {
        arm(t, s, LINGER); // from the timer's own run (a 408)
    }
}

/// Answers with an error status and ends the connection.
fn refuse(t: &Transport, s: &Rc<Shared>, status: &str) {
    t.write_vectored(&[
        b"HTTP/1.1 ",
        status.as_bytes(),
        b"\r\nContent-Length: 0\r\n",
        CLOSE,
    ]);
    finish(t, s);
}

/// One connection.
pub struct Http {
    /// Input not yet served: a request split across reads, or requests held
    /// back while the peer does not read.
    buf: Vec<u8>,
    /// Body bytes of the current request still to come, and its answer.
    body_left: u64,
    answer: Option<Request>,
    /// The peer half-closed while requests were held back.
    eof: bool,
    s: Rc<Shared>,
}

impl Http {
    pub fn new(timeout: Duration) -> Http {
        let s = Shared {
            timeout,
            state: Cell::new(State::Idle),
            timer: RefCell::new(None),
        };
        Http {
            buf: Vec::new(),
            body_left: 0,
            answer: None,
            eof: false,
            s: Rc::new(s),
        }
    }

    /// Serves the requests at the start of `input`; returns how much of it was
    /// used. Stops parsing while the write buffer is over its high-water mark.
    fn serve(&mut self, t: &Transport, input: &[u8]) -> usize {
        let mut at = 0;
        loop {
            if self.s.state.get() == State::Draining {
                return input.len();
            }
            let rest = &input[at..];
            if self.body_left > 0 {
                let n = rest.len().min(self.body_left as usize); // ≤ MAX_BODY
                (self.body_left, at) = (self.body_left - n as u64, at + n);
                if self.body_left > 0 {
                    self.s.state.set(State::Reading);
                    return at;
                }
            }
            if let Some(r) = self.answer.take() {
                let body = if r.head { &b""[..] } else { BODY };
                if r.keep_alive {
                    t.write_vectored(&[OK, KEEP_ALIVE, body]);
                    self.s.wait(State::Idle, self.s.timeout);
                } else {
                    t.write_vectored(&[OK, CLOSE, body]);
                    finish(t, &self.s);
                }
                continue;
            }
            if t.is_writing_paused() {
                self.stall(t);
                return at;
            }
            match request::parse(rest) {
                Ok(Some((len, r))) => {
                    (at, self.body_left, self.answer) = (at + len, r.body, Some(r))
                }
                Ok(None) if rest.is_empty() => return at,
                Ok(None) => {
                    self.s.state.set(State::Reading);
                    return at;
                }
                Err(status) => {
                    refuse(t, &self.s, status);
                    return input.len();
                }
            }
        }
    }

    fn serve_buffered(&mut self, t: &Transport) {
        let buf = std::mem::take(&mut self.buf);
        let used = self.serve(t, &buf);
        self.buf = buf;
        self.buf.drain(..used);
    }

    /// The peer is not reading: stop reading it, and give it a timeout to resume.
    fn stall(&self, t: &Transport) {
        t.pause_reading();
        self.s.wait(State::Stalled, self.s.timeout);
    }
}

impl Protocol for Http {
    fn connection_made(&mut self, t: &Transport) {
        arm(t, &self.s, self.s.timeout);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if self.buf.is_empty() {
            let used = self.serve(t, data);
            self.buf.extend_from_slice(&data[used..]);
        } else {
            self.buf.extend_from_slice(data);
            self.serve_buffered(t);
        }
    }

    fn eof_received(&mut self, t: &Transport) -> bool {
        // Requests held back are still answered: `resume_writing` closes after.
        self.eof = true;
        let keep = self.s.state.get() == State::Stalled && !self.buf.is_empty();
        if !keep && self.s.state.get() != State::Draining {
            finish(t, &self.s); // bounds the flush that the close waits for
        }
        keep
    }

    fn connection_lost(&mut self, _: &Transport, _: Option<deferloop::Failure>) {
        if let Some(timer) = self.s.timer.borrow_mut().take() {
            timer.cancel();
        }
    }

    fn pause_writing(&mut self, t: &Transport) {
        if self.s.state.get() != State::Draining {
            self.stall(t);
        }
    }

    fn resume_writing(&mut self, t: &Transport) {
        if self.s.state.get() == State::Stalled {
            self.s.wait(State::Idle, self.s.timeout);
            self.serve_buffered(t);
        }
        if !t.is_writing_paused() {
            if self.eof {
                t.close();
            } else {
                t.resume_reading();
            }
        }
    }
}

/// Listens on `addr` with the default head timeout.
pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    start_with(ev, addr, HEAD_TIMEOUT)
}

/// Listens on `addr`; a request must arrive whole within `head_timeout`.
pub fn start_with(
    ev: &EventLoop,
    addr: SocketAddr,
    head_timeout: Duration,
) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, move || Http::new(head_timeout))
}

/// `[ADDR] [--head-timeout-ms N]`: serves until killed.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn Error>> {
    let (mut addr, mut timeout, mut args) = (None, HEAD_TIMEOUT, args.into_iter());
    while let Some(arg) = args.next() {
        if arg == "--head-timeout-ms" {
            let v = args.next().ok_or("--head-timeout-ms needs a value")?;
            let ms = v.parse().ok().filter(|&ms| ms > 0);
            let ms = ms.ok_or(format!("--head-timeout-ms {v:?}: not a positive integer"))?;
            timeout = Duration::from_millis(ms);
        } else if arg.starts_with('-') || addr.is_some() {
            return Err(format!("unexpected argument {arg:?}").into());
        } else {
            addr = Some(arg);
        }
    }
    let addr = addr.unwrap_or_else(|| "127.0.0.1:0".into());
    let addr: SocketAddr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
    let ev = EventLoop::new()?;
    let listener = start_with(&ev, addr, timeout).map_err(|e| format!("listen on {addr}: {e}"))?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
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
            eprintln!("http_hello: {e}");
            ExitCode::FAILURE
        }
    }
}
