//! Starting a child: [`Loop::spawn_process`] and
//! [`Loop::spawn_process_with`] — the `Command` set up from
//! [`SpawnOptions`], spawned, and adopted: its pipes registered as stream
//! connections, its exit watched. Used by `super` and `output.rs`; tests:
//! tests/process_*.rs.

use super::options::{ChildStdio, ExitWatch, ProcessGroup, SpawnOptions};
use super::{exit, reap, ChildPipe, ChildState, PipeProto, Process, ProcessProtocol};
use crate::net::pipe::{self, PipeIo};
use crate::{Error, Loop};
use std::cell::{Cell, RefCell};
use std::io;
use std::os::unix::process::CommandExt;
use std::panic::Location;
use std::process::{Child, Command, Stdio};
use std::rc::{Rc, Weak};

/// What a `spawn` error means, in the user's words, naming the command.
fn spawn_error(command: &str, e: io::Error) -> io::Error {
    let what = match e.kind() {
        io::ErrorKind::NotFound => "program not found",
        io::ErrorKind::PermissionDenied => "permission denied (is it executable?)",
        _ => "could not start it",
    };
    io::Error::new(e.kind(), format!("spawn {command}: {what}: {e}"))
}

fn stdio(s: ChildStdio) -> Stdio {
    match s {
        ChildStdio::Pipe => Stdio::piped(),
        ChildStdio::Inherit => Stdio::inherit(),
        ChildStdio::Null => Stdio::null(),
        ChildStdio::Fd(fd) => Stdio::from(fd),
    }
}

