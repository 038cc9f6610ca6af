//! Echo server, async style on tokio's current-thread runtime. The twin of
//! `echo_deferloop.rs`.
//!
//! Run: `cargo run --example compare_echo_tokio -- 127.0.0.1:7000`

use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo(mut conn: TcpStream) -> io::Result<()> {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        // Backpressure: the next read waits until the peer took this echo.
        conn.write_all(&buf[..n]).await?;
    }
}

pub async fn serve(listener: TcpListener) -> io::Result<()> {
    loop {
        let (conn, _) = listener.accept().await?;
        conn.set_nodelay(true)?;
        tokio::task::spawn_local(async move {
            let _ = echo(conn).await;
        });
    }
}

#[allow(dead_code)]
fn main() -> io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, async {
        let listener = TcpListener::bind(addr).await?;
        println!("{}", listener.local_addr()?);
        serve(listener).await
    })
}
