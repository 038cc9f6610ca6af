//! HTTP/1.1 client, async style on tokio: fetches a list of paths over at
//! most N kept-alive connections (one request in flight on each), a timeout
//! per request, up to 2 retries with back-off. The twin of
//! `http_client_deferloop.rs`.
//!
//! Run: `cargo run --example compare_http_client_tokio`

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

#[path = "http_backend.rs"]
mod http_backend;

pub const TIMEOUT: Duration = Duration::from_millis(300);
const RETRIES: u32 = 2;
const BACKOFF: Duration = Duration::from_millis(50);

/// One GET on a kept-alive connection; the body as text.
async fn get(conn: &mut BufReader<TcpStream>, path: &str) -> io::Result<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    conn.get_mut().write_all(request.as_bytes()).await?;
    let mut status = String::new();
    conn.read_line(&mut status).await?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!("{path}: {status:?}")));
    }
    let mut len = 0;
    loop {
        let mut header = String::new();
        conn.read_line(&mut header).await?;
        match header.trim_end().split_once(": ") {
            Some(("Content-Length", n)) => len = n.parse().map_err(io::Error::other)?,
            Some(_) => {}
            None => break, // the blank line (or EOF: then the body fails)
        }
    }
    let mut body = vec![0; len];
    conn.read_exact(&mut body).await?;
    String::from_utf8(body).map_err(io::Error::other)
}

/// `path` on `conn` (connecting if there is none), with a timeout per try
/// and retries with back-off; a connection that failed is dropped.
async fn fetch(
    addr: SocketAddr,
    conn: &mut Option<BufReader<TcpStream>>,
    path: &str,
) -> Result<String, String> {
    for attempt in 0.. {
        let tried = tokio::time::timeout(TIMEOUT, async {
            if conn.is_none() {
                *conn = Some(BufReader::new(TcpStream::connect(addr).await?));
            }
            get(conn.as_mut().unwrap(), path).await
        })
        .await;
        let e = match tried {
            Ok(Ok(body)) => return Ok(body),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("timed out after {TIMEOUT:?}"),
        };
        *conn = None;
        if attempt == RETRIES {
            return Err(e);
        }
        tokio::time::sleep(BACKOFF * 2u32.pow(attempt)).await;
    }
    unreachable!()
}

/// Every path's body (or error), in order, fetched by `n` workers that each
/// keep one connection alive.
pub async fn fetch_all(
    addr: SocketAddr,
    paths: Vec<String>,
    n: usize,
) -> Vec<Result<String, String>> {
    let paths: Arc<[String]> = paths.into();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..n {
        let (paths, next) = (paths.clone(), next.clone());
        workers.spawn(async move {
            let (mut conn, mut done) = (None, Vec::new());
            loop {
                let i = next.fetch_add(1, Relaxed);
                let Some(path) = paths.get(i) else {
                    return done;
                };
                done.push((i, fetch(addr, &mut conn, path).await));
            }
        });
    }
    let mut results = vec![None; paths.len()];
    while let Some(done) = workers.join_next().await {
        for (i, r) in done.expect("a worker panicked") {
            results[i] = Some(r);
        }
    }
    results.into_iter().map(Option::unwrap).collect()
}

#[allow(dead_code)]
fn main() {
    let (addr, _) = http_backend::spawn();
    let paths: Vec<String> = http_backend::paths().into_iter().map(|(p, _)| p).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = rt.block_on(fetch_all(addr, paths.clone(), 3));
    for (path, r) in paths.iter().zip(results) {
        println!("{path}: {r:?}");
    }
}
