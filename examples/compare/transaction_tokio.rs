//! A transaction over a line protocol, async style on tokio: connect,
//! authenticate, begin, N writes each checked, commit. A conflict retries
//! the whole transaction with back-off, a timeout at any step aborts it, and
//! every failure names its step. The twin of `transaction_deferloop.rs`.
//!
//! Run: `cargo run --example compare_transaction_tokio`

use std::fmt::Display;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[path = "txn_backend.rs"]
mod txn_backend;

pub const STEP_TIMEOUT: Duration = Duration::from_millis(200);
const ATTEMPTS: u32 = 3;
const BACKOFF: Duration = Duration::from_millis(20);

/// A step went wrong: which one, and how.
#[derive(Debug)]
pub struct StepFailed {
    pub step: String,
    pub why: String,
}

impl std::fmt::Display for StepFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.why)
    }
}

impl std::error::Error for StepFailed {}

/// `f` within the step timeout; an error is the step's.
async fn step<T, E: Display>(
    step: &str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, StepFailed> {
    let why = match tokio::time::timeout(STEP_TIMEOUT, f).await {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("timed out after {STEP_TIMEOUT:?}"),
    };
    Err(StepFailed {
        step: step.into(),
        why,
    })
}

/// Sends `line`; the step succeeds if the answer is `OK`.
async fn ask(conn: &mut BufReader<TcpStream>, name: &str, line: String) -> Result<(), StepFailed> {
    let why = step(name, async {
        conn.get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .await?;
        let mut answer = String::new();
        if conn.read_line(&mut answer).await? == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(answer.trim_end().to_owned())
    })
    .await?;
    match why.as_str() {
        "OK" => Ok(()),
        _ => Err(StepFailed {
            step: name.into(),
            why,
        }),
    }
}

/// One attempt: every step in order, on a new connection (closed when
/// dropped, however it ends).
async fn attempt(
    addr: SocketAddr,
    token: &str,
    writes: &[(String, String)],
) -> Result<(), StepFailed> {
    let mut conn = BufReader::new(step("connect", TcpStream::connect(addr)).await?);
    ask(&mut conn, "auth", format!("AUTH {token}")).await?;
    ask(&mut conn, "begin", "BEGIN".into()).await?;
    for (i, (k, v)) in writes.iter().enumerate() {
        ask(&mut conn, &format!("write {i}"), format!("SET {k} {v}")).await?;
    }
    ask(&mut conn, "commit", "COMMIT".into()).await
}

/// The transaction, retried on a conflict with back-off; the number of
/// attempts it took.
pub async fn transact(
    addr: SocketAddr,
    token: &str,
    writes: Vec<(String, String)>,
) -> Result<u32, StepFailed> {
    let mut wait = BACKOFF;
    for n in 1.. {
        match attempt(addr, token, &writes).await {
            Err(e) if e.why == "CONFLICT" && n < ATTEMPTS => {}
            r => return r.map(|()| n),
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    unreachable!()
}

#[allow(dead_code)]
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (name, script) in txn_backend::scenarios() {
        let (addr, _) = txn_backend::spawn(script);
        match rt.block_on(transact(addr, "secret", txn_backend::writes())) {
            Ok(n) => println!("{name}: committed after {n} attempt(s)"),
            Err(e) => println!("{name}: {e}"),
        }
    }
}
