//! Child processes with a protocol: [`Loop::spawn_process`] (and
//! [`spawn_process_with`](Loop::spawn_process_with) for each stream's stdio,
//! a process group, the exit watch), [`ProcessProtocol`], the [`Process`]
//! handle; [`Loop::process_output`] for output and status as one Deferred.
//!
//! A child is started with `std::process::Command`; its pipes are made
//! non-blocking and registered with the loop as stream connections (stdin is
//! a [`Transport`], with its write buffer and flow control). `process_exited`
//! is called once, after the exit *and* after stdout and stderr reached
//! end-of-file, so no output is lost. Every child is reaped: when it exits,
//! or when the loop closes (killed first, with its group if it leads one,
//! unless [`detach`](Process::detach)ed; a detached child still running is
//! waited for by a thread of its own).
//!
//! # How an exit is seen, case by case
//! - **pidfd** ([`ExitWatch::Auto`] on Linux 5.3+, or [`ExitWatch::Pidfd`]):
//!   the pidfd turns readable when the child exits; `waitid(P_PIDFD)` gives
//!   the status. Signals go by `pidfd_send_signal`, which never reaches
//!   another process that was given the pid.
//! - **`SIGCHLD`** (no pidfd, [`ExitWatch::Sigchld`], or `DEFERLOOP_NO_PIDFD`
//!   set in the environment): a handler of the loop's, installed while a
//!   child is watched, then `waitpid(pid, WNOHANG)` for each of its own
//!   children — never `waitpid(-1)`, which would take other code's children.
//!   Signals go by pid, and only while `waitid(WNOWAIT)` shows the child
//!   unreaped. While the handler is installed `SIGCHLD` is not ignored, so
//!   the kernel reaps no child itself; the old disposition returns after.
//! - **`SIGCHLD` ignored** (`SIG_IGN`, or `SA_NOCLDWAIT`): the kernel reaps
//!   children itself and no wait sees a status. The spawn logs a warning;
//!   the exit is still reported, with `Err(`[`StatusUnavailable`]`)` to
//!   `process_exited` and from [`Process::wait`] (on the `SIGCHLD` path only
//!   for a child that exited before the loop's handler was in).
//! - **Reaped elsewhere** (another part of the program waited for the pid):
//!   the same `StatusUnavailable`. Never silence, as libuv (its `exit_cb`
//!   never runs), and never a made-up status, as asyncio (255).
//!
//! A write to a child's stdin that the child closed fails with `EPIPE`
//! (heard as stdin's `pipe_closed` reason) and never raises `SIGPIPE` in the
//! host, whatever its disposition — a C host that embeds the library may
//! leave it at `SIG_DFL`.

mod exit;
mod options;
mod output;
mod protocol;
mod reap;
mod spawn;

pub use options::{ChildStdio, ExitWatch, ProcessGroup, SpawnOptions};
pub use output::{OutputOptions, OutputTooLarge};
pub use protocol::{ChildPipe, ProcessProtocol};

use crate::net::{Protocol, Transport};
use crate::reactor::WeakLoop;
use crate::{fail, succeed, Deferred, Error, ExceptionContext, Failure, Loop, Resolver, Signal};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::io;
use std::os::unix::io::OwnedFd;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::process::ExitStatus;
use std::rc::{Rc, Weak};

/// Stops watching a child for its exit.
pub(crate) type Unwatch = Box<dyn FnOnce(&Loop)>;

