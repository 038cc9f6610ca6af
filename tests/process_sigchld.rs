//! Child processes watched through SIGCHLD, as on kernels without pidfds:
//! exits and kills are noticed, several loops on several threads each reap
//! only their own children, and closing a loop reaps what it still had.

#[path = "util/process.rs"]
mod util;

use deferloop::EventLoop;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use util::{assert_reaped, Recorder};

fn exits_and_kills_on_one_loop() {
    // Every test here watches through SIGCHLD; the variable is read at each
    // spawn, and no test in this binary wants pidfds.
    std::env::set_var("DEFERLOOP_NO_PIDFD", "1");
    let ev = EventLoop::new().unwrap();
    let mut pids = Vec::new();
    for i in 0..5 {
        let (rec, log) = Recorder::new();
        let p = ev
            .spawn_process(
                Command::new("sh").args(["-c", &format!("echo {i}; exit {i}")]),
                rec,
            )
            .unwrap();
        let status = ev.run_until(p.wait()).unwrap();
        assert_eq!(status.code(), Some(i));
        assert_eq!(util::stdout(&log.borrow()), format!("{i}\n").as_bytes());
        pids.push(p.pid());
    }
    let (rec, _) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    p.kill().unwrap();
    assert_eq!(
        ev.run_until(p.wait()).unwrap().signal(),
        Some(libc::SIGKILL)
    );
    pids.push(p.pid());
    let (rec, _) = Recorder::new();
    let running = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    pids.push(running.pid());
    drop(ev);
    for pid in pids {
        assert_reaped(pid);
    }
}

#[test]
fn sigchld_watches_exits_on_one_loop() {
    exits_and_kills_on_one_loop();
}

#[test]
fn sigchld_watches_exits_on_loops_on_other_threads() {
    let threads: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(exits_and_kills_on_one_loop))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Another part of the program reaps the child before the loop's `SIGCHLD`
/// handler runs: the loop's `waitpid(pid)` finds it gone (`ECHILD`) and
/// reports a clear failure, never a hang.
#[test]
fn sigchld_path_reports_a_child_reaped_elsewhere() {
    std::env::set_var("DEFERLOOP_NO_PIDFD", "1");
    let ev = EventLoop::new().unwrap();
    let (rec, _) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    p.signal(deferloop::Signal::TERM).unwrap();
    let mut st = 0;
    // SAFETY: a blocking waitpid for this one child, as other code might.
    let r = unsafe { libc::waitpid(p.pid() as libc::pid_t, &mut st, 0) };
    assert_eq!(r, p.pid() as libc::pid_t);
    let err = ev
        .run_until(
            p.wait()
                .add_timeout(std::time::Duration::from_secs(20), &ev),
        )
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("exit status unavailable: reaped elsewhere or SIGCHLD ignored"),
        "{err}"
    );
    assert!(p.kill().is_err());
}
