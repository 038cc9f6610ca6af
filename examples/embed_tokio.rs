//! deferloop inside a tokio current-thread runtime: one thread serves a
//! deferloop echo server (callbacks, no async) and a tokio echo server (async)
//! side by side. The loop is driven with its fd (`AsyncFd`), its timeout (a
//! tokio sleep) and a turn that never waits. Prints both bound addresses.
//!
//! Run: `cargo run --release --example embed_tokio -- 127.0.0.1:7000 127.0.0.1:7001`
//! (each defaults to `127.0.0.1:0`, any free port).

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Loop, Remote};
use std::io;
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::process::ExitCode;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};

/// Drives `lp` from inside a tokio runtime until it is stopped: the whole of
/// the host's side of embedding.
pub async fn drive(lp: &Loop) -> io::Result<()> {
    // SAFETY: `PollFd` holds a `Loop`, which keeps the loop's selector, and so
    // its descriptor, open and unchanged for as long as the `AsyncFd` lives.
    let fd = unsafe { AsyncFd::register_with_interest(PollFd(lp.clone()), Interest::READABLE) }?;
    loop {
        if lp
            .run_once_timeout(Duration::ZERO)
            .map_err(io::Error::other)?
        {
            return Ok(()); // stop() was called
        }
        match lp.timeout() {
            // Callbacks queued: let tokio's tasks run, then another turn.
            Some(t) if t.is_zero() => tokio::task::yield_now().await,
            // Edge-triggered in tokio: clear before the turn, never after.
            None => fd.readable().await?.clear_ready(),
            Some(t) => {
                // A timer: wait for the fd or the deadline (rounded up to 1 ms).
                if let Ok(g) = tokio::time::timeout(t, fd.readable()).await {
                    g?.clear_ready();
                }
            }
        }
    }
}

/// The loop's fd, kept open by the `Loop` it holds.
struct PollFd(Loop);

impl AsRawFd for PollFd {
    fn as_raw_fd(&self) -> std::os::unix::io::RawFd {
        self.0.as_raw_fd()
    }
}

/// The deferloop echo protocol (as examples/echo_server.rs).
struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

/// A tokio echo server on `listener`, one task per connection.
async fn tokio_echo(listener: tokio::net::TcpListener) -> io::Result<()> {
    loop {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Serves a deferloop echo server on `ours` and a tokio one on `theirs`, on
/// this thread, until the loop is stopped (through the `Remote` that `bound`
/// gets with both bound addresses).
pub fn serve(
    ours: SocketAddr,
    theirs: SocketAddr,
    bound: impl FnOnce(Remote, SocketAddr, SocketAddr),
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ev = EventLoop::new()?;
    let listener = ev.listen_tcp(ours, || Echo)?;
    rt.block_on(async {
        let tokio_listener = tokio::net::TcpListener::bind(theirs).await?;
        let local = listener.local_addr().as_inet().expect("tcp");
        bound(ev.remote(), local, tokio_listener.local_addr()?);
        tokio::select! {
            r = drive(&ev) => r,
            r = tokio_echo(tokio_listener) => r,
        }
    })?;
    Ok(())
}

fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args = args.into_iter();
    let mut addr = |name: &str| -> Result<SocketAddr, String> {
        let a = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
        a.parse().map_err(|e| format!("{name} address {a:?}: {e}"))
    };
    let (ours, theirs) = (addr("deferloop")?, addr("tokio")?);
    serve(ours, theirs, |_, ours, theirs| {
        println!("deferloop echo on {ours}, tokio echo on {theirs}, one thread");
    })
}

#[allow(dead_code)]
fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embed_tokio: {e}");
            ExitCode::FAILURE
        }
    }
}
