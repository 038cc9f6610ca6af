//! HTTP/1.1 client, callback style: fetches a list of paths over at most N
//! kept-alive connections (one request in flight on each), a timeout per
//! request, up to 2 retries with back-off. The twin of
//! `http_client_tokio.rs`.
//!
//! Run: `cargo run --example compare_http_client_deferloop`

use deferloop::net::Stream;
use deferloop::{defer_later, fail, gather_results, succeed, Deferred, EventLoop, Failure, Loop};
use std::cell::Cell;
use std::net::SocketAddr;
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

/// What the workers share: where to fetch, and the next path to take.
#[derive(Clone)]
struct Jobs {
    lp: Loop,
    addr: SocketAddr,
    paths: Rc<[String]>,
    next: Rc<Cell<usize>>,
}

type Conn = Option<Stream>;

/// `path` on `conn` (connecting if there is none), with a timeout per try
/// and retries with back-off; fires with the connection to keep (none after
/// a failure) and the result. The timeout cancels the read; we close.
fn fetch(
    jobs: Jobs,
    conn: Conn,
    path: String,
    attempt: u32,
) -> Deferred<(Conn, Result<String, String>)> {
    let s = conn.unwrap_or_else(|| Stream::connect(&jobs.lp, jobs.addr));
    get(&s, &path)
        .add_timeout(TIMEOUT, &jobs.lp)
        .add_both(move |r| match r {
            Ok(body) => succeed((Some(s), Ok(body))),
            Err(f) => {
                s.abort();
                if attempt == RETRIES {
                    return succeed((None, Err(f.to_string())));
                }
                let lp = jobs.lp.clone();
                defer_later(&lp, BACKOFF * 2u32.pow(attempt), move || {
                    fetch(jobs, None, path, attempt + 1)
                })
            }
        })
}

/// Takes paths until none are left, on one kept-alive connection.
fn worker(
    jobs: Jobs,
    conn: Conn,
    mut done: Vec<(usize, Result<String, String>)>,
) -> Deferred<Vec<(usize, Result<String, String>)>> {
    let i = jobs.next.replace(jobs.next.get() + 1);
    let Some(path) = jobs.paths.get(i).cloned() else {
        if let Some(s) = conn {
            s.close();
        }
        return succeed(done);
    };
    fetch(jobs.clone(), conn, path, 0).add_callback(move |(conn, r)| {
        done.push((i, r));
        worker(jobs, conn, done)
    })
}

/// Every path's body (or error), in order, fetched by `n` workers that each
/// keep one connection alive.
pub fn fetch_all(
    lp: &Loop,
    addr: SocketAddr,
    paths: Vec<String>,
    n: usize,
) -> Deferred<Vec<Result<String, String>>> {
    let jobs = Jobs {
        lp: lp.clone(),
        addr,
        paths: paths.into(),
        next: Rc::default(),
    };
    let workers: Vec<_> = (0..n)
        .map(|_| worker(jobs.clone(), None, Vec::new()))
        .collect();
    gather_results(workers).map(|all| {
        let mut all: Vec<_> = all.into_iter().flatten().collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    })
}

#[allow(dead_code)]
fn main() -> Result<(), deferloop::Error> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let (addr, _) = http_backend::spawn();
    let paths: Vec<String> = http_backend::paths().into_iter().map(|(p, _)| p).collect();
    let ev = EventLoop::new()?;
    let results = ev
        .run_until(fetch_all(&ev, addr, paths.clone(), 3))
        .expect("no failure");
    for (path, r) in paths.iter().zip(results) {
        println!("{path}: {r:?}");
    }
    Ok(())
}