/// The state of one child, shared by its pipes and its exit watcher.
pub(crate) struct ChildState {
    lp: WeakLoop,
    pid: u32,
    command: String,
    at: &'static Location<'static>,
    /// Its pidfd, where the kernel has them: waits and signals through it
    /// name this process for good, whatever happens to the pid.
    pidfd: Option<OwnedFd>,
    /// It leads a process group (or session) of its own.
    own_group: bool,
    /// Set once reaped (by us, or found reaped without us): from then on
    /// the pid may name another process, and nothing is sent to it.
    pub(crate) reaped: Cell<bool>,
    /// How it ended, once reaped: its status, or a [`StatusUnavailable`].
    outcome: RefCell<Option<Result<ExitStatus, Failure>>>,
    /// The same, once `process_exited` was called; shared with the handles.
    finished: Finished,
    /// `None` while one of its methods runs, and after `process_exited`.
    proto: RefCell<Option<Box<dyn ProcessProtocol>>>,
    stdin: RefCell<Option<Transport>>,
    /// Our ends of stdout and stderr, while open.
    reads: RefCell<Vec<Transport>>,
    /// stdout and stderr still open.
    open_reads: Cell<u8>,
    done: Cell<bool>,
    pub(crate) detached: Cell<bool>,
    waiters: RefCell<Vec<Resolver<ExitStatus>>>,
    weak_self: RefCell<Weak<ChildState>>,
    /// Removes the exit watcher.
    unwatch: RefCell<Option<Unwatch>>,
}

impl ChildState {
    fn handle(&self) -> Process {
        Process {
            shared: self.weak_self.borrow().clone(),
            pid: self.pid,
            finished: self.finished.clone(),
        }
    }

    /// Calls one protocol method, containing a panic (reported; the child
    /// is left alone).
    fn call(&self, lp: &Loop, f: impl FnOnce(&mut dyn ProcessProtocol, &Process)) {
        let Some(mut proto) = self.proto.borrow_mut().take() else {
            return;
        };
        let p = self.handle();
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(&mut *proto, &p))) {
            let failure = Failure::from_panic(payload, self.at);
            lp.call_exception_handler(&ExceptionContext {
                message: "Exception in process protocol",
                failure: Some(&failure),
                location: Some(self.at),
            });
        }
        if !self.done.get() {
            *self.proto.borrow_mut() = Some(proto);
        }
    }

    /// Reaps the child if it has exited; then maybe `process_exited`.
    /// Found reaped without us (`ECHILD`): it ended, status unknown.
    pub(crate) fn try_reap(&self, lp: &Loop) {
        if self.reaped.get() {
            return;
        }
        let outcome = match reap::wait(self.pid, self.pidfd.as_ref(), false) {
            Ok(Some(status)) => Ok(status),
            Ok(None) => return,
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Err(self.unavailable()),
            Err(e) => {
                log::warn!(pid = self.pid, command:% = self.command;
                    "deferloop: waiting for {} failed: {e}", self.command);
                return;
            }
        };
        self.ended(lp, outcome);
    }

    fn unavailable(&self) -> Failure {
        Failure::new(StatusUnavailable {
            pid: self.pid,
            command: self.command.clone(),
        })
    }

    /// The child is reaped: no more watching; `process_exited` once the
    /// output is drained.
    fn ended(&self, lp: &Loop, outcome: Result<ExitStatus, Failure>) {
        self.reaped.set(true);
        *self.outcome.borrow_mut() = Some(outcome);
        let unwatch = self.unwatch.borrow_mut().take();
        if let Some(unwatch) = unwatch {
            unwatch(lp);
        }
        self.maybe_finish(lp);
    }

    fn pipe_lost(&self, lp: &Loop, which: ChildPipe, reason: Option<Failure>) {
        if which == ChildPipe::Stdin {
            self.stdin.borrow_mut().take();
        } else {
            self.open_reads.set(self.open_reads.get().saturating_sub(1));
        }
        self.call(lp, |p, proc| p.pipe_closed(proc, which, reason));
        self.maybe_finish(lp);
    }

    /// `process_exited` once the child is reaped and its output drained.
    fn maybe_finish(&self, lp: &Loop) {
        let Some(outcome) = self.outcome.borrow().clone() else {
            return;
        };
        if self.open_reads.get() > 0 || self.done.get() {
            return;
        }
        // Stdin still open: closed now, heard like the other pipes (its own
        // `connection_lost` would come after `process_exited`), and what
        // the child never read is not dropped in silence.
        let stdin = self.stdin.borrow_mut().take();
        if let Some(t) = stdin {
            let unwritten = t.write_buffer_size();
            t.abort();
            let reason = (unwritten > 0).then(|| {
                Failure::new(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!("the child exited with {unwritten} bytes of its stdin unwritten"),
                ))
            });
            self.call(lp, |p, proc| p.pipe_closed(proc, ChildPipe::Stdin, reason));
        }
        self.done.set(true);
        self.reads.borrow_mut().clear();
        *self.finished.borrow_mut() = Some(outcome.clone());
        let given = outcome.clone();
        self.call(lp, |p, proc| p.process_exited(proc, given));
        let proto = self.proto.borrow_mut().take();
        drop(proto);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for r in waiters {
            match &outcome {
                Ok(status) => r.callback_if_pending(*status),
                Err(f) => r.errback_if_pending(f.clone()),
            };
        }
    }
}

