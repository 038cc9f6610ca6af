//! The Rust echo servers, one per contender. Same semantics for all: every
//! byte of a connection goes back as received, TCP_NODELAY on, one thread,
//! reads of up to 256 KiB, and reading stops while 64 KiB or more wait to be
//! written (the high-water mark). deferloop's transports also bound a read by
//! the room left below that mark (more once the peer keeps up: see the
//! library's `dispatch::read`); `deferloop-mark256` is the same echo with the
//! mark at 256 KiB, the control.
//! Each binds `127.0.0.1:0` and returns the address it bound.

use crate::common::coro::{Stream, StreamProtocol};
use crate::echo_example;
use crate::embed_tokio;
use crate::sizes::READ_SIZE;
use deferloop::EventLoop;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

/// Runs server `name` (`deferloop`, `deferloop-mark256`, `deferloop-coro`, `deferloop-reads`,
/// `deferloop-in-tokio`, `deferloop-2loops`, `tokio`, `tokio-mt2`, `mio`, or
/// with TLS `deferloop-tls` and `tokio-tls`, see `tls.rs`; or the
/// request/response servers `rr-raw` and `rr-reads`, see `rr.rs`) on `127.0.0.1:0`;
/// `bound` is called with the address once it listens. Returns only on error.
pub fn run(name: &str, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    match name {
        "deferloop" => {
            // examples/echo_server.rs as it is: `data_received` writes the
            // slice of the loop's read buffer back.
            let ev = EventLoop::new()?;
            let l = echo_example::start(&ev, any).map_err(io::Error::other)?;
            bound(l.local_addr().as_inet().unwrap());
            ev.run().map_err(io::Error::other)
        }
        "deferloop-mark256" => {
            // The control for the read bound: the same echo, its write
            // buffer's high-water mark raised to the read size, so that no
            // read is cut at 64 KiB (the library's default, which bounds
            // what a peer that stops reading leaves buffered).
            let ev = EventLoop::new()?;
            let l = ev
                .listen_tcp(any, || BigMark(echo_example::Echo))
                .map_err(io::Error::other)?;
            bound(l.local_addr().as_inet().unwrap());
            ev.run().map_err(io::Error::other)
        }
        "deferloop-coro" => {
            let ev = EventLoop::new()?;
            let l = ev
                .listen_tcp(any, || StreamProtocol::new(echo_task))
                .map_err(io::Error::other)?;
            bound(l.local_addr().as_inet().unwrap());
            ev.run().map_err(io::Error::other)
        }
        "deferloop-reads" => {
            // The building blocks' cost: a `Stream` per connection, each
            // chunk a `read_some()` Deferred, re-armed from its callback.
            let ev = EventLoop::new()?;
            let l = deferloop::net::Stream::listen_tcp(&ev, any, echo_reads)
                .map_err(io::Error::other)?;
            bound(l.local_addr().as_inet().unwrap());
            ev.run().map_err(io::Error::other)
        }
        "deferloop-in-tokio" => {
            // The same echo server, driven from a tokio current-thread
            // runtime through the loop's fd, timeout and non-waiting turn.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let ev = EventLoop::new()?;
            let l = echo_example::start(&ev, any).map_err(io::Error::other)?;
            bound(l.local_addr().as_inet().unwrap());
            rt.block_on(embed_tokio::drive(&ev))
        }
        "deferloop-2loops" => {
            // Two loops on two threads, each accepting from its own
            // SO_REUSEPORT socket (not pinned: the client shares the cores).
            let cores = deferloop::cores::Cores::builder()
                .loops(2)
                .listen_tcp(any, |_| echo_example::Echo)
                .start(|_, _| Ok(()))
                .map_err(io::Error::other)?;
            bound(cores.local_addrs()[0]);
            cores.wait().map_err(io::Error::other)
        }
        "tokio" => tokio_server(any, bound),
        "tokio-mt2" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_io()
                .build()?;
            rt.block_on(tokio_accept(any, bound))
        }
        "mio" => mio_server(any, bound),
        "rr-raw" | "rr-reads" => crate::rr::run(name, any, bound),
        #[cfg(feature = "tls")]
        "deferloop-tls" => crate::tls::deferloop(any, bound),
        "tokio-tls" => crate::tls::tokio(any, bound),
        _ => Err(io::Error::other(format!("no server named {name}"))),
    }
}

/// `examples/echo_server.rs`'s protocol with a write buffer high-water mark of
/// [`READ_SIZE`]: see `deferloop-mark256`.
struct BigMark(echo_example::Echo);

impl deferloop::net::Protocol for BigMark {
    fn connection_made(&mut self, t: &deferloop::net::Transport) {
        t.set_write_buffer_limits(Some(READ_SIZE), None)
            .expect("a valid mark");
    }
    fn data_received(&mut self, t: &deferloop::net::Transport, data: &[u8]) {
        self.0.data_received(t, data);
    }
    fn pause_writing(&mut self, t: &deferloop::net::Transport) {
        self.0.pause_writing(t);
    }
    fn resume_writing(&mut self, t: &deferloop::net::Transport) {
        self.0.resume_writing(t);
    }
}

/// Room for a [`READ_SIZE`] buffer that starts on a page boundary, as
/// deferloop's read buffer does: on this project's AMD machines the kernel's
/// copies to and from a buffer 16 bytes into a page (where a `Vec` of this
/// size lands) measured up to twice as slow for messages of whole pages, so
/// the tokio and mio servers get the same alignment and the comparison is of
/// the loops, not of where the allocator put a buffer (BENCHMARKS.md).
fn page_aligned_buf() -> Vec<u8> {
    vec![0u8; READ_SIZE + 4096]
}

