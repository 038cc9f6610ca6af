//! Child processes with a protocol: [`Loop::spawn_process`],
//! [`ProcessProtocol`], the [`Process`] handle.
//!
//! A child is started with `std::process::Command`; its three pipes are made
//! non-blocking and registered with the loop as stream connections (stdin is
//! a [`Transport`], with its write buffer and flow control). Its exit is
//! noticed through a pidfd where the kernel has one (Linux 5.3+), else through
//! `SIGCHLD`. `process_exited` is called once, after the exit *and* after
//! stdout and stderr reached end-of-file, so no output is lost. Every child
//! is reaped: when it exits, or when the loop closes (killed first, unless
//! [`detach`](Process::detach)ed; a detached child still running is waited
//! for by a thread of its own).

mod exit;

use crate::deferred::LoopClosed;
use crate::net::pipe::{self, PipeIo};
use crate::net::{Protocol, Transport};
use crate::reactor::WeakLoop;
use crate::{fail, succeed, Deferred, Error, ExceptionContext, Failure, Loop, Resolver, Signal};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::rc::{Rc, Weak};

pub use exit::set_use_pidfd;

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
    fn process_exited(&mut self, process: &Process, status: ExitStatus) {
        let _ = (process, status);
    }
}

/// Stops watching a child for its exit.
pub(crate) type Unwatch = Box<dyn FnOnce(&Loop)>;

/// The state of one child, shared by its pipes and its exit watcher.
pub(crate) struct Shared {
    lp: WeakLoop,
    pid: u32,
    command: String,
    at: &'static Location<'static>,
    /// `None` once reaped.
    pub(crate) child: RefCell<Option<Child>>,
    status: Cell<Option<ExitStatus>>,
    /// `None` while one of its methods runs, and after `process_exited`.
    proto: RefCell<Option<Box<dyn ProcessProtocol>>>,
    stdin: RefCell<Option<Transport>>,
    /// stdout and stderr still open.
    open_reads: Cell<u8>,
    done: Cell<bool>,
    pub(crate) detached: Cell<bool>,
    waiters: RefCell<Vec<Resolver<ExitStatus>>>,
    weak_self: RefCell<Weak<Shared>>,
    /// Removes the exit watcher.
    unwatch: RefCell<Option<Unwatch>>,
}