/// The net-side protocol of one pipe, forwarding to the process protocol.
struct PipeProto {
    shared: Rc<ChildState>,
    which: ChildPipe,
}

impl Protocol for PipeProto {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let Some(lp) = t.event_loop() else { return };
        match self.which {
            ChildPipe::Stdout => self.shared.call(&lp, |p, proc| p.out_received(proc, data)),
            ChildPipe::Stderr => self.shared.call(&lp, |p, proc| p.err_received(proc, data)),
            ChildPipe::Stdin => {}
        }
    }
    fn pause_writing(&mut self, t: &Transport) {
        if let Some(lp) = t.event_loop() {
            self.shared.call(&lp, |p, proc| p.pause_writing(proc));
        }
    }
    fn resume_writing(&mut self, t: &Transport) {
        if let Some(lp) = t.event_loop() {
            self.shared.call(&lp, |p, proc| p.resume_writing(proc));
        }
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        let lp = t.event_loop().or_else(|| self.shared.lp.upgrade());
        match lp {
            Some(lp) => self.shared.pipe_lost(&lp, self.which, reason),
            None => {
                if self.which != ChildPipe::Stdin {
                    let n = self.shared.open_reads.get();
                    self.shared.open_reads.set(n.saturating_sub(1));
                }
            }
        }
    }
}

/// A running (or finished) child process: a cheap handle (`Clone`) that
/// keeps nothing alive.
#[derive(Clone)]
pub struct Process {
    shared: Weak<ChildState>,
    pid: u32,
    /// How it ended, once `process_exited` was called: kept by the handles,
    /// so `wait` and `status` still answer once the child's state is gone
    /// (at once, for a child with no pipe to the loop).
    finished: Finished,
}

/// How a child ended, once `process_exited` was called.
pub(crate) type Finished = Rc<RefCell<Option<Result<ExitStatus, Failure>>>>;

impl Process {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's stdin, as a transport: `write`, `write_eof`/`close`
    /// (the child sees end-of-file), buffer limits and flow control as for
    /// a socket. `None` once stdin is closed.
    pub fn stdin(&self) -> Option<Transport> {
        self.shared.upgrade()?.stdin.borrow().clone()
    }

    /// Writes to the child's stdin (buffered, sent as the pipe takes it).
    /// Once stdin is closed a write is ignored, and logged (once per thread).
    pub fn write(&self, data: &[u8]) {
        match self.stdin() {
            Some(t) => t.write(data),
            None => crate::net::gone_write("a child's stdin", data.len()),
        }
    }

    /// Closes the child's stdin once what is buffered is written: the child
    /// reads end-of-file.
    pub fn close_stdin(&self) {
        if let Some(t) = self.stdin() {
            t.close();
        }
    }

