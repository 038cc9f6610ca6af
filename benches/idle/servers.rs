//! The two idle-connection servers. Same semantics for both: one thread,
//! TCP_NODELAY on each accepted socket, the same listen backlog, an idle
//! timeout of [`IDLE_TIMEOUT`] per connection that every read pushes back,
//! and every byte echoed. [`OPEN`] counts the connections a server has set
//! up (its timer armed) and not yet closed: the harness polls it.
//! Each binds `127.0.0.1:0` and returns the address it bound.

use deferloop::net::{Limits, Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const DEFAULT_BACKLOG: i32 = Limits::DEFAULT.backlog;

/// Longer than a sample: no connection times out while measured.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Connections set up and not closed yet, in this server process.
pub static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Runs server `name` (`deferloop` or `tokio`) on `127.0.0.1:0`; `bound` is
/// called with the address once it listens. Returns only on error.
pub fn run(name: &str, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    match name {
        "deferloop" => deferloop_server(any, bound),
        "tokio" => tokio_server(any, bound),
        _ => Err(io::Error::other(format!("no server named {name}"))),
    }
}

/// The deferloop contender: a plain `Protocol` that echoes, and the
/// library's idle timeout set once on the listener
/// (`Listener::set_idle_timeout`, what a user reaches for): each accepted
/// connection gets a timer, and a read only records the time (the timer
/// re-arms itself lazily when it fires). Reads go through the loop's one
/// shared read buffer (the library default).
fn deferloop_server(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    struct Idle;
    impl Protocol for Idle {
        fn connection_made(&mut self, _: &Transport) {
            OPEN.fetch_add(1, Ordering::Relaxed);
        }
        fn data_received(&mut self, t: &Transport, data: &[u8]) {
            t.write(data);
        }
        fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let ev = EventLoop::new()?;
    let l = ev.listen_tcp(addr, || Idle).map_err(io::Error::other)?;
    l.set_idle_timeout(Some(IDLE_TIMEOUT));
    bound(l.local_addr().as_inet().unwrap());
    ev.run().map_err(io::Error::other)
}

/// What tokio's own `examples/echo.rs` reads into, per connection.
pub const TOKIO_BUF: usize = 1024;

/// The tokio contender, as a tokio user writes it: a current-thread runtime,
/// a task per connection with its own buffer of [`TOKIO_BUF`] bytes, and
/// `tokio::time::timeout` around each `read` (a new deadline per read). The
/// listener gets deferloop's default backlog (tokio's `bind` would use 1024).
fn tokio_server(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(addr)?;
        let listener = sock.listen(DEFAULT_BACKLOG as u32)?;
        bound(listener.local_addr()?);
        loop {
            let mut s = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    eprintln!("idle server tokio: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            s.set_nodelay(true)?;
            tokio::spawn(async move {
                OPEN.fetch_add(1, Ordering::Relaxed);
                let mut buf = vec![0u8; TOKIO_BUF];
                while let Ok(Ok(n @ 1..)) =
                    tokio::time::timeout(IDLE_TIMEOUT, s.read(&mut buf)).await
                {
                    if s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                OPEN.fetch_sub(1, Ordering::Relaxed);
            });
        }
    })
}
