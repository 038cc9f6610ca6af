//! Child processes: output, stdin with flow control, exits and signals, the
//! mistakes users make, and no zombie left behind — also when the loop closes.
//! (tests/process_sigchld.rs runs the same kind of checks without pidfds.)

#[path = "util/mod.rs"]
mod logs;
#[path = "util/process.rs"]
mod util;

use deferloop::process::{ChildPipe, Process, ProcessProtocol};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::rc::Rc;
use std::time::{Duration, Instant};
use util::{assert_reaped, Event, Recorder};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

#[test]
fn output_arrives_then_process_exited_once() {
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process(&mut sh("echo out; echo err >&2; exit 3"), rec)
        .unwrap();
    let status = ev.run_until(p.wait()).unwrap();
    assert_eq!(status.code(), Some(3));
    let log = log.borrow();
    assert_eq!(util::stdout(&log), b"out\n");
    assert_eq!(util::stderr(&log), b"err\n");
    assert_eq!(
        log.iter().filter(|e| matches!(e, Event::Exited(_))).count(),
        1
    );
    assert!(matches!(log.last(), Some(Event::Exited(_))), "{log:?}");
    assert_reaped(p.pid());
}

#[test]
fn a_child_that_closes_stdout_but_keeps_running() {
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    // It closes stdout, then waits for a line on its stdin that only this
    // test sends, once stdout's end was heard: heard while the child still
    // runs, however slow the machine (a 300 ms sleep and a 250 ms bound could
    // be missed).
    let p = ev
        .spawn_process(&mut sh("exec 1>&-; read go; echo late >&2"), rec)
        .unwrap();
    let stdout_closed = |log: &[Event]| {
        log.iter()
            .any(|e| matches!(e, Event::Closed(ChildPipe::Stdout, ..)))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stdout_closed(&log.borrow()) {
        assert!(Instant::now() < deadline, "stdout's end never heard");
        ev.call_later(Duration::from_millis(10), |_| {}).unwrap();
        ev.run_once().unwrap();
    }
    assert!(
        !log.borrow().iter().any(|e| matches!(e, Event::Exited(_))),
        "stdout's end is heard while the child still runs"
    );
    p.write(b"go\n");
    let status = ev.run_until(p.wait()).unwrap();
    assert!(status.success());
    let log = log.borrow();
    let closed = log
        .iter()
        .position(|e| matches!(e, Event::Closed(ChildPipe::Stdout, ..)))
        .expect("stdout closed");
    let exited = log
        .iter()
        .position(|e| matches!(e, Event::Exited(_)))
        .unwrap();
    assert!(closed < exited);
    assert_eq!(util::stderr(&log), b"late\n");
    assert_reaped(p.pid());
}

/// Waits (at most 10 s) until child `pid` has exited, leaving it unreaped.
fn exited_unreaped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // SAFETY: waitid with WNOWAIT and WNOHANG only looks (the child stays
        // a zombie for the loop to reap), into a zeroed local siginfo_t.
        let exited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            assert_eq!(libc::waitid(libc::P_PID, pid, &mut info, flags), 0);
            info.si_pid() != 0
        };
        if exited {
            return;
        }
        assert!(Instant::now() < deadline, "child {pid} did not exit");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_child_that_exits_with_output_still_unread_loses_none() {
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process(&mut sh("head -c 50000 /dev/zero; exit 0"), rec)
        .unwrap();
    // The child writes and exits before the loop reads a byte: waited for,
    // not guessed with a sleep.
    exited_unreaped(p.pid());
    ev.run_until(p.wait()).unwrap();
    assert_eq!(util::stdout(&log.borrow()).len(), 50_000);
    assert_reaped(p.pid());
}

