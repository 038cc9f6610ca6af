//! What a program does with a child: [`ProcessProtocol`] (Twisted's
//! `ProcessProtocol`) and [`ChildPipe`]. Used by `super`; tests:
//! tests/process_*.rs.

use super::Process;
use crate::Failure;
use std::process::ExitStatus;

/// Which of the child's standard streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChildPipe {
    /// The child's standard input (we write).
    Stdin,
    /// The child's standard output (we read).
    Stdout,
    /// The child's standard error (we read).
    Stderr,
}

/// What a program does with a child process: Twisted's `ProcessProtocol`.
///
/// Every method has a default that does nothing. Methods run on the loop
/// thread, one at a time, never from inside a [`Process`] method.
pub trait ProcessProtocol: 'static {
    /// The child started; its pipes are open.
    fn connection_made(&mut self, process: &Process) {
        let _ = process;
    }
    /// Bytes from the child's stdout.
    fn out_received(&mut self, process: &Process, data: &[u8]) {
        let _ = (process, data);
    }
    /// Bytes from the child's stderr.
    fn err_received(&mut self, process: &Process, data: &[u8]) {
        let _ = (process, data);
    }
    /// One of the pipes closed: the child closed its end (or exited), or we
    /// closed stdin. The child may still be running. Every pipe is heard
    /// once, before `process_exited`: stdin still open when the child is
    /// reaped is closed then, with a `BrokenPipe` reason if bytes written
    /// to it were never taken.
    fn pipe_closed(&mut self, process: &Process, pipe: ChildPipe, reason: Option<Failure>) {
        let _ = (process, pipe, reason);
    }
    /// The child's stdin buffer passed its high-water mark: stop writing.
    fn pause_writing(&mut self, process: &Process) {
        let _ = process;
    }
    /// The child's stdin buffer drained to its low-water mark.
    fn resume_writing(&mut self, process: &Process) {
        let _ = process;
    }
    /// The child exited (or was killed: see
    /// [`ExitStatusExt::signal`](std::os::unix::process::ExitStatusExt::signal))
    /// and its stdout and stderr are at end-of-file: nothing more will come.
    /// Called once; the protocol is dropped afterwards.
    ///
    /// `Err` when the status cannot be known: a [`StatusUnavailable`](super::StatusUnavailable)
    /// failure, the child reaped without the loop — by another part of the
    /// program, or by the kernel because `SIGCHLD` is ignored. The exit is
    /// still reported, never left silent (libuv's `exit_cb` never runs then)
    /// and never made up (asyncio reports 255).
    fn process_exited(&mut self, process: &Process, status: Result<ExitStatus, Failure>) {
        let _ = (process, status);
    }
}
