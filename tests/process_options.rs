//! Output collection as one Deferred (caps included), the choice of each
//! standard stream, a process group or session of its own and signalling
//! it, and the choice of exit watch — with the clear errors of bad input.

#[path = "util/mod.rs"]
mod logs;
#[path = "util/process.rs"]
mod util;

use deferloop::process::{
    ChildPipe, ChildStdio, ExitWatch, OutputOptions, OutputTooLarge, ProcessGroup, SpawnOptions,
};
use deferloop::{Error, EventLoop, Failure, Signal};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};
use util::{Event, Recorder};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

#[test]
fn output_status_stdout_and_stderr_come_as_one_deferred() {
    let ev = EventLoop::new().unwrap();
    let out = ev
        .run_until(ev.process_output(
            &mut sh("echo out; echo err >&2; exit 4"),
            OutputOptions::default(),
        ))
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "a non-zero exit is no failure");
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");

    // Input is written, then stdin closed: cat ends.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let out = ev
        .run_until(ev.process_output(
            &mut Command::new("cat"),
            OutputOptions::default().input(data.clone()),
        ))
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout == data, "every byte came back");

    // Without input, stdin is /dev/null: a reader ends at once.
    let out = ev
        .run_until(ev.process_output(&mut Command::new("cat"), OutputOptions::default()))
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty());
}

/// Past a cap the child is killed and the Deferred fails with a clear,
/// typed error — also for a child that would write forever.
#[test]
fn output_past_its_cap_is_a_clear_failure_and_the_child_is_killed() {
    let ev = EventLoop::new().unwrap();
    let capped = |cmd: &mut Command, opts: OutputOptions| -> (String, Option<OutputTooLarge>) {
        // Not the bound's doing: past it, the result is replaced.
        let bound = Duration::from_secs(20);
        let d = ev.process_output(cmd, opts);
        let d = d.add_timeout_with(bound, &ev, |_, after| {
            Err(Failure::msg(format!("no result within {after:?}")))
        });
        let d = d.add_both(|r| {
            Ok::<_, Failure>(match r {
                Ok(out) => panic!("no cap was hit: {out:?}"),
                Err(f) => (f.to_string(), f.downcast_ref::<OutputTooLarge>().cloned()),
            })
        });
        ev.run_until(d).unwrap()
    };
    let (msg, typed) = capped(
        &mut Command::new("yes"),
        OutputOptions::default().max_stdout(1000),
    );
    assert!(
        msg.contains("output too large") && msg.contains("yes"),
        "{msg}"
    );
    assert!(msg.contains("1000 bytes to stdout"), "{msg}");
    let t = typed.expect("an OutputTooLarge");
    assert_eq!((t.stream, t.limit), (ChildPipe::Stdout, 1000));

    let (msg, typed) = capped(
        &mut sh("head -c 5000 /dev/zero >&2"),
        OutputOptions::default().max_stderr(4999),
    );
    assert!(msg.contains("4999 bytes to stderr"), "{msg}");
    assert_eq!(typed.unwrap().stream, ChildPipe::Stderr);

    // A grandchild that holds stdout after the child is killed cannot keep
    // the result waiting: our end is closed, and its next write fails.
    let (msg, _) = capped(
        &mut sh("yes; true"),
        OutputOptions::default().max_stdout(1000),
    );
    assert!(msg.contains("output too large"), "{msg}");

    // Exactly at the cap is fine.
    let out = ev
        .run_until(ev.process_output(
            &mut sh("head -c 5000 /dev/zero"),
            OutputOptions::default().max_stdout(5000),
        ))
        .unwrap();
    assert_eq!(out.stdout.len(), 5000);
}

