//! The `ps` socket: answers from another thread while the loop is blocked
//! in a callback, answers fresh while it is idle, and lets in only the
//! process's own user. Synchronised with channels, never with sleeps.

use deferloop::ps;
use deferloop::{defer_later, EventLoop};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// A fresh directory path (not created: `serve_in` creates it 0700).
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deferloop-ps-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_blocked_loop_answers_with_the_callback_it_is_stuck_in() {
    let ev = EventLoop::new().unwrap();
    ps::enable(&ev);
    let timer_line = line!() + 1;
    let d = defer_later(&ev, Duration::from_secs(3600), || Ok(()));
    let dir = dir("blocked");
    let server = ps::serve_in(&ev, &dir).unwrap();
    let path = server.path().to_str().unwrap().to_string();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (answer_tx, answer_rx) = mpsc::channel::<String>();
    let stuck_line = line!() + 1;
    ev.call_soon(move |_| {
        started_tx.send(()).unwrap();
        release_rx.recv().unwrap(); // blocked until the query is answered
    })
    .unwrap();
    let asker = std::thread::spawn(move || {
        started_rx.recv().unwrap();
        let answer = ps::query(&path, "all").unwrap();
        answer_tx.send(answer).unwrap();
        release_tx.send(()).unwrap();
    });
    ev.run_once().unwrap();
    asker.join().unwrap();
    let answer = answer_rx.recv().unwrap();
    let here = file!();
    assert!(
        answer.contains(&format!(
            "the loop is blocked in a callback scheduled at {here}:{stuck_line}"
        )),
        "{answer}"
    );
    assert!(answer.contains("the loop did not answer"), "{answer}");
    assert!(answer.contains(&format!("{here}:{timer_line}")), "{answer}");
    assert!(answer.contains("timer due in"), "{answer}");
    drop((server, d));
    assert!(!dir.join(format!("{}.sock", std::process::id())).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_idle_loop_publishes_a_fresh_snapshot_for_each_query() {
    let ev = EventLoop::new().unwrap();
    let dir = dir("idle");
    let server = ps::serve_in(&ev, &dir).unwrap();
    // Made after the first snapshot: only a fresh one lists it.
    let line = line!() + 1;
    let (pending, _r) = deferloop::Deferred::<u8>::new();
    let path = server.path().to_str().unwrap().to_string();
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        tx.send(ps::query(&path, "ps").unwrap()).unwrap();
        remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
    });
    ev.run().unwrap(); // idle in poll until the query thread stops it
    let answer = rx.recv().unwrap();
    assert!(answer.contains("snapshot taken now"), "{answer}");
    assert!(answer.contains(&format!("{}:{line}", file!())), "{answer}");
    drop((server, pending));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_others_may_enter_is_refused() {
    let ev = EventLoop::new().unwrap();
    let dir = dir("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = ps::serve_in(&ev, &dir).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("mode 0700"), "{e}");
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn the_socket_is_0600_in_a_0700_directory() {
    let ev = EventLoop::new().unwrap();
    let dir = dir("modes");
    let server = ps::serve_in(&ev, &dir).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(server.path()), 0o600);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Another uid is kept out twice: by the modes (connect fails), and, with
/// the modes opened up, by the `SO_PEERCRED` check (it reads `refused`).
#[test]
fn another_uid_is_refused() {
    // SAFETY: `geteuid` cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root to run a child as nobody");
        return;
    }
    let ev = EventLoop::new().unwrap();
    let dir = dir("uid");
    let server = ps::serve_in(&ev, &dir).unwrap();
    let path = server.path().to_path_buf();
    assert_eq!(as_nobody(&path), Outcome::ConnectDenied);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(as_nobody(&path), Outcome::Refused);
    // The owner still gets in (the loop runs meanwhile, so it answers fresh).
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel::<String>();
    let p = path.to_str().unwrap().to_string();
    std::thread::spawn(move || {
        tx.send(ps::query(&p, "loop").unwrap()).unwrap();
        remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
    });
    ev.run().unwrap();
    let own = rx.recv().unwrap();
    assert!(
        own.starts_with("pid ") && own.contains("snapshot taken now"),
        "{own}"
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[derive(Debug, PartialEq)]
enum Outcome {
    ConnectDenied,
    Refused,
    Other(i32),
}

/// Forks a child that becomes uid/gid 65534 (nobody), connects to `path`,
/// asks for `ps` and reports by exit code what happened.
fn as_nobody(path: &std::path::Path) -> Outcome {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: a zeroed `sockaddr_un` is valid; `sun_path` is filled below
    // with at most its length minus one bytes (the rest stays NUL).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    assert!(bytes.len() < addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: after `fork` the child calls only async-signal-safe functions
    // (setgid, setuid, socket, connect, write, read, _exit) on memory made
    // before the fork; the parent waits for it with `waitpid`.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(20);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(21);
            }
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
                let denied = *libc::__errno_location() == libc::EACCES;
                libc::_exit(if denied { 10 } else { 22 });
            }
            libc::write(fd, b"ps\n".as_ptr().cast(), 3);
            let mut buf = [0u8; 16];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            let refused = n == 8 && &buf[..8] == b"refused\n";
            libc::_exit(if refused { 11 } else { 23 });
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        match libc::WEXITSTATUS(status) {
            10 => Outcome::ConnectDenied,
            11 => Outcome::Refused,
            n => Outcome::Other(n),
        }
    }
}

#[test]
fn a_second_server_in_the_same_directory_is_refused() {
    let ev = EventLoop::new().unwrap();
    let dir = dir("twice");
    let first = ps::serve_in(&ev, &dir).unwrap();
    let e = ps::serve_in(&ev, &dir).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    assert!(first.path().exists(), "the first socket is left alone");
    drop(first);
    let again = ps::serve_in(&ev, &dir).unwrap();
    drop(again);
    std::fs::remove_dir_all(&dir).unwrap();
}
