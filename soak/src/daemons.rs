//! Daemons: a loop that keeps child processes coming while a thread sends
//! SIGUSR1 bursts, which that loop handles.

use super::*;

/// What the daemon loop saw: signals heard, children spawned and how each ended.
#[derive(Debug, Default, Clone)]
pub struct DaemonStats {
    pub signals_sent: u64,
    pub signals_heard: u64,
    pub spawned: u64,
    pub exited: u64,
    pub killed: u64,
    pub output_mismatches: u64,
    pub spawn_failures: u64,
    /// Children found unreaped after the loop closed (zombies or live).
    pub left_behind: u64,
}

/// A child's protocol: collects stdout, checks it on exit.
pub(crate) struct Kid {
    pub(crate) expect: Vec<u8>,
    pub(crate) got: Vec<u8>,
    pub(crate) stats: Rc<RefCell<DaemonStats>>,
}

impl deferloop::process::ProcessProtocol for Kid {
    fn out_received(&mut self, _: &deferloop::process::Process, data: &[u8]) {
        self.got.extend_from_slice(data);
    }
    fn process_exited(
        &mut self,
        _: &deferloop::process::Process,
        status: Result<std::process::ExitStatus, deferloop::Failure>,
    ) {
        let mut st = self.stats.borrow_mut();
        if status.is_ok_and(|s| s.success()) {
            st.exited += 1;
            if self.got != self.expect {
                st.output_mismatches += 1;
            }
        } else {
            st.killed += 1;
        }
    }
}

/// Spawns a child of one of three kinds: `echo`, `cat` fed through stdin,
/// or `sleep` killed soon after.
pub(crate) fn spawn_kid(lp: &Loop, stats: &Rc<RefCell<DaemonStats>>, n: u64) {
    let text = format!("kid {n}\n");
    let (mut cmd, expect, feed, kill) = match n % 3 {
        0 => {
            let mut c = std::process::Command::new("echo");
            c.arg(format!("kid {n}"));
            (c, text.into_bytes(), None, false)
        }
        1 => (
            std::process::Command::new("cat"),
            text.clone().into_bytes(),
            Some(text),
            false,
        ),
        _ => {
            let mut c = std::process::Command::new("sleep");
            c.arg("5");
            (c, Vec::new(), None, true)
        }
    };
    let kid = Kid {
        expect,
        got: Vec::new(),
        stats: stats.clone(),
    };
    let stats2 = stats.clone();
    stats.borrow_mut().spawned += 1;
    match lp.spawn_process(&mut cmd, kid) {
        Ok(p) => {
            if let Some(t) = feed {
                p.write(t.as_bytes());
                p.close_stdin();
            }
            if kill {
                let _ = p.kill();
            }
        }
        Err(_) => {
            let mut st = stats2.borrow_mut();
            st.spawned -= 1;
            st.spawn_failures += 1;
        }
    }
}

/// Spawns a child every 20 ms until `stop`, then stops the loop.
pub(crate) fn tick(lp: &Loop, stop: Arc<AtomicBool>, stats: Rc<RefCell<DaemonStats>>, n: u64) {
    if stop.load(Relaxed) {
        lp.stop();
        return;
    }
    spawn_kid(lp, &stats, n);
    let _ = lp.call_later(Duration::from_millis(20), move |lp| {
        tick(lp, stop, stats, n + 1)
    });
}

/// A loop with a SIGUSR1 handler that keeps a few children running until
/// `stop`; then closes (killing and reaping what is left).
pub(crate) fn daemons_thread(stop: Arc<AtomicBool>) -> DaemonStats {
    let ev = EventLoop::new().expect("daemon loop");
    let stats = Rc::new(RefCell::new(DaemonStats::default()));
    let s2 = stats.clone();
    let handler = ev
        .add_signal_handler(deferloop::Signal::USR1, move |_, _| {
            s2.borrow_mut().signals_heard += 1;
        })
        .expect("SIGUSR1 handler");
    tick(&ev, stop, stats.clone(), 0);
    let _ = ev.run();
    handler.remove();
    // Let the children spawned last finish, then close: the rest are killed.
    let settle = ev.call_later(Duration::from_millis(300), |lp| lp.stop());
    let _ = ev.run();
    drop(settle);
    ev.close().expect("close the daemon loop");
    drop(ev);
    let out = stats.borrow().clone();
    out
}

/// Reaps whatever children the process still has: each one is a zombie or
/// a child left running by someone (counted, then killed and reaped).
pub(crate) fn reap_leftovers() -> u64 {
    let mut left = 0;
    loop {
        // SAFETY: waitpid(-1, WNOHANG) with a null status pointer: asks for
        // any exited child without blocking.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r > 0 {
            left += 1; // a zombie
        } else if r == 0 {
            // A live child: nobody reaps it. Count it and stop looking.
            return left + 1;
        } else {
            return left; // ECHILD: no child at all
        }
    }
}
