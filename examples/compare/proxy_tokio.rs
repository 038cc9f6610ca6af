//! TCP proxy with backpressure both ways, async style on tokio. The twin of
//! `proxy_deferloop.rs`.
//!
//! Run: `cargo run --example compare_proxy_tokio -- 127.0.0.1:7002 127.0.0.1:7000`

use std::io;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};

/// Relays until both directions are done. `copy_bidirectional` reads one side
/// only while the write to the other can proceed (backpressure), and passes
/// each side's EOF on as a half-close.
async fn relay(mut client: TcpStream, target: SocketAddr) -> io::Result<()> {
    let mut upstream = TcpStream::connect(target).await?;
    upstream.set_nodelay(true)?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

pub async fn serve(listener: TcpListener, target: SocketAddr) -> io::Result<()> {
    loop {
        let (client, _) = listener.accept().await?;
        client.set_nodelay(true)?;
        tokio::task::spawn_local(async move {
            let _ = relay(client, target).await;
        });
    }
}

#[allow(dead_code)]
fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let target: SocketAddr = match args.next().map(|t| t.parse()) {
        Some(Ok(t)) => t,
        _ => return Err(io::Error::other("usage: proxy LISTEN TARGET")),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, async {
        let listener = TcpListener::bind(addr).await?;
        println!("{}", listener.local_addr()?);
        serve(listener, target).await
    })
}
