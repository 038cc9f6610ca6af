//! Listening sockets (TCP and Unix): the accept loop and the [`Listener`]
//! handle. Owns `ListenState`, `Listener`.
//!
//! Each dispatch accepts up to [`ACCEPT_BATCH`] connections (asyncio: 100),
//! then yields to the rest of the turn. When accepting fails because the
//! process or system is out of file descriptors or memory (`EMFILE`, `ENFILE`,
//! `ENOBUFS`, `ENOMEM`), the error goes to the exception handler and the
//! listener stops accepting for [`ACCEPT_RETRY_DELAY`] (asyncio's 1 s), then
//! tries again: no busy loop on a socket that stays readable, and no crash.
//! Tests: tests/net_tcp_listen.rs, tests/net_accept_backoff.rs.

use super::stream::{self, Sock};
use super::{Protocol, SockAddr};
use crate::reactor::io::{IoKey, Kind, Owner, Registry};
use crate::reactor::ExceptionContext;
use crate::{succeed, Deferred, Failure, Handle, Loop};
use std::fmt;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::time::Duration;

#[cfg(unix)]
use std::os::unix::io::AsRawFd;

/// Connections accepted per dispatch, at most.
pub const ACCEPT_BATCH: usize = 128;
/// How long a listener waits after running out of file descriptors.
pub const ACCEPT_RETRY_DELAY: Duration = Duration::from_secs(1);

pub(crate) type Factory = Box<dyn FnMut() -> Box<dyn Protocol>>;

pub(crate) enum ListenSock {
    Tcp(mio::net::TcpListener),
    /// The path is removed when the listener closes (asyncio 3.13's default).
    #[cfg(unix)]
    Unix {
        sock: mio::net::UnixListener,
        _path: UnlinkOnDrop,
    },
}

/// A Unix socket path, removed from the file system on drop.
#[cfg(unix)]
pub(crate) struct UnlinkOnDrop(pub(crate) std::path::PathBuf);

#[cfg(unix)]
impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl ListenSock {
    fn accept(&self) -> io::Result<Sock> {
        match self {
            ListenSock::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Sock::Tcp(s)
            }),
            #[cfg(unix)]
            ListenSock::Unix { sock, .. } => sock.accept().map(|(s, _)| Sock::Unix(s)),
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            ListenSock::Tcp(l) => l,
            #[cfg(unix)]
            ListenSock::Unix { sock, .. } => sock,
        }
    }

    #[cfg(unix)]
    fn fd(&self) -> std::os::unix::io::RawFd {
        match self {
            ListenSock::Tcp(l) => l.as_raw_fd(),
            ListenSock::Unix { sock, .. } => sock.as_raw_fd(),
        }
    }
}

/// What the registry keeps for a listening socket.
pub(crate) struct ListenState {
    sock: ListenSock,
    /// `None` while a dispatch calls it.
    factory: Option<Factory>,
    ready: bool,
    /// Set while accepting is suspended after fd exhaustion.
    backoff: Option<Handle>,
    retry_delay: Duration,
    accepted: u64,
}

impl ListenState {
    pub(crate) fn kind_name(&self) -> &'static str {
        match self.sock {
            ListenSock::Tcp(_) => "tcp listener",
            #[cfg(unix)]
            ListenSock::Unix { .. } => "unix listener",
        }
    }
}

fn state(io: &mut Registry, key: IoKey) -> Option<&mut ListenState> {
    match &mut io.get_mut(key)?.kind {
        Kind::Listen(l) => Some(l),
        _ => None,
    }
}