impl Loop {
    /// Starts `cmd` as a child process driven by `protocol`, with its
    /// stdin, stdout and stderr piped to the loop (what `cmd` said about
    /// them is replaced); returns its [`Process`] once it is running (after
    /// `protocol.connection_made`). The same as
    /// [`spawn_process_with`](Self::spawn_process_with) with
    /// `SpawnOptions::default()`.
    ///
    /// The spawn is synchronous, so its outcome is a `Result`, not a
    /// Deferred; the exit comes later, to `process_exited` and
    /// [`Process::wait`]. To collect the output and status as one Deferred,
    /// see [`process_output`](Self::process_output).
    ///
    /// # Errors
    /// [`Error::Closed`] if the loop is closed; [`Error::Io`] naming the
    /// command if the program does not exist or is not executable, or the
    /// working directory does not exist. No protocol method is called then.
    ///
    /// # Examples
    /// ```
    /// use deferloop::process::{Process, ProcessProtocol};
    /// use deferloop::{EventLoop, Failure};
    /// use std::process::{Command, ExitStatus};
    ///
    /// #[derive(Default)]
    /// struct Collect(Vec<u8>);
    /// impl ProcessProtocol for Collect {
    ///     fn out_received(&mut self, _: &Process, data: &[u8]) {
    ///         self.0.extend_from_slice(data);
    ///     }
    ///     fn process_exited(&mut self, _: &Process, status: Result<ExitStatus, Failure>) {
    ///         assert_eq!(self.0, b"hello\n");
    ///         assert!(status.unwrap().success());
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let p = ev.spawn_process(Command::new("echo").arg("hello"), Collect::default())?;
    /// let status = ev.run_until(p.wait())?;
    /// assert!(status.success());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn spawn_process<P: ProcessProtocol>(
        &self,
        cmd: &mut Command,
        protocol: P,
    ) -> Result<Process, Error> {
        self.spawn_at(
            cmd,
            Box::new(protocol),
            SpawnOptions::default(),
            Location::caller(),
        )
    }

    /// [`spawn_process`](Self::spawn_process) with a choice for each
    /// standard stream (pipe, inherit, `/dev/null`, a file descriptor), a
    /// process group or session of its own, and how its exit is watched.
    /// A stream that is not a pipe is never heard by the protocol: its
    /// `pipe_closed` does not come, stdin is `None`.
    ///
    /// # Errors
    /// As for `spawn_process`, and [`Error::Io`] (`Unsupported`) if
    /// [`ExitWatch::Pidfd`] is asked for where the kernel has no pidfd.
    ///
    /// # Examples
    /// ```
    /// use deferloop::process::{ChildStdio, ProcessGroup, ProcessProtocol, SpawnOptions};
    /// use deferloop::{EventLoop, Signal};
    /// use std::os::unix::process::ExitStatusExt;
    /// use std::process::Command;
    ///
    /// struct Quiet;
    /// impl ProcessProtocol for Quiet {}
    ///
    /// let ev = EventLoop::new()?;
    /// // A shell that starts a grandchild, in a group of its own, its
    /// // output thrown away: one signal ends them both.
    /// let opts = SpawnOptions::default()
    ///     .stdin(ChildStdio::Null)
    ///     .stdout(ChildStdio::Null)
    ///     .group(ProcessGroup::New);
    /// let p = ev.spawn_process_with(Command::new("sh").args(["-c", "sleep 30 & wait"]), Quiet, opts)?;
    /// assert!(p.stdin().is_none());
    /// p.signal_group(Signal::TERM)?;
    /// assert_eq!(ev.run_until(p.wait())?.signal(), Some(libc::SIGTERM));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn spawn_process_with<P: ProcessProtocol>(
        &self,
        cmd: &mut Command,
        protocol: P,
        options: SpawnOptions,
    ) -> Result<Process, Error> {
        self.spawn_at(cmd, Box::new(protocol), options, Location::caller())
    }

    pub(super) fn spawn_at(
        &self,
        cmd: &mut Command,
        protocol: Box<dyn ProcessProtocol>,
        options: SpawnOptions,
        at: &'static Location<'static>,
    ) -> Result<Process, Error> {
        let command = cmd.get_program().to_string_lossy().into_owned();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        if let Some(dir) = cmd.get_current_dir() {
            if !dir.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "spawn {command}: working directory {} does not exist or is not a directory",
                        dir.display()
                    ),
                )
                .into());
            }
        }
        let SpawnOptions {
            stdin,
            stdout,
            stderr,
            group,
            watch,
        } = options;
        let piped = [
            matches!(stdin, ChildStdio::Pipe),
            matches!(stdout, ChildStdio::Pipe),
            matches!(stderr, ChildStdio::Pipe),
        ];
        cmd.stdin(stdio(stdin))
            .stdout(stdio(stdout))
            .stderr(stdio(stderr));
        match group {
            ProcessGroup::Inherit => {}
            ProcessGroup::New => {
                cmd.process_group(0);
            }
            ProcessGroup::Session => {
                // SAFETY: setsid(2) is async-signal-safe, allocates
                // nothing and touches no lock: fit to run between fork and
                // exec.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::setsid() == -1 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    })
                };
            }
        }
        if reap::sigchld_ignored() {
            log::warn!(command:% = command;
                "deferloop: SIGCHLD is ignored (SIG_IGN or SA_NOCLDWAIT), so the kernel may reap \
                 {command} itself: its exit is still reported, but its exit status may be \
                 unavailable (StatusUnavailable)"
            );
        }
        let child = cmd.spawn().map_err(|e| spawn_error(&command, e))?;
        let own_group = group != ProcessGroup::Inherit;
        self.adopt_child(
            child,
            command.clone(),
            protocol,
            piped,
            own_group,
            watch,
            at,
        )
        .map_err(|e| io::Error::other(format!("spawn {command}: {e}")).into())
    }

    /// Registers a spawned child's pipes and exit watcher. On an error the
    /// child is killed and reaped, and what was opened is closed.
    #[allow(clippy::too_many_arguments)]
    fn adopt_child(
        &self,
        mut child: Child,
        command: String,
        protocol: Box<dyn ProcessProtocol>,
        piped: [bool; 3],
        own_group: bool,
        watch: ExitWatch,
        at: &'static Location<'static>,
    ) -> Result<Process, Error> {
        let stdin = child.stdin.take().map(mio::unix::pipe::Sender::from);
        let stdout = child.stdout.take().map(mio::unix::pipe::Receiver::from);
        let stderr = child.stderr.take().map(mio::unix::pipe::Receiver::from);
        debug_assert_eq!(piped, [stdin.is_some(), stdout.is_some(), stderr.is_some()]);
        let pid = child.id();
        // `child` is dropped here: that neither waits nor kills, and the
        // loop waits for the pid itself (by pidfd where it can).
        drop(child);
        let opened = match watch {
            ExitWatch::Sigchld => reap::Opened::Unsupported,
            ExitWatch::Auto => reap::pidfd_open(pid, true),
            ExitWatch::Pidfd => reap::pidfd_open(pid, false),
        };
        let (pidfd, gone) = match opened {
            reap::Opened::Fd(fd) => (Some(fd), false),
            reap::Opened::Unsupported => (None, false),
            reap::Opened::Gone => (None, true),
        };
        let no_pidfd = watch == ExitWatch::Pidfd && pidfd.is_none() && !gone;
        let open_reads = u8::from(stdout.is_some()) + u8::from(stderr.is_some());
        let shared = Rc::new(ChildState {
            lp: self.downgrade(),
            pid,
            command,
            at,
            pidfd,
            own_group,
            reaped: Cell::new(false),
            outcome: RefCell::new(None),
            finished: Rc::default(),
            proto: RefCell::new(None),
            stdin: RefCell::new(None),
            reads: RefCell::new(Vec::new()),
            open_reads: Cell::new(open_reads),
            done: Cell::new(false),
            detached: Cell::new(false),
            waiters: RefCell::new(Vec::new()),
            weak_self: RefCell::new(Weak::new()),
            unwatch: RefCell::new(None),
        });
        *shared.weak_self.borrow_mut() = Rc::downgrade(&shared);
        let mut opened = Vec::new();
        let r = (|| -> Result<(), Error> {
            if no_pidfd {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "ExitWatch::Pidfd asked for, but this kernel gives no pidfd (Linux 5.3+)",
                )
                .into());
            }
            let mut pipes = Vec::new();
            if let Some(tx) = stdin {
                tx.set_nonblocking(true)?;
                pipes.push((PipeIo::Write(Some(tx)), ChildPipe::Stdin));
            }
            for (rx, which) in [(stdout, ChildPipe::Stdout), (stderr, ChildPipe::Stderr)] {
                if let Some(rx) = rx {
                    rx.set_nonblocking(true)?;
                    pipes.push((PipeIo::Read(rx), which));
                }
            }
            for (io, which) in pipes {
                let proto = Box::new(PipeProto {
                    shared: shared.clone(),
                    which,
                });
                let t = pipe::open(self, io, proto, at)?;
                if which == ChildPipe::Stdin {
                    *shared.stdin.borrow_mut() = Some(t.clone());
                } else {
                    shared.reads.borrow_mut().push(t.clone());
                }
                opened.push(t);
            }
            if gone {
                return Ok(());
            }
            exit::watch(self, &shared, at)
        })();
        if let Err(e) = r {
            shared.done.set(true); // no protocol method, ever
            for t in opened {
                t.abort();
            }
            exit::kill_and_reap(&shared);
            return Err(e);
        }
        *shared.proto.borrow_mut() = Some(protocol);
        shared.call(self, |p, proc| p.connection_made(proc));
        if gone {
            // Reaped without us before a pidfd could name it.
            let f = shared.unavailable();
            shared.ended(self, Err(f));
        } else {
            // It may have exited already (a watcher installed late sees no edge).
            shared.try_reap(self);
        }
        Ok(shared.handle())
    }
}