#[test]
fn output_of_a_program_that_cannot_start_names_it() {
    let ev = EventLoop::new().unwrap();
    let err = ev
        .run_until(ev.process_output(
            &mut Command::new("deferloop-no-such-program"),
            OutputOptions::default(),
        ))
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("deferloop-no-such-program") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn each_stream_is_a_pipe_null_inherited_or_a_given_fd() {
    let ev = EventLoop::new().unwrap();
    let path = std::env::temp_dir().join(format!("deferloop-stdio-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let (rec, log) = Recorder::new();
    let opts = SpawnOptions::default()
        .stdin(ChildStdio::Null)
        .stdout(ChildStdio::Fd(file.into()))
        .stderr(ChildStdio::Inherit);
    let p = ev
        .spawn_process_with(&mut sh("read x; echo \"to the file $?\""), rec, opts)
        .unwrap();
    assert!(p.stdin().is_none(), "stdin is /dev/null, not ours");
    assert!(ev.run_until(p.wait()).unwrap().success());
    // With no pipe, nothing of the loop's holds the child once it ended:
    // the handle still answers.
    assert!(p.has_exited());
    assert_eq!(p.status().map(|s| s.success()), Some(true));
    assert!(ev.run_until(p.wait()).unwrap().success());
    let written = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    // `read` met end-of-file at once (status 1): /dev/null.
    assert_eq!(written, "to the file 1\n");
    let log = log.borrow();
    assert!(
        !log.iter()
            .any(|e| matches!(e, Event::Out(_) | Event::Err(_) | Event::Closed(..))),
        "no pipe, so nothing heard but the exit: {log:?}"
    );
    assert!(matches!(log.last(), Some(Event::Exited(Ok(_)))), "{log:?}");
}

/// Field `n` (1-based) of /proc/<pid>/stat, for a process whose name has
/// no spaces.
fn stat_field(stat: &str, n: usize) -> i32 {
    stat.split_whitespace().nth(n - 1).unwrap().parse().unwrap()
}

/// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.split_whitespace().nth(2) == Some("Z"),
        Err(_) => true,
    }
}

fn wait_ended(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ended(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child that starts a grandchild, prints its own stat line and the
/// grandchild's pid, then waits.
const TREE: &str = "sleep 30 & cat /proc/$$/stat; echo $!; wait";

fn spawn_tree(ev: &EventLoop, group: ProcessGroup) -> (deferloop::process::Process, String, i32) {
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process_with(&mut sh(TREE), rec, SpawnOptions::default().group(group))
        .unwrap();
    logs::run_until(ev, Duration::from_secs(20), || {
        util::stdout(&log.borrow())
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            == 2
    });
    let out = String::from_utf8(util::stdout(&log.borrow())).unwrap();
    let mut lines = out.lines();
    let stat = lines.next().unwrap().to_owned();
    let grandchild = lines.next().unwrap().parse().unwrap();
    (p, stat, grandchild)
}

#[test]
fn a_new_group_or_session_and_one_signal_for_the_whole_group() {
    let ev = EventLoop::new().unwrap();
    let (p, stat, grandchild) = spawn_tree(&ev, ProcessGroup::New);
    let pid = p.pid() as i32;
    assert_eq!(stat_field(&stat, 5), pid, "it leads its own group");
    assert_ne!(stat_field(&stat, 6), pid, "but not a session");
    p.signal_group(Signal::TERM).unwrap();
    assert_eq!(
        ev.run_until(p.wait()).unwrap().signal(),
        Some(libc::SIGTERM)
    );
    wait_ended(grandchild);
    assert!(matches!(p.signal_group(Signal::TERM), Err(Error::Gone)));

    let (p, stat, grandchild) = spawn_tree(&ev, ProcessGroup::Session);
    let pid = p.pid() as i32;
    assert_eq!((stat_field(&stat, 5), stat_field(&stat, 6)), (pid, pid));
    // Closing the loop kills the whole group.
    drop(ev);
    util::assert_reaped(pid as u32);
    wait_ended(grandchild);
}

/// A group signal to a child in the parent's group would reach the parent:
/// refused, with the way to get one.
#[test]
fn a_group_signal_without_a_group_of_its_own_is_a_clear_error() {
    let ev = EventLoop::new().unwrap();
    let (rec, _) = Recorder::new();
    let p = ev
        .spawn_process(Command::new("sleep").arg("30"), rec)
        .unwrap();
    let err = p.signal_group(Signal::TERM).unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert!(err.to_string().contains("ProcessGroup::New"), "{err}");
    p.kill().unwrap();
    ev.run_until(p.wait()).unwrap();
}

#[test]
fn the_exit_watch_is_chosen_in_the_api() {
    let ev = EventLoop::new().unwrap();
    for watch in [ExitWatch::Auto, ExitWatch::Pidfd, ExitWatch::Sigchld] {
        let (rec, log) = Recorder::new();
        let p = ev
            .spawn_process_with(
                &mut sh("echo hi; exit 6"),
                rec,
                SpawnOptions::default().watch(watch),
            )
            .unwrap();
        let status = ev
            .run_until(p.wait().add_timeout(Duration::from_secs(20), &ev))
            .unwrap();
        assert_eq!(status.code(), Some(6), "{watch:?}");
        assert_eq!(util::stdout(&log.borrow()), b"hi\n");
        util::assert_reaped(p.pid());
    }
}
