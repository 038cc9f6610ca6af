//! A child's output and status as one Deferred: [`Loop::process_output`]
//! (asyncio's `communicate`, tokio's `output()`, Twisted's
//! `getProcessOutputAndValue`), with a cap on each stream. Tests:
//! tests/process_options.rs.

use super::options::{ChildStdio, SpawnOptions};
use super::{ChildPipe, Process, ProcessProtocol};
use crate::{fail, Deferred, Failure, Loop};
use std::cell::RefCell;
use std::fmt;
use std::panic::Location;
use std::process::{Command, ExitStatus, Output};
use std::rc::Rc;

/// What [`Loop::process_output`] feeds the child and how much it keeps.
/// The default: stdin is `/dev/null`, and stdout and stderr are kept up to
/// 16 MiB each.
#[derive(Debug, Clone)]
pub struct OutputOptions {
    input: Option<Vec<u8>>,
    max_stdout: usize,
    max_stderr: usize,
}

impl Default for OutputOptions {
    fn default() -> Self {
        OutputOptions {
            input: None,
            max_stdout: 16 << 20,
            max_stderr: 16 << 20,
        }
    }
}

impl OutputOptions {
    /// Written to the child's stdin, which is then closed (a child that
    /// exits without reading it all is no error).
    pub fn input(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.input = Some(data.into());
        self
    }
    /// At most this many bytes of stdout; past it, [`OutputTooLarge`].
    pub fn max_stdout(mut self, bytes: usize) -> Self {
        self.max_stdout = bytes;
        self
    }
    /// At most this many bytes of stderr; past it, [`OutputTooLarge`].
    pub fn max_stderr(mut self, bytes: usize) -> Self {
        self.max_stderr = bytes;
        self
    }
}

/// The failure of [`Loop::process_output`] when a stream passed its cap:
/// the child was killed (an output that large is a runaway, not a result),
/// our ends of its streams closed (what still writes to them meets a closed
/// pipe), and what it wrote is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputTooLarge {
    /// The program that was run.
    pub command: String,
    /// [`ChildPipe::Stdout`] or [`ChildPipe::Stderr`].
    pub stream: ChildPipe,
    /// Its cap, in bytes.
    pub limit: usize,
}

impl fmt::Display for OutputTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stream = match self.stream {
            ChildPipe::Stdout => "stdout",
            ChildPipe::Stderr => "stderr",
            ChildPipe::Stdin => "stdin",
        };
        write!(
            f,
            "output too large: {} wrote more than {} bytes to {stream}, so it was killed",
            self.command, self.limit
        )
    }
}

impl std::error::Error for OutputTooLarge {}

#[derive(Default)]
struct Kept {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    too_large: Option<OutputTooLarge>,
}

struct Collect {
    kept: Rc<RefCell<Kept>>,
    input: Option<Vec<u8>>,
    caps: (usize, usize),
    command: String,
}

impl Collect {
    fn keep(&self, process: &Process, stream: ChildPipe, data: &[u8]) {
        let mut kept = self.kept.borrow_mut();
        if kept.too_large.is_some() {
            return;
        }
        let (buf, limit) = match stream {
            ChildPipe::Stderr => (&mut kept.stderr, self.caps.1),
            _ => (&mut kept.stdout, self.caps.0),
        };
        if buf.len().saturating_add(data.len()) <= limit {
            buf.extend_from_slice(data);
            return;
        }
        kept.too_large = Some(OutputTooLarge {
            command: self.command.clone(),
            stream,
            limit,
        });
        kept.stdout = Vec::new();
        kept.stderr = Vec::new();
        drop(kept);
        // Gone already is fine: it ended on its own. Our ends close too, so
        // a grandchild that holds the streams cannot keep the result waiting.
        let _ = process.kill();
        process.close_reads();
    }
}

impl ProcessProtocol for Collect {
    fn connection_made(&mut self, process: &Process) {
        if let Some(input) = self.input.take() {
            process.write(&input);
            process.close_stdin();
        }
    }
    fn out_received(&mut self, process: &Process, data: &[u8]) {
        self.keep(process, ChildPipe::Stdout, data);
    }
    fn err_received(&mut self, process: &Process, data: &[u8]) {
        self.keep(process, ChildPipe::Stderr, data);
    }
    fn process_exited(&mut self, _: &Process, _: Result<ExitStatus, Failure>) {}
}

impl Loop {
    /// Runs `cmd` to its end and fires with its stdout, stderr and exit
    /// status as one [`Output`]: asyncio's `communicate`, tokio's
    /// `output()`, Twisted's `getProcessOutputAndValue`. stdin is
    /// `/dev/null` unless [`OutputOptions::input`] gives it bytes (then a
    /// pipe, closed once they are written). What `cmd` said about its
    /// stdio is replaced.
    ///
    /// A non-zero exit is no failure: look at `status`. The Deferred fails
    /// with [`OutputTooLarge`] if a stream passes its cap (the child is
    /// killed; asyncio and tokio have no cap and keep growing), with the
    /// spawn's [`Error`](crate::Error) if the child cannot start, with
    /// [`StatusUnavailable`](super::StatusUnavailable) if it was reaped
    /// without the loop, with [`LoopClosed`](crate::deferred::LoopClosed)
    /// if the loop closes first (the child is killed then).
    ///
    /// # Examples
    /// ```
    /// use deferloop::process::OutputOptions;
    /// use deferloop::EventLoop;
    /// use std::process::Command;
    ///
    /// let ev = EventLoop::new()?;
    /// let opts = OutputOptions::default().input("b\na\n");
    /// let out = ev.run_until(ev.process_output(&mut Command::new("sort"), opts))?;
    /// assert!(out.status.success());
    /// assert_eq!(out.stdout, b"a\nb\n");
    /// assert!(out.stderr.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn process_output(&self, cmd: &mut Command, options: OutputOptions) -> Deferred<Output> {
        let at = Location::caller();
        let kept = Rc::new(RefCell::new(Kept::default()));
        let stdin = match options.input {
            Some(_) => ChildStdio::Pipe,
            None => ChildStdio::Null,
        };
        let collect = Collect {
            kept: kept.clone(),
            input: options.input,
            caps: (options.max_stdout, options.max_stderr),
            command: cmd.get_program().to_string_lossy().into_owned(),
        };
        let spawn = SpawnOptions::default().stdin(stdin);
        let p = match self.spawn_at(cmd, Box::new(collect), spawn, at) {
            Ok(p) => p,
            Err(e) => return fail(Failure::with_origin(e, at)),
        };
        p.wait().add_both(move |r: Result<ExitStatus, Failure>| {
            let mut kept = kept.borrow_mut();
            if let Some(t) = kept.too_large.take() {
                return Err(Failure::with_origin(t, at));
            }
            Ok(Output {
                status: r?,
                stdout: std::mem::take(&mut kept.stdout),
                stderr: std::mem::take(&mut kept.stderr),
            })
        })
    }
}
