//! The `ps` socket: the loop publishes [`Report`]s onto a board, a server
//! thread answers from the latest one. Owns `Board`, [`PsServer`], [`serve`],
//! [`serve_in`], [`query`] and the peer check.
//!
//! The loop's thread publishes (builds a `Report`, on the loop's thread,
//! between callbacks) when the server asks — through the loop's `Remote`, so
//! an idle loop wakes for it — and, while something is served, at most once a
//! second at the start of a turn's callbacks. The server thread waits a short
//! while for a fresh one; a loop blocked inside a callback cannot publish, so
//! the server answers from the last one, says how old it is, and names the
//! callback running now and for how long (read live from the `Monitor`).

use super::Report;
use crate::{Loop, Monitor, Remote};
use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The sockets this process serves: one per path, so that a second loop
/// cannot take over (and unlink) the first one's.
static SERVED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// How often a loop that is serving publishes between requests, at most.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// A loop inside one callback for this long is blocked: the server answers
/// from the last report instead of waiting for a fresh one.
const BLOCKED: Duration = Duration::from_millis(100);
/// How long the server waits for a fresh report at most.
const GIVE_UP: Duration = Duration::from_secs(10);
/// How long a client has to send its request line.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Board {
    latest: Mutex<(u64, Option<(Report, Instant)>)>,
    fresh: Condvar,
    stop: AtomicBool,
}

impl Board {
    fn put(&self, r: Report) {
        let mut g = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        g.1 = Some((r, Instant::now()));
        self.fresh.notify_all();
    }
}

thread_local! {
    /// The boards this thread's loop publishes onto (one per server), and
    /// when it last did.
    static BOARDS: RefCell<(Vec<Arc<Board>>, Option<Instant>)> = const { RefCell::new((Vec::new(), None)) };
    /// A server started from `DEFERLOOP_PS=serve`: it lives as long as the thread.
    static KEPT: RefCell<Option<PsServer>> = const { RefCell::new(None) };
}

/// Publishes one report onto each of this thread's boards still served.
fn publish_here(lp: &Loop) {
    let boards = BOARDS.with(|b| {
        let mut b = b.borrow_mut();
        b.0.retain(|board| !board.stop.load(Ordering::Relaxed));
        b.1 = Some(Instant::now());
        b.0.clone()
    });
    if boards.is_empty() {
        return;
    }
    let report = super::snapshot(lp);
    for board in &boards {
        board.put(report.clone());
    }
}

/// Start of a turn's callbacks, on a loop that is watched: publishes if
/// something is served and the last report is a second old.
pub(crate) fn on_turn(lp: &Loop) {
    let due = BOARDS.with(|b| {
        let b = b.borrow();
        !b.0.is_empty() && b.1.is_none_or(|at| at.elapsed() >= PUBLISH_EVERY)
    });
    if due {
        publish_here(lp);
    }
}

pub(super) fn keep_for_thread(server: PsServer) {
    KEPT.with(|k| *k.borrow_mut() = Some(server));
}

/// Where [`serve`] puts its socket: `$XDG_RUNTIME_DIR/deferloop`, else
/// `/tmp/deferloop-<uid>`. The socket is `<pid>.sock` in it.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => Path::new(&d).join("deferloop"),
        // SAFETY: `geteuid` reads the process's effective uid; it cannot fail.
        None => PathBuf::from(format!("/tmp/deferloop-{}", unsafe { libc::geteuid() })),
    }
}

/// Serves `ps` for `lp` at `<default_dir()>/<pid>.sock` (see [`serve_in`]).
///
/// # Errors
/// As for [`serve_in`].
pub fn serve(lp: &Loop) -> io::Result<PsServer> {
    serve_in(lp, &default_dir())
}

/// Turns the registry on ([`enable`](super::enable)) and serves `ps`,
/// `pstree`, `ss`, `loop` and `all` for `lp` on a Unix socket `<dir>/<pid>.sock`,
/// from another thread, until the returned [`PsServer`] is dropped. `dir` is
/// created with mode 0700 if missing; the socket is made 0600. Call on the
/// loop's thread. See the [module](super) for the security model.
///
/// # Errors
/// `PermissionDenied` if `dir` exists but is not a directory owned by this
/// process's user with no group or other permissions; `AddrInUse` if this
/// process serves in `dir` already (one loop per directory: give each loop
/// of a process its own); any error creating the directory or binding the
/// socket; the thread could not be spawned.
pub fn serve_in(lp: &Loop, dir: &Path) -> io::Result<PsServer> {
    private_dir(dir)?;
    let path = dir.join(format!("{}.sock", std::process::id()));
    let mut served = SERVED.lock().unwrap_or_else(|e| e.into_inner());
    if served.contains(&path) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{} is served already (one loop per process and directory)",
                path.display()
            ),
        ));
    }
    // A socket left by an earlier process with this pid.
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    super::enable(lp);
    let board = Arc::new(Board::default());
    BOARDS.with(|b| b.borrow_mut().0.push(board.clone()));
    publish_here(lp);
    let (monitor, remote) = (lp.monitor(), lp.remote());
    let b2 = board.clone();
    let thread = std::thread::Builder::new()
        .name("deferloop-ps".into())
        .spawn(move || accept_loop(listener, &b2, &monitor, &remote))?;
    served.push(path.clone());
    Ok(PsServer {
        path,
        board,
        thread: Some(thread),
    })
}

