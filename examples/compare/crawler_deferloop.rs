//! A bounded crawler, callback style: M pages, at most K fetched at once,
//! results in input order, an overall deadline; the first fatal answer
//! cancels every fetch in flight (their connections close, no timer is
//! left). The twin of `crawler_tokio.rs`.
//!
//! Run: `cargo run --example compare_crawler_deferloop`

use deferloop::deferred::map_limit;
use deferloop::net::Stream;
use deferloop::{Deferred, EventLoop, Failure, Loop};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "crawl_backend.rs"]
mod crawl_backend;

/// One page: its body, or `Err` if it is missing; a fatal answer fails.
/// However it ends (answer, failure, cancel), the connection goes.
fn fetch(lp: &Loop, addr: SocketAddr, path: String) -> Deferred<Result<String, String>> {
    let s = Stream::connect(lp, addr);
    s.write(format!("GET {path}\n").as_bytes());
    s.read_line().add_both(move |r: Result<String, Failure>| {
        s.abort();
        match r?.split_once(' ') {
            Some(("OK", body)) => Ok(Ok(body.to_owned())),
            Some(("FATAL", why)) => Err(Failure::msg(format!("{path}: {why}"))),
            _ => Ok(Err(format!("{path}: missing"))),
        }
    })
}

/// Every page's result, in order, at most `limit` fetched at once, all
/// within `deadline`.
pub fn crawl(
    lp: &Loop,
    addr: SocketAddr,
    paths: Vec<String>,
    limit: usize,
    deadline: Duration,
) -> Deferred<Vec<Result<String, String>>> {
    let lp2 = lp.clone();
    map_limit(paths, limit, move |path| fetch(&lp2, addr, path)).add_timeout(deadline, lp)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let (addr, _) = crawl_backend::spawn();
    let ev = EventLoop::new()?;
    let paths = crawl_backend::paths();
    let pages = ev.run_until(crawl(&ev, addr, paths.clone(), 3, Duration::from_secs(5)))?;
    for (path, page) in paths.iter().zip(pages) {
        println!("{path}: {page:?}");
    }
    Ok(())
}