/// Registers a bound listening socket.
pub(crate) fn listen(
    lp: &Loop,
    mut sock: ListenSock,
    factory: Factory,
    local: SockAddr,
    at: &'static Location<'static>,
) -> io::Result<Listener> {
    let mut cx = lp.io_ctx();
    let key = cx.io.vacant_key();
    cx.poll
        .registry()
        .register(sock.source(), key.token(), mio::Interest::READABLE)?;
    #[cfg(unix)]
    cx.io.set_fd(sock.fd(), key, Owner::Transport);
    let state = ListenState {
        sock,
        factory: Some(factory),
        ready: false,
        backoff: None,
        retry_delay: ACCEPT_RETRY_DELAY,
        accepted: 0,
    };
    cx.io.insert_at(key, Kind::Listen(state), at);
    cx.io.get_mut(key).expect("just inserted").interest = Some(mio::Interest::READABLE);
    Ok(Listener {
        lp: lp.clone(),
        key,
        local,
    })
}

/// Whether an accept error means "out of descriptors or memory": back off.
fn is_exhaustion(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        use libc_errno::{EMFILE, ENFILE, ENOBUFS, ENOMEM};
        const EXHAUSTION: [i32; 4] = [EMFILE, ENFILE, ENOBUFS, ENOMEM];
        e.raw_os_error().is_some_and(|n| EXHAUSTION.contains(&n))
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::OutOfMemory
    }
}

/// The errno values involved (the same on Linux and the BSDs, but for
/// `ENOBUFS`), without a libc dependency.
#[cfg(unix)]
mod libc_errno {
    pub const ENOMEM: i32 = 12;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub const ENOBUFS: i32 = 105;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub const ENOBUFS: i32 = 55;
}

/// Errors that concern one incoming connection only: skip it, go on.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::PermissionDenied
    )
}

/// Step 6 for a listener: accept a batch, start each connection.
pub(crate) fn dispatch(lp: &Loop, key: IoKey) {
    let factory = {
        let mut cx = lp.io_ctx();
        let Some(src) = cx.io.get_mut(key) else {
            return;
        };
        let readable = std::mem::take(&mut src.readable);
        src.writable = false;
        let Kind::Listen(l) = &mut src.kind else {
            return;
        };
        l.ready |= readable;
        if l.ready && l.backoff.is_none() {
            l.factory.take()
        } else {
            None
        }
    };
    let Some(mut factory) = factory else {
        if let Some(src) = lp.io_ctx().io.get_mut(key) {
            src.queued = false;
        }
        return;
    };
    let at = lp
        .io_ctx()
        .io
        .get(key)
        .map_or(Location::caller(), |s| s.registered_at);
    for _ in 0..ACCEPT_BATCH {
        let r = {
            let mut cx = lp.io_ctx();
            let Some(l) = state(&mut cx.io, key) else {
                break;
            };
            l.sock.accept()
        };
        match r {
            Ok(sock) => accept_one(lp, key, sock, &mut factory, at),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Some(l) = state(&mut lp.io_ctx().io, key) {
                    l.ready = false;
                }
                break;
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                back_off(lp, key, e, at);
                break;
            }
        }
    }
    let mut cx = lp.io_ctx();
    let Some(src) = cx.io.get_mut(key) else {
        drop(cx);
        drop(factory); // stopped from inside the factory: drop it outside any borrow
        return;
    };
    src.queued = false;
    if let Kind::Listen(l) = &mut src.kind {
        l.factory = Some(factory);
        if l.ready && l.backoff.is_none() {
            lp.queue_dispatch(&mut cx.io, key);
        }
    }
}

fn accept_one(
    lp: &Loop,
    key: IoKey,
    sock: Sock,
    factory: &mut Factory,
    at: &'static Location<'static>,
) {
    let conn = match stream::register(lp, sock, None, None, at) {
        Ok(k) => k,
        Err(e) => {
            report(
                lp,
                "registering an accepted connection failed",
                e.into(),
                at,
            );
            return;
        }
    };
    if let Some(l) = state(&mut lp.io_ctx().io, key) {
        l.accepted += 1;
    }
    match catch_unwind(AssertUnwindSafe(&mut *factory)) {
        Ok(proto) => {
            stream::start(lp, conn, proto);
        }
        Err(payload) => {
            let garbage = stream::discard(lp, conn);
            drop(garbage);
            report(
                lp,
                "Exception in protocol factory",
                Failure::from_panic(payload, at),
                at,
            );
        }
    }
}

