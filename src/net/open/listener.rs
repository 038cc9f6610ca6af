//! Listening sockets (TCP and Unix): the accept loop and the [`Listener`]
//! handle. Owns `ListenSource`, `ListenShared`, `Listener`.
//!
//! A listener is an [`EventSource`] in [`Mode::Edge`], as signals and
//! children are: `ListenSource` owns the socket and the factory, so the
//! socket is closed only when the loop drops the source, after its
//! descriptor left the selector (a listener stopped inside its own accept
//! loop closes its socket when that dispatch returns; a descriptor number
//! reused meanwhile is never deregistered under its new owner). The
//! [`Listener`] handles hold the shared state weakly and ask for removal.
//!
//! Each dispatch accepts up to [`Limits::accept_batch`] connections (asyncio: 100),
//! then yields to the rest of the turn. When accepting fails because the
//! process or system is out of file descriptors or memory (`EMFILE`, `ENFILE`,
//! `ENOBUFS`, `ENOMEM`), the error goes to the exception handler and the
//! listener stops accepting for [`Limits::accept_retry_delay`] (asyncio's 1 s), then
//! tries again: no busy loop on a socket that stays readable, and no crash.
//! Tests: tests/net_tcp_echo.rs, tests/net_accept_backoff.rs,
//! tests/net_fd_reuse.rs.

use crate::net::core::conn::Conn;
use crate::net::core::io::{Tcp, Wire};
use crate::net::open::drain::Tracker;
use crate::net::{Limits, Protocol, SockAddr};
use crate::reactor::{ExceptionContext, Ready, SourceKey, WeakLoop};
use crate::source::{EventSource, Mode, PostAction, Readiness, WeakSource};
use crate::{succeed, Deferred, Error, Failure, Handle, Loop};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};
use std::time::Duration;

pub(crate) type Factory = Box<dyn FnMut(&SockAddr) -> Box<dyn Protocol>>;

/// Run instead of `Conn::start` for each accepted connection: a TLS
/// listener layers the stream and handshakes before `connection_made`.
pub(crate) type AcceptHook = Box<dyn Fn(&Loop, &Rc<Conn>, &SockAddr)>;

pub(crate) enum ListenSock {
    Tcp(mio::net::TcpListener),
    /// The path is removed when the listener closes (asyncio 3.13's default).
    Unix {
        sock: mio::net::UnixListener,
        _path: UnlinkOnDrop,
    },
    /// A port of a simulated host (`crate::sim`): no descriptor.
    #[cfg(feature = "sim")]
    Sim(crate::sim::wire::SimListen),
}

/// A Unix socket path, removed from the file system on drop — only if the
/// file there is still the one this listener's `bind` created (same device
/// and inode), never a socket a new instance has bound at the path since
/// the file was unlinked by hand or by a restart script.
pub(crate) struct UnlinkOnDrop {
    path: std::path::PathBuf,
    /// `(dev, ino)` of the socket file right after `bind`.
    id: Option<(u64, u64)>,
}

impl UnlinkOnDrop {
    /// Records the identity of the file `bind` just created at `path`.
    pub(crate) fn bound(path: &std::path::Path) -> UnlinkOnDrop {
        UnlinkOnDrop {
            path: path.to_path_buf(),
            id: file_id(path),
        }
    }
}

fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        // A check then an unlink: another bind between the two could still
        // lose its file, but only within these two system calls, not for
        // the whole life of this listener.
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl ListenSock {
    fn accept(&self) -> io::Result<(Box<dyn Wire>, SockAddr)> {
        match self {
            ListenSock::Tcp(l) => l.accept().map(|(s, peer)| {
                let _ = s.set_nodelay(true);
                (Box::new(Tcp(s)) as Box<dyn Wire>, SockAddr::Inet(peer))
            }),
            ListenSock::Unix { sock, .. } => sock
                .accept()
                .map(|(s, peer)| (Box::new(s) as Box<dyn Wire>, SockAddr::from_unix(peer))),
            #[cfg(feature = "sim")]
            ListenSock::Sim(s) => s.accept(),
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            ListenSock::Tcp(l) => l,
            ListenSock::Unix { sock, .. } => sock,
            #[cfg(feature = "sim")]
            ListenSock::Sim(s) => s,
        }
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            ListenSock::Tcp(l) => Some(l.as_fd()),
            ListenSock::Unix { sock, .. } => Some(sock.as_fd()),
            #[cfg(feature = "sim")]
            ListenSock::Sim(_) => None,
        }
    }
}

