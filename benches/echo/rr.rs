//! The request/response workload: the client sends `GET <key>\n`
//! and the server answers a line of [`REPLY`] bytes computed from the key.
//! Two servers, the same `answer` for both, so that what differs is how the
//! lines are read: the raw `Protocol` that splits `data_received` into lines
//! by hand, as a careful user writes it, and a `Stream` that asks
//! `read_line()` again from each answer's callback.

use deferloop::net::{Protocol, Stream, Transport};
use deferloop::{EventLoop, Failure};
use std::io;
use std::net::SocketAddr;

/// Bytes in every answer, its `\n` included.
pub const REPLY: usize = 128;

/// The longest request line either server takes (the `Stream` default).
const LINE_LIMIT: usize = deferloop::net::DEFAULT_READ_LIMIT;

/// The request the client's connection `i` sends, again and again.
pub fn request(i: usize) -> Vec<u8> {
    format!("GET key-{i}\n").into_bytes()
}

/// The answer to request line `line` (without its `\n`): `VALUE <key> `, then
/// letters computed from the key up to [`REPLY`] − 1 bytes, then `\n`. No
/// allocation.
pub fn answer(line: &[u8]) -> [u8; REPLY] {
    let key = line.strip_prefix(b"GET ").unwrap_or(line);
    let mut out = [0u8; REPLY];
    let head = b"VALUE ";
    out[..head.len()].copy_from_slice(head);
    let mut n = head.len();
    let k = key.len().min(REPLY - 2 - n);
    out[n..n + k].copy_from_slice(&key[..k]);
    n += k;
    out[n] = b' ';
    n += 1;
    let mut h: u32 = key.iter().fold(2166136261, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    for b in &mut out[n..REPLY - 1] {
        h = h.wrapping_mul(1103515245).wrapping_add(12345);
        *b = b'a' + (h >> 16) as u8 % 26;
    }
    out[REPLY - 1] = b'\n';
    out
}

/// Runs `rr-raw` or `rr-reads` on `addr`.
pub fn run(name: &str, addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let ev = EventLoop::new()?;
    let l = match name {
        "rr-raw" => ev.listen_tcp(addr, RawLines::default),
        _ => Stream::listen_tcp(&ev, addr, serve_lines),
    }
    .map_err(io::Error::other)?;
    bound(l.local_addr().as_inet().unwrap());
    ev.run().map_err(io::Error::other)
}

/// The raw protocol: complete lines are answered straight from the loop's
/// read buffer; only a line split across reads is copied (into `partial`).
/// Backpressure as the echo server's: no reading while the peer does not
/// read its answers.
#[derive(Default)]
struct RawLines {
    partial: Vec<u8>,
}

impl Protocol for RawLines {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let mut rest = data;
        if !self.partial.is_empty() {
            let Some(i) = rest.iter().position(|&b| b == b'\n') else {
                self.partial.extend_from_slice(rest);
                if self.partial.len() > LINE_LIMIT {
                    t.close();
                }
                return;
            };
            self.partial.extend_from_slice(&rest[..i]);
            t.write(&answer(trim_cr(&self.partial)));
            self.partial.clear();
            rest = &rest[i + 1..];
        }
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            t.write(&answer(trim_cr(&rest[..i])));
            rest = &rest[i + 1..];
        }
        if rest.len() > LINE_LIMIT {
            t.close();
        } else {
            self.partial.extend_from_slice(rest);
        }
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The `Stream` server: `read_line()`, write the answer, ask again; close at
/// the end of file (or on a line over the limit).
fn serve_lines(s: Stream) {
    let _ = s.read_line().add_both(move |r: Result<String, Failure>| {
        match r {
            Ok(line) => {
                s.write(&answer(line.as_bytes()));
                serve_lines(s);
            }
            Err(_) => s.close(),
        }
        Ok::<(), Failure>(())
    });
}

/// Asserts that `addr` answers requests split across writes and several in
/// one write, in order (used by the smoke).
pub fn check(addr: SocketAddr) -> io::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut one = [0u8; REPLY];
    for part in [&b"GET al"[..], b"pha\r\nGET beta\nGET ", b"gamma\n"] {
        s.write_all(part)?;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for key in ["alpha", "beta", "gamma"] {
        s.read_exact(&mut one)?;
        let want = answer(format!("GET {key}").as_bytes());
        assert!(one == want, "the answer to {key} differs");
    }
    Ok(())
}
