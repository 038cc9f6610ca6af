//! Fan-out, async style on tokio: ask three backends, take the first success,
//! give up after a timeout, report every failure. The twin of
//! `fan_out_deferloop.rs`.
//!
//! Run: `cargo run --example compare_fan_out_tokio`

use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

#[path = "backends.rs"]
mod backends;

/// One backend's answer: the first line it sends back.
async fn ask(addr: SocketAddr) -> io::Result<String> {
    let mut conn = TcpStream::connect(addr).await?;
    conn.write_all(b"what colour?\n").await?;
    let mut line = String::new();
    if BufReader::new(conn).read_line(&mut line).await? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed without an answer",
        ));
    }
    Ok(line.trim_end().to_owned())
}

/// The first answer as `(backend index, answer)`; every failure is printed as
/// it happens; losers are aborted once there is a winner or the time is up.
pub async fn fan_out(
    backends: &[SocketAddr],
    timeout: Duration,
) -> Result<(usize, String), String> {
    let mut asks = JoinSet::new();
    for (i, &addr) in backends.iter().enumerate() {
        asks.spawn(async move { (i, ask(addr).await) });
    }
    let first = tokio::time::timeout(timeout, async {
        while let Some(done) = asks.join_next().await {
            match done.expect("an ask panicked") {
                (i, Ok(answer)) => return Some((i, answer)),
                (i, Err(e)) => println!("backend {i} failed: {e}"),
            }
        }
        None
    })
    .await;
    asks.abort_all(); // the losers
    match first {
        Ok(Some(win)) => Ok(win),
        Ok(None) => Err("every backend failed".into()),
        Err(_) => Err(format!("timed out after {timeout:?}")),
    }
}

#[allow(dead_code)]
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (addrs, timeout) in backends::scenarios() {
        match rt.block_on(fan_out(&addrs, timeout)) {
            Ok((i, answer)) => println!("answer from backend {i}: {answer}"),
            Err(e) => println!("no answer: {e}"),
        }
    }
}