impl Shared {
    fn handle(&self) -> Process {
        Process {
            shared: self.weak_self.borrow().clone(),
            pid: self.pid,
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
    pub(crate) fn try_reap(&self, lp: &Loop) {
        let status = {
            let mut child = self.child.borrow_mut();
            let Some(c) = child.as_mut() else { return };
            match c.try_wait() {
                Ok(Some(status)) => {
                    *child = None;
                    status
                }
                Ok(None) => return,
                Err(e) => {
                    log::warn!("deferloop: waiting for {} failed: {e}", self.command);
                    return;
                }
            }
        };
        self.status.set(Some(status));
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
        let Some(status) = self.status.get() else {
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
        self.call(lp, |p, proc| p.process_exited(proc, status));
        let proto = self.proto.borrow_mut().take();
        drop(proto);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for r in waiters {
            r.callback_if_pending(status);
        }
    }
}

/// The net-side protocol of one pipe, forwarding to the process protocol.
struct PipeProto {
    shared: Rc<Shared>,
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
    shared: Weak<Shared>,
    pid: u32,
}

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

    /// Sends `sig` to the child.
    ///
    /// # Errors
    /// [`Error::Gone`] once the child has been reaped (its pid may belong to
    /// another process by then); the OS error of `kill`.
    pub fn signal(&self, sig: Signal) -> Result<(), Error> {
        let shared = self.shared.upgrade().ok_or(Error::Gone)?;
        if shared.child.borrow().is_none() {
            return Err(Error::Gone);
        }
        let pid = libc::pid_t::try_from(self.pid).map_err(|_| Error::Gone)?;
        // SAFETY: kill(2) on our own child, not yet reaped (checked just
        // above, on this thread, which is the only one that reaps it), so
        // the pid still names it.
        if unsafe { libc::kill(pid, sig.as_raw()) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(())
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

    /// The exit status, once the child has been reaped.
    pub fn status(&self) -> Option<ExitStatus> {
        self.shared.upgrade()?.status.get()
    }

    /// Whether `process_exited` has been called.
    pub fn has_exited(&self) -> bool {
        self.shared.upgrade().is_none_or(|s| s.done.get())
    }

    /// A Deferred that fires with the exit status right after
    /// `process_exited`, or fails with [`LoopClosed`] if the loop closes first.
    #[track_caller]
    pub fn wait(&self) -> Deferred<ExitStatus> {
        let Some(s) = self.shared.upgrade() else {
            return fail(Failure::new(Error::Gone));
        };
        if s.done.get() {
            if let Some(st) = s.status.get() {
                return succeed(st);
            }
        }
        let (d, r) = Deferred::new();
        s.waiters.borrow_mut().push(r);
        d.tag_wait(|| crate::ps::Wait::Process { pid: self.pid });
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

/// What a `spawn` error means, in the user's words, naming the command.
fn spawn_error(command: &str, e: io::Error) -> io::Error {
    let what = match e.kind() {
        io::ErrorKind::NotFound => "program not found",
        io::ErrorKind::PermissionDenied => "permission denied (is it executable?)",
        _ => "could not start it",
    };
    io::Error::new(e.kind(), format!("spawn {command}: {what}: {e}"))
}

impl Loop {
    /// Starts `cmd` as a child process driven by `protocol`; the Deferred
    /// fires with its [`Process`] once it is running (after
    /// `protocol.connection_made`).
    ///
    /// stdin, stdout and stderr are always pipes to the loop (what `cmd`
    /// said about them is replaced). The Deferred fails — and no protocol
    /// method is called — if the program does not exist or is not
    /// executable, if the working directory does not exist, or if the loop
    /// is closed; the message names the command.
    ///
    /// # Examples
    /// ```
    /// use deferloop::process::{Process, ProcessProtocol};
    /// use deferloop::EventLoop;
    /// use std::process::{Command, ExitStatus};
    ///
    /// #[derive(Default)]
    /// struct Collect(Vec<u8>);
    /// impl ProcessProtocol for Collect {
    ///     fn out_received(&mut self, _: &Process, data: &[u8]) {
    ///         self.0.extend_from_slice(data);
    ///     }
    ///     fn process_exited(&mut self, _: &Process, status: ExitStatus) {
    ///         assert_eq!(self.0, b"hello\n");
    ///         assert!(status.success());
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let p = ev.run_until(ev.spawn_process(Command::new("echo").arg("hello"), Collect::default()))?;
    /// let status = ev.run_until(p.wait())?;
    /// assert!(status.success());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn spawn_process<P: ProcessProtocol>(
        &self,
        cmd: &mut Command,
        protocol: P,
    ) -> Deferred<Process> {
        let at = Location::caller();
        let command = cmd.get_program().to_string_lossy().into_owned();
        if self.is_closed() {
            return fail(Failure::new(LoopClosed));
        }
        if let Some(dir) = cmd.get_current_dir() {
            if !dir.is_dir() {
                let e = io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "spawn {command}: working directory {} does not exist or is not a directory",
                        dir.display()
                    ),
                );
                return fail(Failure::new(e));
            }
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return fail(Failure::new(spawn_error(&command, e))),
        };
        match self.adopt_child(child, command.clone(), Box::new(protocol), at) {
            Ok(p) => succeed(p),
            Err(e) => fail(Failure::new(io::Error::other(format!(
                "spawn {command}: {e}"
            )))),
        }
    }

    /// Registers a spawned child's pipes and exit watcher. On an error the
    /// child is killed and reaped, and what was opened is closed.
    fn adopt_child(
        &self,
        mut child: Child,
        command: String,
        protocol: Box<dyn ProcessProtocol>,
        at: &'static Location<'static>,
    ) -> Result<Process, Error> {
        let stdin = mio::unix::pipe::Sender::from(child.stdin.take().expect("piped"));
        let stdout = mio::unix::pipe::Receiver::from(child.stdout.take().expect("piped"));
        let stderr = mio::unix::pipe::Receiver::from(child.stderr.take().expect("piped"));
        let pid = child.id();
        let shared = Rc::new(Shared {
            lp: self.downgrade(),
            pid,
            command,
            at,
            child: RefCell::new(Some(child)),
            status: Cell::new(None),
            proto: RefCell::new(None),
            stdin: RefCell::new(None),
            open_reads: Cell::new(2),
            done: Cell::new(false),
            detached: Cell::new(false),
            waiters: RefCell::new(Vec::new()),
            weak_self: RefCell::new(Weak::new()),
            unwatch: RefCell::new(None),
        });
        *shared.weak_self.borrow_mut() = Rc::downgrade(&shared);
        let mut opened = Vec::new();
        let r = (|| -> Result<(), Error> {
            stdin.set_nonblocking(true)?;
            stdout.set_nonblocking(true)?;
            stderr.set_nonblocking(true)?;
            let pipes = [
                (PipeIo::Write(Some(stdin)), ChildPipe::Stdin),
                (PipeIo::Read(stdout), ChildPipe::Stdout),
                (PipeIo::Read(stderr), ChildPipe::Stderr),
            ];
            for (io, which) in pipes {
                let proto = Box::new(PipeProto {
                    shared: shared.clone(),
                    which,
                });
                let t = pipe::open(self, io, proto, at)?;
                if which == ChildPipe::Stdin {
                    *shared.stdin.borrow_mut() = Some(t.clone());
                }
                opened.push(t);
            }
            exit::watch(self, &shared, at)
        })();
        if let Err(e) = r {
            shared.done.set(true); // no protocol method, ever
            for t in opened {
                t.abort();
            }
            let child = shared.child.borrow_mut().take();
            if let Some(mut c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(e);
        }
        *shared.proto.borrow_mut() = Some(protocol);
        shared.call(self, |p, proc| p.connection_made(proc));
        // It may have exited already (a watcher installed late sees no edge).
        shared.try_reap(self);
        Ok(shared.handle())
    }
}
