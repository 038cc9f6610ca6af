//! A minimal HTTP/1.1 server that answers every request with "Hello, world!",
//! with keep-alive and pipelining, fit for `wrk` or `ab -k`. Prints the
//! address it bound as its first line.
//!
//! Run: `cargo run --release --example http_hello -- 127.0.0.1:8080`, then
//! `wrk -c 10 -d 10 http://127.0.0.1:8080/`.
//!
//! Requests that arrive whole in one read are answered straight from the read
//! buffer; only a request split across reads is copied, so steady keep-alive
//! traffic allocates nothing.

use deferloop::net::{Listener, Protocol, Transport};
use deferloop::EventLoop;
use std::io::Write;
use std::net::SocketAddr;

const BODY: &[u8] = b"Hello, world!";
const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n";
const HEAD_10: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n";
const KEEP_ALIVE: &[u8] = b"Connection: keep-alive\r\n\r\n";
const CLOSE: &[u8] = b"Connection: close\r\n\r\n";
/// The largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;

/// One connection: the part of a request that has not arrived whole.
#[derive(Default)]
pub struct Http {
    partial: Vec<u8>,
}

/// What one request asks of the connection.
struct Request {
    /// Bytes the request takes in the input (head and body).
    len: usize,
    keep_alive: bool,
    http10: bool,
}

/// Parses the request at the start of `input`; `None` if it is incomplete.
fn parse(input: &[u8]) -> Option<Result<Request, &'static [u8]>> {
    let end = input.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&input[..end]).ok();
    let Some(head) = head else {
        return Some(Err(
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ));
    };
    let mut lines = head.split("\r\n");
    let http10 = lines.next().is_some_and(|l| l.ends_with("HTTP/1.0"));
    let (mut keep_alive, mut body) = (!http10, 0usize);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            keep_alive = value.eq_ignore_ascii_case("keep-alive");
        } else if name.eq_ignore_ascii_case("content-length") {
            body = value.parse().unwrap_or(usize::MAX);
        }
    }
    if body > MAX_HEAD {
        return Some(Err(
            b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ));
    }
    let len = end + 4 + body;
    (input.len() >= len).then_some(Ok(Request {
        len,
        keep_alive,
        http10,
    }))
}

impl Http {
    /// Answers every complete request in `input`; returns what is left.
    fn serve<'a>(t: &Transport, mut input: &'a [u8]) -> &'a [u8] {
        while let Some(req) = parse(input) {
            match req {
                Ok(r) => {
                    input = &input[r.len..];
                    let conn = if r.keep_alive { KEEP_ALIVE } else { CLOSE };
                    let head = if r.http10 { HEAD_10 } else { HEAD };
                    t.write_vectored(&[head, conn, BODY]);
                    if !r.keep_alive {
                        t.close();
                        return &[];
                    }
                }
                Err(reply) => {
                    t.write(reply);
                    t.close();
                    return &[];
                }
            }
        }
        if input.len() > MAX_HEAD {
            t.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            t.close();
            return &[];
        }
        input
    }
}

impl Protocol for Http {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        if self.partial.is_empty() {
            let rest = Http::serve(t, data);
            self.partial.extend_from_slice(rest);
        } else {
            self.partial.extend_from_slice(data);
            let all = std::mem::take(&mut self.partial);
            let rest = Http::serve(t, &all).to_vec();
            self.partial = rest;
        }
    }
}

/// Listens on `addr`.
pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    ev.listen_tcp(addr, Http::default)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let ev = EventLoop::new()?;
    let listener = start(&ev, addr.parse()?)?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
    Ok(())
}