/// Creates `dir` with mode 0700, or checks that it is a directory owned by
/// this process's user that no one else may enter.
fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => other?,
    }
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: `geteuid` reads the process's effective uid; it cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a directory owned by uid {me} with mode 0700 (it has uid {}, mode {:o})",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// A running `ps` server; dropping it stops the thread and removes the socket.
#[derive(Debug)]
pub struct PsServer {
    path: PathBuf,
    board: Arc<Board>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board").finish_non_exhaustive()
    }
}

impl PsServer {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PsServer {
    fn drop(&mut self) {
        self.board.stop.store(true, Ordering::Relaxed);
        // Wakes the accept; the thread sees `stop` and ends. (If the socket
        // was removed from outside, nothing can wake it: it is left to end
        // with the process rather than waited for.)
        let woken = UnixStream::connect(&self.path).is_ok();
        if let Some(t) = self.thread.take().filter(|_| woken) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
        SERVED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != self.path);
    }
}

fn accept_loop(listener: UnixListener, board: &Board, monitor: &Monitor, remote: &Remote) {
    for conn in listener.incoming() {
        if board.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if let Err(e) = answer(conn, board, monitor, remote) {
            log::debug!("deferloop: ps client: {e}");
        }
    }
}

/// Answers one client: checks its uid, reads the view it asks for, writes it.
fn answer(
    mut conn: UnixStream,
    board: &Board,
    monitor: &Monitor,
    remote: &Remote,
) -> io::Result<()> {
    // SAFETY: `geteuid` reads the process's effective uid; it cannot fail.
    let me = unsafe { libc::geteuid() };
    if peer_uid(&conn)? != me {
        return conn.write_all(b"refused\n");
    }
    conn.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&conn).take(64)).read_line(&mut line)?;
    let view = line.trim();
    if !["ps", "pstree", "ss", "loop", "all", ""].contains(&view) {
        return conn.write_all(b"unknown view: ask for ps, pstree, ss, loop or all\n");
    }
    let text = render(view, board, monitor, remote);
    conn.write_all(text.as_bytes())
}

/// Asks the loop for a fresh report and waits for it while the loop is not
/// stuck: it gives up once a callback has been running for `BLOCKED`, or
/// after `GIVE_UP` in any case (a loop that is not running); then renders the
/// latest report with the live current callback.
fn render(view: &str, board: &Board, monitor: &Monitor, remote: &Remote) -> String {
    let seen = board.latest.lock().unwrap_or_else(|e| e.into_inner()).0;
    let asked = remote.call_soon_threadsafe(publish_here).is_ok();
    let started = Instant::now();
    let mut g = board.latest.lock().unwrap_or_else(|e| e.into_inner());
    while asked && g.0 == seen {
        let blocked = monitor
            .snapshot()
            .current
            .is_some_and(|c| c.running_for >= BLOCKED);
        if blocked || started.elapsed() >= GIVE_UP {
            break;
        }
        g = board
            .fresh
            .wait_timeout(g, Duration::from_millis(20))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let fresh = g.0 != seen;
    let Some((report, at)) = g.1.clone() else {
        return "nothing published yet\n".into();
    };
    drop(g);
    let mut report = report;
    report.monitor.current = monitor.snapshot().current;
    let mut out = format!("pid {}: ", std::process::id());
    if fresh {
        out.push_str("snapshot taken now\n");
    } else if !asked {
        out.push_str(&format!(
            "the loop is closed; last snapshot taken {:.1?} ago\n",
            at.elapsed()
        ));
    } else {
        out.push_str(&format!(
            "the loop did not answer: snapshot taken {:.1?} ago\n",
            at.elapsed()
        ));
    }
    if let Some(c) = &report.monitor.current {
        out.push_str(&format!(
            "the loop is blocked in a callback scheduled at {}, running for {:.1?}\n",
            c.scheduled_at, c.running_for
        ));
    }
    out.push('\n');
    out.push_str(&match view {
        "ps" => report.ps(),
        "pstree" => report.pstree(),
        "loop" => report.loop_summary(),
        "ss" => report.ss(),
        _ => report.all(),
    });
    out
}

/// The uid of the process at the other end of `conn`.
fn peer_uid(conn: &UnixStream) -> io::Result<u32> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for writes and `len` holds
        // `cred`'s size, as SO_PEERCRED requires; the fd is open (borrowed).
        let rc = unsafe {
            libc::getsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(cred.uid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let (mut uid, mut gid) = (0, 0);
        // SAFETY: both out-pointers are valid for writes; the fd is open.
        if unsafe { libc::getpeereid(conn.as_raw_fd(), &mut uid, &mut gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(uid)
    }
}

/// Asks the process serving at `socket` for `view` (`ps`, `pstree`, `ss`,
/// `loop` or `all`) and returns its answer. A `socket` that is a number is a pid:
/// its socket in [`default_dir`].
///
/// # Errors
/// The socket could not be reached or read.
pub fn query(socket: &str, view: &str) -> io::Result<String> {
    let path = if !socket.is_empty() && socket.bytes().all(|b| b.is_ascii_digit()) {
        default_dir().join(format!("{socket}.sock"))
    } else {
        PathBuf::from(socket)
    };
    let mut conn = UnixStream::connect(&path)?;
    conn.write_all(format!("{view}\n").as_bytes())?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}