struct ListenState {
    /// `stop_listening` was called: accept no more (the socket closes when
    /// the loop drops the source, at once or when its dispatch returns).
    stopped: bool,
    ready: bool,
    /// Set while accepting is suspended after fd exhaustion.
    backoff: Option<Handle>,
    accepted: u64,
    /// Stop accepting while this many accepted connections are open.
    max_connections: Option<usize>,
    /// The accept batch and retry delay, and what each accepted connection
    /// is given when `give` is set.
    limits: Limits,
    /// `set_limits` or `set_idle_timeout` was called: accepted connections
    /// get `limits` (else they keep the defaults, at no cost).
    give: bool,
}

/// A listening socket, as the loop's source: owns the socket (closed when
/// the loop drops it) and the factory.
pub(crate) struct ListenSource {
    sock: ListenSock,
    sh: Rc<ListenShared>,
    factory: Factory,
    accept_hook: Option<AcceptHook>,
}

/// What a listener's source shares with its [`Listener`] handles (which
/// hold it weakly: it goes with the source).
pub(crate) struct ListenShared {
    pub(crate) lp: WeakLoop,
    key: SourceKey,
    at: &'static Location<'static>,
    /// The socket's descriptor (none for a simulated one).
    fd: Option<RawFd>,
    st: RefCell<ListenState>,
    /// The connections it accepted that are still open (shared with the
    /// `Listener` handles, so a stopped listener can still drain them).
    conns: Rc<Tracker>,
}

/// Registers a bound listening socket.
pub(crate) fn listen(
    lp: &Loop,
    mut sock: ListenSock,
    factory: Factory,
    local: SockAddr,
    accept_hook: Option<AcceptHook>,
    at: &'static Location<'static>,
) -> Result<Listener, Error> {
    let fd = sock.fd().map(|f| f.as_raw_fd());
    if let Some(fd) = fd {
        set_backlog(fd, Limits::DEFAULT.backlog)?;
    }
    let conns = Rc::new(Tracker::default());
    let mut shared = None;
    let h = lp.add_source_with(at, |key, r| {
        if fd.is_none() {
            // A simulated socket: it wakes the source by its token.
            r.register(sock.source(), key.token(), mio::Interest::READABLE)?;
        }
        let sh = Rc::new(ListenShared {
            lp: lp.downgrade(),
            key,
            at,
            fd,
            st: RefCell::new(ListenState {
                stopped: false,
                ready: false,
                backoff: None,
                accepted: 0,
                max_connections: None,
                limits: Limits::DEFAULT,
                give: false,
            }),
            conns: conns.clone(),
        });
        shared = Some(Rc::downgrade(&sh));
        Ok(ListenSource {
            sock,
            sh,
            factory,
            accept_hook,
        })
    })?;
    let me = h.downgrade();
    h.detach(); // dropping every `Listener` does not stop it
    Ok(Listener {
        src: shared.expect("built"),
        me,
        local,
        conns,
    })
}