/// A child that exits while its stdin is still open: the protocol hears
/// `pipe_closed(Stdin)` before `process_exited`, as for the other pipes
/// (before, never, when nothing was buffered), and the bytes it wrote that
/// the child never read are not dropped in silence.
#[test]
fn a_child_that_exits_with_stdin_open_closes_it_and_says_what_was_unwritten() {
    let ev = EventLoop::new().unwrap();
    // Reads nothing; killed while bytes wait for its stdin.
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    let stdin = p.stdin().unwrap();
    // More than a pipe holds, so some stays in our buffer.
    stdin.write(&vec![b'x'; 1 << 20]);
    assert!(stdin.write_buffer_size() > 0);
    p.kill().unwrap();
    ev.run_until(p.wait()).unwrap();
    let log = log.borrow();
    let closed: Vec<_> = log
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::Closed(ChildPipe::Stdin, _, reason) => Some((i, reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1, "{log:?}");
    let (at, reason) = &closed[0];
    let exited = log
        .iter()
        .position(|e| matches!(e, Event::Exited(_)))
        .unwrap();
    assert!(*at < exited, "{log:?}");
    // The write that met the closed pipe (EPIPE), or the reap if it came
    // first: either way a reason.
    let reason = reason.as_deref().expect("a reason: bytes were dropped");
    assert!(
        reason.contains("Broken pipe") || reason.contains("unwritten"),
        "{reason}"
    );

    // With nothing buffered, stdin's end is no error.
    let (rec, log) = Recorder::new();
    let p = ev.spawn_process(&mut sh("exit 0"), rec).unwrap();
    ev.run_until(p.wait()).unwrap();
    let log = log.borrow();
    assert!(
        log.iter()
            .any(|e| matches!(e, Event::Closed(ChildPipe::Stdin, _, None))),
        "{log:?}"
    );
}

#[test]
fn a_child_killed_by_a_signal_reports_it() {
    let ev = EventLoop::new().unwrap();
    let (rec, _log) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    p.kill().unwrap();
    let status = ev.run_until(p.wait()).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(p.kill().is_err(), "a reaped child cannot be signalled");
    assert_reaped(p.pid());

    let (rec, _log) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    p.signal(deferloop::Signal::TERM).unwrap();
    assert_eq!(
        ev.run_until(p.wait()).unwrap().signal(),
        Some(libc::SIGTERM)
    );
}

#[test]
fn stdin_is_a_transport_with_flow_control() {
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    let p = ev.spawn_process(&mut Command::new("cat"), rec).unwrap();
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    p.write(&data);
    assert!(p.stdin().unwrap().is_writing_paused() || p.stdin().unwrap().write_buffer_size() > 0);
    p.close_stdin();
    let status = ev.run_until(p.wait()).unwrap();
    assert!(status.success());
    let log = log.borrow();
    assert!(util::stdout(&log) == data, "every byte came back");
    assert!(
        log.iter().any(|e| matches!(e, Event::Paused)),
        "{:?}",
        log.len()
    );
    assert_reaped(p.pid());
    // A write once stdin is closed is logged, not silent.
    let logs = logs::logs();
    assert!(p.stdin().is_none());
    p.write(b"late");
    assert_eq!(
        logs.mine_containing("write of 4 bytes to a child's stdin that is gone")
            .len(),
        1
    );
}

fn spawn_error(ev: &EventLoop, cmd: &mut Command) -> String {
    let (rec, log) = Recorder::new();
    let err = ev.spawn_process(cmd, rec).unwrap_err();
    assert!(
        log.borrow().is_empty(),
        "no protocol method for a failed spawn"
    );
    err.to_string()
}

#[test]
fn the_mistakes_users_make_name_the_command() {
    let ev = EventLoop::new().unwrap();
    let msg = spawn_error(&ev, &mut Command::new("deferloop-no-such-program"));
    assert!(msg.contains("deferloop-no-such-program"), "{msg}");
    assert!(msg.contains("not found"), "{msg}");

    let dir = std::env::temp_dir().join(format!("deferloop-noexec-{}", std::process::id()));
    std::fs::write(&dir, "#!/bin/sh\necho hi\n").unwrap();
    let msg = spawn_error(&ev, &mut Command::new(&dir));
    std::fs::remove_file(&dir).unwrap();
    assert!(msg.contains(&*dir.to_string_lossy()), "{msg}");
    assert!(msg.contains("permission denied"), "{msg}");

    let mut cmd = Command::new("true");
    cmd.current_dir("/deferloop/no/such/dir");
    let msg = spawn_error(&ev, &mut cmd);
    assert!(
        msg.contains("true") && msg.contains("/deferloop/no/such/dir"),
        "{msg}"
    );
    assert!(msg.contains("working directory"), "{msg}");
    assert_eq!(ev.io_source_count(), 0, "nothing left registered");
}

#[test]
fn closing_the_loop_kills_and_reaps_its_children_unless_detached() {
    let ev = EventLoop::new().unwrap();
    let (rec, _) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    let (rec, _) = Recorder::new();
    let detached = ev
        .spawn_process(Command::new("sleep").arg("0.3"), rec)
        .unwrap();
    detached.detach();
    let waited: Rc<RefCell<Option<String>>> = Rc::default();
    let w2 = waited.clone();
    let _ = p
        .wait()
        .add_callback(|_| Ok(()))
        .add_errback(move |f: Failure| {
            *w2.borrow_mut() = Some(f.to_string());
            Ok(())
        });
    let (pid, dpid) = (p.pid(), detached.pid());
    drop(ev);
    assert_reaped(pid);
    assert!(
        waited.borrow().is_some(),
        "wait() fails when the loop closes"
    );
    // The detached child runs on, then is reaped by its thread.
    assert!(util::alive(dpid));
    let deadline = Instant::now() + Duration::from_secs(10);
    while util::alive(dpid) || !util::reaped(dpid) {
        assert!(Instant::now() < deadline, "detached child not reaped");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_panicking_process_protocol_is_contained() {
    struct Boom;
    impl ProcessProtocol for Boom {
        fn out_received(&mut self, _: &Process, _: &[u8]) {
            panic!("boom");
        }
    }
    let ev = EventLoop::new().unwrap();
    let reported = Rc::new(RefCell::new(0));
    let r2 = reported.clone();
    ev.set_exception_handler(move |_, _| *r2.borrow_mut() += 1);
    let p = ev.spawn_process(&mut sh("echo x"), Boom).unwrap();
    let status: ExitStatus = ev.run_until(p.wait()).unwrap();
    assert!(status.success());
    assert_eq!(*reported.borrow(), 1);
}

/// A child is not a peer to guard against: its stdin has no write timeout,
/// so one that reads only after a long computation loses nothing.
#[test]
fn a_child_that_reads_its_stdin_late_keeps_it() {
    let go = std::env::temp_dir().join(format!("deferloop-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let clock = deferloop::ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    let (rec, log) = Recorder::new();
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; exec cat",
        go.display()
    );
    let p = ev.spawn_process(&mut sh(&script), rec).unwrap();
    let stdin = p.stdin().unwrap();
    assert_eq!(stdin.write_timeout(), None);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    p.write(&data);
    let turns = || {
        for _ in 0..3 {
            ev.call_soon(|_| {}).unwrap();
            ev.run_once().unwrap();
        }
    };
    turns();
    assert!(stdin.write_buffer_size() > 0, "the pipe is full");
    clock.advance(Duration::from_secs(3600));
    turns();
    assert!(p.stdin().is_some(), "still open after an hour");
    std::fs::write(&go, b"").unwrap();
    p.close_stdin();
    let status = ev.run_until(p.wait()).unwrap();
    let _ = std::fs::remove_file(&go);
    assert!(status.success());
    assert!(util::stdout(&log.borrow()) == data, "every byte came back");
}

/// Another part of the program reaps the child first (a `waitpid` of its
/// own): the exit is still reported, as a clear failure rather than a made-up
/// status, and never a hang; nothing is sent to its pid afterwards.
#[test]
fn a_child_reaped_elsewhere_ends_with_a_clear_failure() {
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    p.signal(deferloop::Signal::TERM).unwrap();
    let mut st = 0;
    // SAFETY: a blocking waitpid for this one child, as other code might.
    let r = unsafe { libc::waitpid(p.pid() as libc::pid_t, &mut st, 0) };
    assert_eq!(r, p.pid() as libc::pid_t);
    let err = ev
        .run_until(p.wait().add_timeout(Duration::from_secs(20), &ev))
        .unwrap_err();
    let err = format!("{err:#}");
    let unavailable = "exit status unavailable: reaped elsewhere or SIGCHLD ignored";
    assert!(err.contains(unavailable), "{err}");
    let log = log.borrow();
    let heard: Vec<_> = log
        .iter()
        .filter_map(|e| match e {
            Event::Exited(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(heard.len(), 1, "{log:?}");
    assert!(
        heard[0].as_ref().unwrap_err().contains(unavailable),
        "{log:?}"
    );
    assert!(p.status().is_none());
    assert!(matches!(p.kill(), Err(deferloop::Error::Gone)));
}
