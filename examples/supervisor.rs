//! A process supervisor: runs a command, restarts it with back-off whenever
//! it exits, and stops cleanly on SIGTERM or SIGINT — it sends the child
//! SIGTERM, waits for it (killing it after the stop timeout), and exits 0
//! with no child left behind. A second signal stops it at once.
//!
//! Run: `cargo run --example supervisor -- [--stop-timeout-ms N] CMD [ARGS...]`,
//! e.g. `cargo run --example supervisor -- sh -c 'date; sleep 1; exit 1'`.
//! Prints `started PID` for each start, on stdout.

use deferloop::process::{Process, ProcessProtocol};
use deferloop::shutdown::{Phase, Shutdown};
use deferloop::{EventLoop, Failure, Handle, Loop, Signal};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::process::{Command, ExitCode, ExitStatus};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The first restart delay; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A child that ran this long resets the back-off.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Passes the child's output through as it comes.
struct PassThrough;

impl ProcessProtocol for PassThrough {
    fn out_received(&mut self, _: &Process, data: &[u8]) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(data);
        let _ = out.flush();
    }
    fn err_received(&mut self, _: &Process, data: &[u8]) {
        let _ = std::io::stderr().write_all(data);
    }
}

/// One supervised command.
pub struct Supervisor {
    argv: Vec<String>,
    backoff: Cell<Duration>,
    child: RefCell<Option<Process>>,
    started: Cell<Option<Instant>>,
    restart: RefCell<Option<Handle>>,
    stopping: Cell<bool>,
    ever_started: Cell<bool>,
    /// Set when the first start fails: the program cannot run at all.
    fatal: RefCell<Option<String>>,
}

impl Supervisor {
    /// A supervisor for `argv` (program, then arguments).
    pub fn new(argv: Vec<String>) -> Rc<Supervisor> {
        Rc::new(Supervisor {
            argv,
            backoff: Cell::new(FIRST_BACKOFF),
            child: RefCell::new(None),
            started: Cell::new(None),
            restart: RefCell::new(None),
            stopping: Cell::new(false),
            ever_started: Cell::new(false),
            fatal: RefCell::new(None),
        })
    }

    /// Starts the command; when it exits, starts it again after the back-off.
    pub fn start(self: &Rc<Self>, lp: &Loop) {
        if self.stopping.get() {
            return;
        }
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        let (me, me2) = (self.clone(), self.clone());
        lp.spawn_process(&mut cmd, PassThrough)
            .add_callbacks(
                move |p: Process| {
                    println!("started {}", p.pid());
                    let _ = std::io::stdout().flush();
                    me.ever_started.set(true);
                    me.started.set(Some(Instant::now()));
                    *me.child.borrow_mut() = Some(p.clone());
                    let me = me.clone();
                    p.wait()
                        .add_callback(move |status| {
                            me.exited(status);
                            Ok(())
                        })
                        .detach();
                    Ok(())
                },
                move |f: Failure| {
                    eprintln!("supervisor: {f}");
                    if me2.ever_started.get() {
                        me2.schedule_restart();
                    } else {
                        *me2.fatal.borrow_mut() = Some(f.to_string());
                        if let Ok(lp) = Loop::current() {
                            lp.stop();
                        }
                    }
                    Ok(())
                },
            )
            .detach();
    }

    fn exited(self: &Rc<Self>, status: ExitStatus) {
        self.child.borrow_mut().take();
        if self.stopping.get() {
            return;
        }
        if self
            .started
            .get()
            .is_some_and(|t| t.elapsed() >= STABLE_AFTER)
        {
            self.backoff.set(FIRST_BACKOFF);
        }
        eprintln!(
            "supervisor: {} exited ({status}); restarting in {:?}",
            self.argv[0],
            self.backoff.get()
        );
        self.schedule_restart();
    }

    fn schedule_restart(self: &Rc<Self>) {
        let Ok(lp) = Loop::current() else { return };
        let delay = self.backoff.get();
        self.backoff.set((delay * 2).min(MAX_BACKOFF));
        let me = self.clone();
        *self.restart.borrow_mut() = lp.call_later(delay, move |lp| me.start(lp)).ok();
    }

    /// Stops restarting and asks the child to stop: a Deferred that fires
    /// when it has exited.
    pub fn stop(&self) -> deferloop::Deferred<()> {
        self.stopping.set(true);
        if let Some(h) = self.restart.borrow_mut().take() {
            h.cancel();
        }
        match self.child.borrow().clone() {
            Some(p) if !p.has_exited() => {
                let _ = p.signal(Signal::TERM);
                p.wait().map(|_| ())
            }
            _ => deferloop::succeed(()),
        }
    }
}

/// `[--stop-timeout-ms N] CMD [ARGS...]`.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = args.into_iter().collect();
    let mut stop_timeout = Duration::from_secs(5);
    if args.first().map(String::as_str) == Some("--stop-timeout-ms") {
        let ms = args.get(1).ok_or("--stop-timeout-ms needs a value")?;
        stop_timeout = Duration::from_millis(
            ms.parse()
                .map_err(|e| format!("--stop-timeout-ms {ms:?}: {e}"))?,
        );
        args.drain(..2);
    }
    if args.is_empty() {
        return Err("usage: supervisor [--stop-timeout-ms N] CMD [ARGS...]".into());
    }
    let ev = EventLoop::new()?;
    let sup = Supervisor::new(args);
    let shutdown = Shutdown::new(&ev);
    let s2 = sup.clone();
    shutdown.add_trigger(Phase::Before, move |_| s2.stop());
    shutdown.set_deadline(Phase::Before, stop_timeout);
    shutdown.stop_on_signals()?;
    let s3 = sup.clone();
    ev.call_soon(move |lp| s3.start(lp))?;
    ev.run()?;
    if let Some(e) = sup.fatal.borrow_mut().take() {
        return Err(e.into());
    }
    // Closing the loop kills and reaps a child that ignored SIGTERM.
    ev.close()?;
    Ok(())
}

#[allow(dead_code)]
fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}