fn set_backlog(fd: RawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: `listen` on a descriptor we own (a bound listening socket);
    // calling it again on a listening socket only changes its backlog.
    if unsafe { libc::listen(fd, backlog) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether an accept error means "out of descriptors or memory": back off.
fn is_exhaustion(e: &io::Error) -> bool {
    use libc::{EMFILE, ENFILE, ENOBUFS, ENOMEM};
    e.raw_os_error()
        .is_some_and(|n| [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(&n))
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

impl EventSource for ListenSource {
    type Ret = PostAction;

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.sock.fd()
    }

    fn mode(&self) -> Mode {
        Mode::Edge
    }

    /// Accepts a batch and starts each connection.
    fn process(&mut self, lp: &Loop, r: Readiness) -> PostAction {
        let sh = self.sh.clone();
        let go = {
            let mut st = sh.st.borrow_mut();
            st.ready |= r.readable || r.woken;
            st.ready && st.backoff.is_none() && !st.stopped && !sh.at_cap(&st)
        };
        if !go {
            return PostAction::Continue;
        }
        let mut again = false;
        let batch = sh.st.borrow().limits.accept_batch.max(1);
        for _ in 0..batch {
            {
                let st = sh.st.borrow();
                if st.stopped || sh.at_cap(&st) {
                    break;
                }
            }
            match self.sock.accept() {
                Ok((io, peer)) => self.accept_one(lp, io, &peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    sh.st.borrow_mut().ready = false;
                    break;
                }
                Err(e) if is_transient(&e) => {}
                Err(e) => {
                    sh.back_off(lp, e);
                    break;
                }
            }
            again = true;
        }
        let st = sh.st.borrow();
        if st.stopped {
            PostAction::Remove
        } else if again && st.ready && st.backoff.is_none() && !sh.at_cap(&st) {
            PostAction::Again
        } else {
            PostAction::Continue
        }
    }

    fn name(&self) -> &'static str {
        match self.sock {
            ListenSock::Tcp(_) => "tcp listener",
            ListenSock::Unix { .. } => "unix listener",
            #[cfg(feature = "sim")]
            ListenSock::Sim(_) => "sim listener",
        }
    }
}

impl ListenSource {
    fn accept_one(&mut self, lp: &Loop, io: Box<dyn Wire>, peer: &SockAddr) {
        let sh = &self.sh;
        sh.st.borrow_mut().accepted += 1;
        let factory = &mut self.factory;
        let proto = match catch_unwind(AssertUnwindSafe(|| factory(peer))) {
            Ok(p) => p,
            Err(payload) => {
                let f = Failure::from_panic(payload, sh.at);
                return report(lp, "Exception in protocol factory", f, sh.at);
            }
        };
        match Conn::open(lp, io, proto, None, sh.at) {
            Ok(conn) => {
                // Count it until it is gone; below the cap again, accept again.
                let slot = sh.conns.insert(Rc::downgrade(&conn));
                let weak = Rc::downgrade(sh);
                let tracker = Rc::downgrade(&sh.conns);
                conn.set_on_lost(Box::new(move || {
                    if let Some(t) = tracker.upgrade() {
                        t.remove(slot);
                    }
                    let Some(src) = weak.upgrade() else { return };
                    let capped = src.st.borrow().max_connections.is_some();
                    if let (Some(lp), true) = (src.lp.upgrade(), capped) {
                        src.st.borrow_mut().ready = true; // connections may be waiting
                        lp.wake_source(src.key, Ready::EMPTY);
                    }
                }));
                let give = {
                    let st = sh.st.borrow();
                    st.give.then(|| st.limits.clone())
                };
                if let Some(limits) = give {
                    // Checked when it was set: high_water >= low_water.
                    let _ = conn.apply_limits(lp, &limits);
                }
                if let Some(hook) = &self.accept_hook {
                    return hook(lp, &conn, peer);
                }
                conn.start(lp);
            }
            Err(e) => report(
                lp,
                "registering an accepted connection failed",
                Failure::new(e),
                sh.at,
            ),
        }
    }
}

impl ListenShared {
    fn at_cap(&self, st: &ListenState) -> bool {
        st.max_connections
            .is_some_and(|max| self.conns.len() >= max)
    }

    /// Accepting failed for a reason that is not about one connection: report
    /// it, and suspend accepting for the retry delay (fd or memory exhaustion
    /// clears up as connections close; anything else would otherwise spin).
    fn back_off(self: &Rc<Self>, lp: &Loop, e: io::Error) {
        let delay = self.st.borrow().limits.accept_retry_delay;
        let message = if is_exhaustion(&e) {
            "accept failed (out of file descriptors or memory); accepting again after the retry delay"
        } else {
            "accept failed; accepting again after the retry delay"
        };
        report(lp, message, Failure::new(e), self.at);
        let weak = Rc::downgrade(self);
        let timer = lp.call_later(delay, move |lp| {
            if let Some(src) = weak.upgrade() {
                let mut st = src.st.borrow_mut();
                st.backoff = None;
                st.ready = true; // edge-triggered: connections may be waiting already
                drop(st);
                lp.wake_source(src.key, Ready::EMPTY);
            }
        });
        self.st.borrow_mut().backoff = timer.ok();
    }
}

fn report(lp: &Loop, message: &str, failure: Failure, at: &'static Location<'static>) {
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(&failure),
        location: Some(at),
    });
}

/// A listening socket: Twisted's `IListeningPort`, asyncio's `Server`.
///
/// It keeps listening until [`stop_listening`](Self::stop_listening) or until
/// the loop closes; dropping the handle does not stop it (as a [`Handle`]
/// does not cancel its call).
#[derive(Clone)]
pub struct Listener {
    pub(crate) src: Weak<ListenShared>,
    me: WeakSource<ListenSource>,
    local: SockAddr,
    pub(crate) conns: Rc<Tracker>,
}

impl Listener {
    /// The address actually bound (port 0 becomes the port the OS chose).
    pub fn local_addr(&self) -> &SockAddr {
        &self.local
    }

    fn with<R>(&self, f: impl FnOnce(&mut ListenState) -> R) -> Option<R> {
        let src = self.src.upgrade()?;
        let mut st = src.st.borrow_mut();
        if st.stopped {
            return None;
        }
        Some(f(&mut st))
    }