    /// Sends `sig` to the child: through its pidfd where the kernel has
    /// them (Linux 5.3+), which names this process and no other even once
    /// its pid is reused; else by pid, and only while the child is known
    /// unreaped.
    ///
    /// # Errors
    /// [`Error::Gone`] once the child has been reaped, by the loop or
    /// without it (its pid may belong to another process by then); the OS
    /// error of the call otherwise.
    pub fn signal(&self, sig: Signal) -> Result<(), Error> {
        let shared = self.shared.upgrade().ok_or(Error::Gone)?;
        if shared.reaped.get() {
            return Err(Error::Gone);
        }
        match reap::send_signal(self.pid, shared.pidfd.as_ref(), sig.as_raw()) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::Gone),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends `sig` to the child's whole process group: the child and what
    /// it started (unless they left the group). For a child spawned with
    /// [`ProcessGroup::New`] or [`ProcessGroup::Session`], and only while
    /// the child is unreaped, since its pid names the group.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the child has no group of its own (the
    /// group would be the parent's); [`Error::Gone`] once the child has
    /// been reaped; the OS error of `killpg` otherwise.
    pub fn signal_group(&self, sig: Signal) -> Result<(), Error> {
        let shared = self.shared.upgrade().ok_or(Error::Gone)?;
        if !shared.own_group {
            return Err(Error::InvalidInput(
                "signal_group: the child has no process group of its own \
                 (spawn it with ProcessGroup::New or ProcessGroup::Session)",
            ));
        }
        if shared.reaped.get() {
            return Err(Error::Gone);
        }
        match reap::send_group_signal(self.pid, shared.pidfd.as_ref(), sig.as_raw()) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Error::Gone),
            Err(e) => Err(e.into()),
        }
    }

    /// Closes our ends of stdout and stderr: what the child (or a
    /// grandchild holding them) writes next meets a closed pipe.
    pub(crate) fn close_reads(&self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let reads = std::mem::take(&mut *shared.reads.borrow_mut());
        for t in reads {
            t.abort();
        }
    }

    /// Sends `SIGKILL`.
    ///
    /// # Errors
    /// As for [`signal`](Self::signal).
    pub fn kill(&self) -> Result<(), Error> {
        self.signal(Signal::from_raw(libc::SIGKILL))
    }

    /// Lets the child outlive the loop: when the loop closes it is not
    /// killed (it is still reaped, by a thread that waits for it).
    pub fn detach(&self) {
        if let Some(s) = self.shared.upgrade() {
            s.detached.set(true);
        }
    }

    /// The exit status, once the child has been reaped (`None` also when
    /// it is [unavailable](StatusUnavailable)).
    pub fn status(&self) -> Option<ExitStatus> {
        if let Some(r) = &*self.finished.borrow() {
            return r.as_ref().ok().copied();
        }
        self.shared.upgrade()?.outcome.borrow().clone()?.ok()
    }

    /// Whether `process_exited` has been called.
    pub fn has_exited(&self) -> bool {
        self.finished.borrow().is_some() || self.shared.upgrade().is_none_or(|s| s.done.get())
    }

    /// A Deferred that fires with the exit status right after
    /// `process_exited`, or fails with [`LoopClosed`](crate::deferred::LoopClosed) if the loop closes
    /// first, or with [`StatusUnavailable`] if the child was reaped without
    /// the loop (`SIGCHLD` ignored, or another part of the program waited
    /// for it).
    #[track_caller]
    pub fn wait(&self) -> Deferred<ExitStatus> {
        match self.finished.borrow().clone() {
            Some(Ok(st)) => return succeed(st),
            Some(Err(f)) => return fail(f),
            None => {}
        }
        let Some(s) = self.shared.upgrade() else {
            return fail(Failure::new(Error::Gone));
        };
        let (d, r) = Deferred::new();
        s.waiters.borrow_mut().push(r);
        d.tag_wait(|| crate::deferred::registry::Wait::Process { pid: self.pid });
        d
    }
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("status", &self.status())
            .finish()
    }
}

/// The failure of [`Process::wait`] and `process_exited` when the child was
/// reaped without the loop, so its exit status cannot be known: `SIGCHLD`
/// is ignored (`SIG_IGN`, or `SA_NOCLDWAIT`) and the kernel reaped it, or
/// another part of the program waited for it (`waitpid(-1)`, say). The exit
/// itself is certain; only the status is lost. (Twisted and libuv never
/// report such an exit; asyncio reports 255.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusUnavailable {
    /// The child's process id.
    pub pid: u32,
    /// The program that was run.
    pub command: String,
}

impl fmt::Display for StatusUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit status unavailable: reaped elsewhere or SIGCHLD ignored ({}, pid {})",
            self.command, self.pid
        )
    }
}

impl std::error::Error for StatusUnavailable {}
