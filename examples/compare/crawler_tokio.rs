//! A bounded crawler, async style on tokio: M pages, at most K fetched at
//! once, results in input order, an overall deadline; the first fatal
//! answer cancels every fetch in flight (their connections close). The twin
//! of `crawler_deferloop.rs`.
//!
//! Run: `cargo run --example compare_crawler_tokio`

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

#[path = "crawl_backend.rs"]
mod crawl_backend;

/// One page: its body, or `Ok(Err)` if it is missing; `Err` if fatal.
async fn fetch(addr: SocketAddr, path: String) -> Result<Result<String, String>, String> {
    let fatal = |e: std::io::Error| format!("{path}: {e}");
    let mut conn = BufReader::new(TcpStream::connect(addr).await.map_err(fatal)?);
    let request = format!("GET {path}\n");
    conn.get_mut()
        .write_all(request.as_bytes())
        .await
        .map_err(fatal)?;
    let mut line = String::new();
    conn.read_line(&mut line).await.map_err(fatal)?;
    match line.trim_end().split_once(' ') {
        Some(("OK", body)) => Ok(Ok(body.to_owned())),
        Some(("FATAL", why)) => Err(format!("{path}: {why}")),
        _ => Ok(Err(format!("{path}: missing"))),
    }
}

/// Every page's result, in order, at most `limit` fetched at once, all
/// within `deadline`.
pub async fn crawl(
    addr: SocketAddr,
    paths: Vec<String>,
    limit: usize,
    deadline: Duration,
) -> Result<Vec<Result<String, String>>, String> {
    let mut results = vec![None; paths.len()];
    let mut fetches = JoinSet::new();
    let mut todo = paths.into_iter().enumerate();
    let crawled = tokio::time::timeout(deadline, async {
        loop {
            while fetches.len() < limit {
                let Some((i, path)) = todo.next() else { break };
                fetches.spawn(async move { (i, fetch(addr, path).await) });
            }
            let Some(done) = fetches.join_next().await else {
                return Ok(());
            };
            let (i, page) = done.expect("a fetch panicked");
            results[i] = Some(page?);
        }
    })
    .await;
    fetches.shutdown().await; // what is still in flight: aborted, and waited for
    match crawled {
        Ok(Ok(())) => Ok(results.into_iter().map(Option::unwrap).collect()),
        Ok(Err(fatal)) => Err(fatal),
        Err(_) => Err(format!("timed out after {deadline:?}")),
    }
}

#[allow(dead_code)]
fn main() {
    let (addr, _) = crawl_backend::spawn();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let paths = crawl_backend::paths();
    let pages = rt.block_on(crawl(addr, paths.clone(), 3, Duration::from_secs(5)));
    for (path, page) in paths.iter().zip(pages.expect("no fatal page")) {
        println!("{path}: {page:?}");
    }
}
