//! HTTP/1.1 client, callback style: fetches a list of paths over at most N
//! kept-alive connections (one request in flight on each), a timeout per
//! request, up to 2 retries with back-off. The twin of
//! `http_client_tokio.rs`.
//!
//! Run: `cargo run --example compare_http_client_deferloop`

use deferloop::deferred::{loop_fn, retry, Backoff, Jitter, RetryPolicy};
use deferloop::net::Stream;
use deferloop::{fail, gather_results, succeed, Deferred, EventLoop, Failure, Loop};
use std::cell::Cell;
use std::net::SocketAddr;
use std::ops::ControlFlow::{Break, Continue};
use std::rc::Rc;
use std::time::Duration;

#[path = "http_backend.rs"]
mod http_backend;

pub const TIMEOUT: Duration = Duration::from_millis(300);
const RETRIES: u32 = 2;
const BACKOFF: Duration = Duration::from_millis(50);

/// One GET on a kept-alive connection; the body as text.
fn get(s: &Stream, path: &str) -> Deferred<String> {
    s.write(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes());
    let (body, path) = (s.clone(), path.to_owned());
    s.read_until(b"\r\n\r\n")
        .add_callback(move |head| {
            let head = String::from_utf8_lossy(&head);
            let len = head
                .lines()
                .find_map(|h| h.strip_prefix("Content-Length: "));
            match len.and_then(|n| n.parse().ok()) {
                Some(len) if head.starts_with("HTTP/1.1 200") => body.read_exactly(len),
                _ => fail(Failure::msg(format!("{path}: {:?}", head.lines().next()))),
            }
        })
        .add_callback(|body| String::from_utf8(body).map_err(Failure::new))
}

/// `path` on `conn` (connecting if there is none), with a timeout per try
/// and retries with back-off; fires with the connection to keep (none after
/// a failure) and the result. The timeout cancels the read; we abort.
fn fetch(
    lp: &Loop,
    addr: SocketAddr,
    mut conn: Option<Stream>,
    path: String,
) -> Deferred<(Option<Stream>, Result<String, String>)> {
    let backoff = Backoff::exponential(BACKOFF).jitter(Jitter::None);
    let policy = RetryPolicy::new().attempts(RETRIES + 1).backoff(backoff);
    let lp2 = lp.clone();
    retry(lp, policy, move |_| {
        let s = conn.take().unwrap_or_else(|| Stream::connect(&lp2, addr));
        get(&s, &path)
            .add_timeout(TIMEOUT, &lp2)
            .add_both(move |r| match r {
                Ok(body) => Ok((Some(s), Ok(body))),
                Err(f) => {
                    s.abort();
                    Err(f)
                }
            })
    })
    .add_errback(|f| Ok((None, Err(f.to_string()))))
}

/// Every path's body (or error), in order, fetched by `n` workers that each
/// keep one connection alive.
pub fn fetch_all(
    lp: &Loop,
    addr: SocketAddr,
    paths: Vec<String>,
    n: usize,
) -> Deferred<Vec<Result<String, String>>> {
    let (paths, next): (Rc<[String]>, _) = (paths.into(), Rc::new(Cell::new(0)));
    let workers = (0..n).map(|_| {
        let (lp, paths, next) = (lp.clone(), paths.clone(), next.clone());
        loop_fn(
            (None, Vec::new()),
            move |(conn, mut done): (Option<Stream>, Vec<_>)| {
                let i = next.replace(next.get() + 1);
                let Some(path) = paths.get(i).cloned() else {
                    if let Some(s) = conn {
                        s.close();
                    }
                    return succeed(Break(done));
                };
                fetch(&lp, addr, conn, path).map(move |(conn, r)| {
                    done.push((i, r));
                    Continue((conn, done))
                })
            },
        )
    });
    gather_results(workers).map(|all| {
        let mut all: Vec<_> = all.into_iter().flatten().collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    })
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let (addr, _) = http_backend::spawn();
    let paths: Vec<String> = http_backend::paths().into_iter().map(|(p, _)| p).collect();
    let ev = EventLoop::new()?;
    let results = ev.run_until(fetch_all(&ev, addr, paths.clone(), 3))?;
    for (path, r) in paths.iter().zip(results) {
        println!("{path}: {r:?}");
    }
    Ok(())
}
