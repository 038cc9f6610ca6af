//! With `SIGCHLD` ignored (`SIG_IGN`: process-wide, so in a binary of its
//! own, one test) the kernel reaps children itself, and no wait sees their
//! status. Every exit is still reported — with its status, or with a clear
//! `StatusUnavailable` failure — never left hanging (libuv) and never made
//! up (asyncio's 255); signals never go to a pid that may be reused; the
//! spawn warns. Through the pidfd, then through the `SIGCHLD` fallback.

#[path = "util/mod.rs"]
mod logs;
#[path = "util/process.rs"]
mod util;

use deferloop::process::StatusUnavailable;
use deferloop::{Deferred, EventLoop};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;
use util::{Event, Recorder};

const UNAVAILABLE: &str = "exit status unavailable: reaped elsewhere or SIGCHLD ignored";

/// Runs until `d` fires; a generous bound turns a hang into a failure.
fn bounded<T: 'static>(ev: &EventLoop, d: Deferred<T>) -> Result<T, String> {
    ev.run_until(d.add_timeout(Duration::from_secs(20), ev))
        .map_err(|e| format!("{e:#}"))
}

/// The outcome heard by the protocol, exactly once, and by `wait()` agree:
/// the status (checked by `ok`) or the clear failure.
fn ends(
    ev: &EventLoop,
    cmd: &mut Command,
    before: impl FnOnce(&deferloop::process::Process),
    ok: impl Fn(ExitStatus) -> bool,
) {
    let (rec, log) = Recorder::new();
    let p = ev.spawn_process(cmd, rec).unwrap();
    before(&p);
    let waited = bounded(ev, p.wait());
    let log = log.borrow();
    let heard: Vec<_> = log
        .iter()
        .filter_map(|e| match e {
            Event::Exited(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(heard.len(), 1, "{log:?}");
    match (&waited, &heard[0]) {
        (Ok(st), Ok(heard)) => {
            assert_eq!(st, heard);
            assert!(ok(*st), "{st:?}");
        }
        (Err(w), Err(heard)) => {
            assert!(w.contains(UNAVAILABLE), "{w}");
            assert!(heard.contains(UNAVAILABLE), "{heard}");
            assert!(heard.contains(&p.pid().to_string()), "{heard}");
        }
        other => panic!("wait() and process_exited disagree: {other:?}"),
    }
    assert!(p.kill().is_err(), "nothing is sent to an ended child's pid");
}

fn every_exit_is_reported(ev: &EventLoop) {
    ends(
        ev,
        Command::new("sh").args(["-c", "exit 3"]),
        |_| {},
        |s| s.code() == Some(3),
    );
    ends(ev, &mut Command::new("true"), |_| {}, |s| s.success());
    // Killed while running: the kill reaches it (by pidfd, or by pid while
    // it is known unreaped).
    ends(
        ev,
        Command::new("sleep").arg("30"),
        |p| p.kill().unwrap(),
        |s| s.signal() == Some(libc::SIGKILL),
    );
    // Ended (and reaped by the kernel) before the loop looks.
    ends(
        ev,
        &mut Command::new("true"),
        |_| std::thread::sleep(Duration::from_millis(100)),
        |s| s.success(),
    );
}

#[test]
fn with_sigchld_ignored_every_exit_is_reported_never_a_hang() {
    let logs = logs::logs();
    // SAFETY: setting a signal's disposition to SIG_IGN; this binary's only
    // test, so nothing else here depends on SIGCHLD.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let ev = EventLoop::new().unwrap();
    every_exit_is_reported(&ev);
    assert!(
        !logs.mine_containing("SIGCHLD is ignored").is_empty(),
        "the spawn warns"
    );
    // Where the kernel reaps (pidfd path), a status is never made up.
    let (rec, _) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sh").args(["-c", "exit 5"]), rec)
        .unwrap();
    match bounded(&ev, p.wait()) {
        Ok(st) => assert_eq!(st.code(), Some(5)),
        Err(e) => assert!(e.contains(UNAVAILABLE), "{e}"),
    }
    // The failure is a value to match on, naming the child.
    let typed = ev
        .run_until(p.wait().add_both(|r| {
            Ok::<_, deferloop::Failure>(
                r.err()
                    .map(|f| f.downcast_ref::<StatusUnavailable>().cloned()),
            )
        }))
        .unwrap();
    if let Some(u) = typed {
        let u = u.expect("a StatusUnavailable");
        assert_eq!((u.pid, u.command.as_str()), (p.pid(), "sh"));
    }

    // The SIGCHLD fallback: read at each spawn.
    std::env::set_var("DEFERLOOP_NO_PIDFD", "1");
    every_exit_is_reported(&ev);
    drop(ev);
    // SAFETY: back to the default disposition.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
}