    /// Stops accepting and closes the socket now (a Unix socket's path is
    /// removed) — or, called while the listener's own accept loop runs (from
    /// its factory or an accepted connection's `connection_made`), when that
    /// loop returns, after the connection being accepted; connections
    /// already accepted are not touched. The returned Deferred has fired by
    /// the time this returns. Idempotent.
    #[track_caller]
    pub fn stop_listening(&self) -> Deferred<()> {
        if let Some(src) = self.src.upgrade() {
            let backoff = {
                let mut st = src.st.borrow_mut();
                st.stopped = true;
                st.backoff.take()
            };
            if let Some(h) = backoff {
                h.cancel();
            }
            self.me.remove();
        }
        succeed(())
    }

    /// The listening socket's file descriptor while it is open.
    pub fn raw_fd(&self) -> Option<RawFd> {
        let src = self.src.upgrade()?;
        self.with(|_| src.fd).flatten()
    }

    /// Whether the listener is still accepting (or backing off).
    pub fn is_listening(&self) -> bool {
        self.with(|_| ()).is_some()
    }

    /// Whether accepting is suspended after an fd-exhaustion error.
    pub fn is_backing_off(&self) -> bool {
        self.with(|st| st.backoff.is_some()).unwrap_or(false)
    }

    /// Sets how long to wait after an accept error before accepting again
    /// (default [`Limits::accept_retry_delay`], 1 s).
    pub fn set_accept_retry_delay(&self, delay: Duration) {
        self.with(|st| st.limits.accept_retry_delay = delay);
    }

    /// Sets the listener's limits: its accept batch, retry delay and
    /// backlog now, and everything else for each connection it accepts from
    /// now on (see [`Transport::set_limits`](crate::net::Transport::set_limits));
    /// connections already accepted keep theirs.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high_water >= low_water`, or for a
    /// negative backlog (then nothing changes); the OS error of `listen`;
    /// [`Error::Gone`] if the listener stopped.
    pub fn set_limits(&self, limits: &Limits) -> Result<(), Error> {
        if limits.high_water < limits.low_water || limits.backlog < 0 {
            return Err(Error::InvalidInput(
                "limits need high_water >= low_water and a backlog >= 0",
            ));
        }
        if !self.is_listening() {
            return Err(Error::Gone);
        }
        if let Some(fd) = self.raw_fd() {
            set_backlog(fd, limits.backlog)?;
        }
        self.with(|st| {
            st.limits = limits.clone();
            st.give = true;
        });
        Ok(())
    }

    /// The limits set with [`set_limits`](Self::set_limits) (and
    /// [`set_idle_timeout`](Self::set_idle_timeout),
    /// [`set_accept_retry_delay`](Self::set_accept_retry_delay)); the
    /// defaults before, and once the listener stopped.
    pub fn limits(&self) -> Limits {
        self.with(|st| st.limits.clone()).unwrap_or_default()
    }

    /// Stops accepting while `max` accepted connections are open (the rest
    /// wait in the kernel's backlog), and accepts again as they close; `None`
    /// (the default) for no limit.
    pub fn set_max_connections(&self, max: Option<usize>) {
        if let Some(src) = self.src.upgrade() {
            let mut st = src.st.borrow_mut();
            st.max_connections = max;
            st.ready = true; // below a new cap, connections may be waiting
            drop(st);
            if let Some(lp) = src.lp.upgrade() {
                lp.wake_source(src.key, Ready::EMPTY);
            }
        }
    }

    /// The transports of the accepted connections still open (to close
    /// them, say, when shutting down).
    pub fn connections(&self) -> Vec<crate::net::Transport> {
        self.conns.transports()
    }

    /// Accepted connections still open (also after `stop_listening`).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Gives every connection accepted from now on an idle timeout (see
    /// [`Transport::set_idle_timeout`](crate::net::Transport::set_idle_timeout)):
    /// a peer that sends nothing for `timeout` is disconnected. `None` (the
    /// default) for none.
    pub fn set_idle_timeout(&self, timeout: Option<Duration>) {
        self.with(|st| {
            st.limits.idle_timeout = timeout;
            st.give = true;
        });
    }

    /// Sets the listen backlog: how many connections the kernel queues before
    /// they are accepted. The default is the system's maximum
    /// ([`Limits::backlog`]); the kernel clamps larger values.
    ///
    /// # Errors
    /// The OS error of `listen`; [`Error::Gone`] if the listener stopped.
    pub fn set_backlog(&self, backlog: u32) -> Result<(), Error> {
        let fd = self.raw_fd().ok_or(Error::Gone)?;
        set_backlog(fd, i32::try_from(backlog).unwrap_or(i32::MAX))?;
        Ok(())
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.src.upgrade().map_or(0, |s| s.st.borrow().accepted)
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