/// The page-aligned [`READ_SIZE`] bytes of a [`page_aligned_buf`].
fn aligned(raw: &mut [u8]) -> &mut [u8] {
    let off = raw.as_ptr().align_offset(4096);
    &mut raw[off..off + READ_SIZE]
}

/// The coroutine contender's per-connection task: asyncio's streams echo
/// (`read`, `write`, `drain`), on deferloop's loop and transport.
async fn echo_task(s: Stream) {
    let mut buf = Vec::with_capacity(READ_SIZE);
    while s.read_into(&mut buf).await > 0 {
        s.write(&buf);
        s.drain().await;
    }
    s.close();
}

/// The Deferred-reads contender's connection: `read_some()`, write what
/// came, ask again; close at the end of file. Backpressure is the default
/// one: the connection is not read while its write buffer is above the
/// high-water mark.
fn echo_reads(s: deferloop::net::Stream) {
    let _ = s
        .read_some()
        .add_both(move |r: Result<Vec<u8>, deferloop::Failure>| {
            match r {
                Ok(data) if !data.is_empty() => {
                    s.write(&data);
                    echo_reads(s);
                }
                _ => s.close(),
            }
            Ok::<(), deferloop::Failure>(())
        });
}

/// Idiomatic tokio: a current-thread runtime, one spawned task per
/// connection, a `read` / `write_all` loop on a buffer of [`READ_SIZE`]
/// (`tokio-mt2`: the same on a multi-thread runtime with 2 workers).
fn tokio_server(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(tokio_accept(addr, bound))
}

/// The accept loop and per-connection task of the tokio servers.
async fn tokio_accept(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    bound(listener.local_addr()?);
    loop {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        tokio::spawn(async move {
            let mut raw = page_aligned_buf();
            let buf = aligned(&mut raw);
            loop {
                let n = match s.read(buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Stop reading a connection while this much waits to be written.
const MIO_BACKLOG: usize = 64 * 1024;

struct MioConn {
    sock: mio::net::TcpStream,
    /// Bytes the socket did not take yet: `out[sent..]`.
    out: Vec<u8>,
    sent: usize,
    readable: bool,
    /// The peer's FIN was signalled: read on to end-of-file.
    read_closed: bool,
    writable: bool,
}

impl MioConn {
    fn backlog(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Writes `data` now; keeps what the socket does not take.
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let mut n = 0;
        if self.backlog() == 0 && self.writable {
            while n < data.len() {
                match self.sock.write(&data[n..]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.writable = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if n < data.len() {
            if self.sent > 0 {
                self.out.drain(..self.sent);
                self.sent = 0;
            }
            self.out.extend_from_slice(&data[n..]);
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.writable && self.backlog() > 0 {
            match self.sock.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => self.sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.backlog() == 0 {
            self.out.clear();
            self.sent = 0;
        }
        Ok(())
    }

    /// Flushes, then reads and echoes until `WouldBlock`, a short read, or
    /// the backlog limit. `Ok(false)`: the peer closed.
    fn drive(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.flush()?;
        while self.readable && self.backlog() < MIO_BACKLOG {
            match self.sock.read(buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    if n < buf.len() && !self.read_closed {
                        self.readable = false;
                    }
                    self.send(&buf[..n])?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// What an expert writes on mio: edge-triggered, each socket registered once
/// for reading and writing, read until `WouldBlock` or a short read into one
/// shared buffer of [`READ_SIZE`], write directly, buffer only the remainder.
fn mio_server(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    use mio::{Events, Interest, Poll, Token};
    const LISTENER: Token = Token(usize::MAX);
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut listener = mio::net::TcpListener::bind(addr)?;
    bound(listener.local_addr()?);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns = slab::Slab::<MioConn>::new();
    let mut raw = page_aligned_buf();
    let buf = aligned(&mut raw);
    loop {
        match poll.poll(&mut events, None) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut sock, _)) => {
                            sock.set_nodelay(true)?;
                            let entry = conns.vacant_entry();
                            poll.registry().register(
                                &mut sock,
                                Token(entry.key()),
                                Interest::READABLE | Interest::WRITABLE,
                            )?;
                            entry.insert(MioConn {
                                sock,
                                out: Vec::new(),
                                sent: 0,
                                readable: false,
                                read_closed: false,
                                writable: false,
                            });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            let key = ev.token().0;
            let Some(c) = conns.get_mut(key) else {
                continue;
            };
            c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
            c.read_closed |= ev.is_read_closed() || ev.is_error();
            c.writable |= ev.is_writable() || ev.is_error();
            if !matches!(c.drive(buf), Ok(true)) {
                let mut c = conns.remove(key);
                let _ = poll.registry().deregister(&mut c.sock);
            }
        }
    }
}

/// Asserts that `addr` echoes (used by the smoke).
pub fn check_echo(addr: SocketAddr) -> io::Result<()> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let msg: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut back = vec![0; msg.len()];
    std::thread::scope(|sc| {
        let mut w = s.try_clone()?;
        let writer = sc.spawn(move || w.write_all(&msg).map(|()| msg));
        s.read_exact(&mut back)?;
        let msg = writer.join().unwrap()?;
        assert!(msg == back, "the echo differs from what was sent");
        Ok::<(), io::Error>(())
    })?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)?;
    assert!(
        rest.is_empty(),
        "the server closes after the client's end-of-file"
    );
    Ok(())
}
