//! A child that closed its stdin: writing to it never raises `SIGPIPE` in
//! the host, whatever the disposition. Here `SIGPIPE` is `SIG_DFL`, as a C
//! host embedding the library may leave it (Rust programs start with it
//! ignored): a raised one would kill this test binary, so it runs alone.
//! The write fails with `EPIPE`, heard as stdin's `pipe_closed` reason.

#[path = "util/mod.rs"]
mod logs;
#[path = "util/process.rs"]
mod util;

use deferloop::process::ChildPipe;
use deferloop::EventLoop;
use std::process::Command;
use std::time::Duration;
use util::{Event, Recorder};

#[test]
fn writing_to_a_child_that_closed_stdin_is_epipe_not_sigpipe() {
    // SAFETY: the default disposition for SIGPIPE (terminate), as a C host
    // may have it; this binary's only test.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let ev = EventLoop::new().unwrap();
    let (rec, log) = Recorder::new();
    let p = ev
        .spawn_process(
            Command::new("sh").args(["-c", "exec 0<&-; echo closed; exec sleep 30"]),
            rec,
        )
        .unwrap();
    // The child has closed its stdin once it says so.
    logs::run_until(&ev, Duration::from_secs(20), || {
        util::stdout(&log.borrow()) == b"closed\n"
    });
    p.write(b"nobody reads this");
    logs::run_until(&ev, Duration::from_secs(20), || {
        log.borrow()
            .iter()
            .any(|e| matches!(e, Event::Closed(ChildPipe::Stdin, ..)))
    });
    let reason = log
        .borrow()
        .iter()
        .find_map(|e| match e {
            Event::Closed(ChildPipe::Stdin, _, reason) => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    let reason = reason.expect("a reason: the write met a closed pipe");
    assert!(reason.contains("Broken pipe"), "{reason}");
    // Still alive, and still the default disposition.
    p.kill().unwrap();
    ev.run_until(p.wait()).unwrap();
    // SAFETY: sigaction with a null new action only reads the current one.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut now) };
    assert_eq!(now.sa_sigaction, libc::SIG_DFL);
}