fn report(lp: &Loop, message: &str, failure: Failure, at: &'static Location<'static>) {
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(&failure),
        location: Some(at),
    });
}

/// Accepting failed for a reason that is not about one connection: report it,
/// and suspend accepting for the retry delay (fd or memory exhaustion clears
/// up as connections close; anything else would otherwise spin).
fn back_off(lp: &Loop, key: IoKey, e: io::Error, at: &'static Location<'static>) {
    let delay = state(&mut lp.io_ctx().io, key).map_or(ACCEPT_RETRY_DELAY, |l| l.retry_delay);
    let message = if is_exhaustion(&e) {
        "accept failed (out of file descriptors or memory); accepting again after the retry delay"
    } else {
        "accept failed; accepting again after the retry delay"
    };
    report(lp, message, Failure::new(e), at);
    let timer = lp.call_later(delay, move |lp| {
        let mut cx = lp.io_ctx();
        if let Some(l) = state(&mut cx.io, key) {
            l.backoff = None;
            l.ready = true; // edge-triggered: connections may be waiting already
            lp.queue_dispatch(&mut cx.io, key);
        }
    });
    if let (Ok(h), Some(l)) = (timer, state(&mut lp.io_ctx().io, key)) {
        l.backoff = Some(h);
    }
}

/// A listening socket: Twisted's `IListeningPort`, asyncio's `Server`.
///
/// It keeps listening until [`stop_listening`](Self::stop_listening) or until
/// the loop closes; dropping the handle does not stop it (as a [`Handle`]
/// does not cancel its call).
#[derive(Clone)]
pub struct Listener {
    lp: Loop,
    key: IoKey,
    local: SockAddr,
}

impl Listener {
    /// The address actually bound (port 0 becomes the port the OS chose).
    pub fn local_addr(&self) -> &SockAddr {
        &self.local
    }

    /// Stops accepting and closes the socket now (a Unix socket's path is
    /// removed); connections already accepted are not touched. The returned
    /// Deferred has fired by the time this returns. Idempotent.
    #[track_caller]
    pub fn stop_listening(&self) -> Deferred<()> {
        let garbage = {
            let mut cx = self.lp.io_ctx();
            match state(&mut cx.io, self.key) {
                Some(l) => {
                    let _ = cx.poll.registry().deregister(l.sock.source());
                    #[cfg(unix)]
                    {
                        let fd = l.sock.fd();
                        cx.io.clear_fd_for(fd, self.key);
                    }
                    cx.io.remove(self.key)
                }
                None => None,
            }
        };
        if let Some(crate::reactor::io::Source {
            kind: Kind::Listen(l),
            ..
        }) = &garbage
        {
            if let Some(h) = &l.backoff {
                h.cancel();
            }
        }
        drop(garbage);
        succeed(())
    }

    /// The listening socket's file descriptor while it is open.
    #[cfg(unix)]
    pub fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        state(&mut self.lp.io_ctx().io, self.key).map(|l| l.sock.fd())
    }

    /// Whether the listener is still accepting (or backing off).
    pub fn is_listening(&self) -> bool {
        state(&mut self.lp.io_ctx().io, self.key).is_some()
    }

    /// Whether accepting is suspended after an fd-exhaustion error.
    pub fn is_backing_off(&self) -> bool {
        state(&mut self.lp.io_ctx().io, self.key).is_some_and(|l| l.backoff.is_some())
    }

    /// Sets how long to wait after an accept error before accepting again
    /// (default [`ACCEPT_RETRY_DELAY`], 1 s).
    pub fn set_accept_retry_delay(&self, delay: Duration) {
        if let Some(l) = state(&mut self.lp.io_ctx().io, self.key) {
            l.retry_delay = delay;
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        state(&mut self.lp.io_ctx().io, self.key).map_or(0, |l| l.accepted)
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local)
            .field("listening", &self.is_listening())
            .finish()
    }
}
