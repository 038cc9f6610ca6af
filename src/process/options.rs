//! How a child is started: [`SpawnOptions`] — each standard stream
//! ([`ChildStdio`]), its process group or session ([`ProcessGroup`]), and
//! how its exit is watched ([`ExitWatch`]). Used by `spawn.rs`; tests:
//! tests/process_options.rs.

use std::fmt;
use std::os::unix::io::OwnedFd;

/// What one of the child's standard streams is (std's `Stdio`, with the
/// pipe being the loop's).
#[derive(Default)]
#[non_exhaustive]
pub enum ChildStdio {
    /// A pipe to the loop: stdin a [`Transport`](crate::net::Transport),
    /// stdout and stderr to `out_received`/`err_received`. The default.
    #[default]
    Pipe,
    /// The parent's own stream (a terminal, say).
    Inherit,
    /// `/dev/null`.
    Null,
    /// This file descriptor (a file, a socket, one end of a pipe), handed
    /// over.
    Fd(OwnedFd),
}

impl fmt::Debug for ChildStdio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChildStdio::Pipe => f.write_str("Pipe"),
            ChildStdio::Inherit => f.write_str("Inherit"),
            ChildStdio::Null => f.write_str("Null"),
            ChildStdio::Fd(fd) => f.debug_tuple("Fd").field(fd).finish(),
        }
    }
}

/// Which process group the child is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProcessGroup {
    /// The parent's (the default): a Ctrl-C at the terminal reaches it too.
    #[default]
    Inherit,
    /// A new group led by the child (`setpgid(0, 0)`), so
    /// [`Process::signal_group`](super::Process::signal_group) reaches it
    /// and every process it starts, and the terminal's Ctrl-C does not.
    New,
    /// A new session (`setsid`), and so a new group: also detached from
    /// the controlling terminal, as a daemon is.
    Session,
}

/// How the loop learns that the child exited.
///
/// Either way only this child's own pid is waited for (never
/// `waitpid(-1)`, which would take other code's children), and a child
/// reaped without the loop — `SIGCHLD` ignored, or another part of the
/// program waited for it — ends with
/// [`StatusUnavailable`](super::StatusUnavailable), never in silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExitWatch {
    /// A pidfd where the kernel has one (Linux 5.3+), else `SIGCHLD`; also
    /// `SIGCHLD` when `DEFERLOOP_NO_PIDFD` is set in the environment (for a
    /// sandbox that refuses pidfds in a way not noticed). The default.
    #[default]
    Auto,
    /// A pidfd: readable once the child exits, also when the kernel reaped
    /// it; signals through it never reach another process that got the pid.
    /// The spawn fails where there is none.
    Pidfd,
    /// A `SIGCHLD` handler of the loop ([`Loop::add_signal_handler`](crate::Loop::add_signal_handler)) and
    /// `waitpid(pid, WNOHANG)`. While it is installed, `SIGCHLD` is no
    /// longer ignored, so the kernel does not reap children itself.
    Sigchld,
}

/// How [`Loop::spawn_process_with`](crate::Loop::spawn_process_with)
/// starts a child. `SpawnOptions::default()` is what
/// [`spawn_process`](crate::Loop::spawn_process) does: three pipes, the
/// parent's group, [`ExitWatch::Auto`].
///
/// # Examples
/// ```
/// use deferloop::process::{ChildStdio, ExitWatch, ProcessGroup, SpawnOptions};
///
/// let opts = SpawnOptions::default()
///     .stdin(ChildStdio::Null)
///     .stderr(ChildStdio::Inherit)
///     .group(ProcessGroup::New)
///     .watch(ExitWatch::Auto);
/// # let _ = opts;
/// ```
#[derive(Debug, Default)]
pub struct SpawnOptions {
    pub(crate) stdin: ChildStdio,
    pub(crate) stdout: ChildStdio,
    pub(crate) stderr: ChildStdio,
    pub(crate) group: ProcessGroup,
    pub(crate) watch: ExitWatch,
}

impl SpawnOptions {
    /// The child's stdin.
    pub fn stdin(mut self, s: ChildStdio) -> Self {
        self.stdin = s;
        self
    }
    /// The child's stdout.
    pub fn stdout(mut self, s: ChildStdio) -> Self {
        self.stdout = s;
        self
    }
    /// The child's stderr.
    pub fn stderr(mut self, s: ChildStdio) -> Self {
        self.stderr = s;
        self
    }
    /// The child's process group (or session).
    pub fn group(mut self, g: ProcessGroup) -> Self {
        self.group = g;
        self
    }
    /// How its exit is watched.
    pub fn watch(mut self, w: ExitWatch) -> Self {
        self.watch = w;
        self
    }
}
