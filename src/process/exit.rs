//! Noticing that a child exited, and reaping it: `ChildSource`, an edge-mode
//! `EventSource` per child until it is reaped. Through a pidfd (Linux 5.3+: readable once the
//! child exits, also when the kernel reaped it because `SIGCHLD` is
//! ignored; `waitid(P_PIDFD)` gives the status) or, where there is none, a
//! `SIGCHLD` handler of the loop and `waitpid(pid, WNOHANG)` for the child's own pid, never `-1`, so
//! children that other code spawned are left to it. A wait that finds the
//! child gone (`ECHILD`) ends it with `StatusUnavailable` (see `reap.rs`).
//!
//! When the loop closes with the child still running it is killed and
//! reaped (a `SIGKILL`ed child is gone at once), or, if detached, waited for
//! by a thread of its own: no zombie either way.

use super::reap;
use super::ChildState;
use crate::deferred::LoopClosed;
use crate::source::{EventSource, Interest, Mode, PostAction, Readiness};
use crate::{Error, Loop, Signal, SignalHandler};
use std::os::unix::io::{AsFd, BorrowedFd};
use std::panic::Location;
use std::rc::Rc;

/// The exit watcher, a source on the public [`EventSource`] trait in
/// [`Mode::Edge`]: the pidfd turns readable once.
struct ChildSource {
    shared: Rc<ChildState>,
    sigchld: Option<SignalHandler>,
}

impl EventSource for ChildSource {
    type Ret = PostAction;

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.shared.pidfd.as_ref().map(AsFd::as_fd)
    }

    fn interest(&self) -> Interest {
        Interest {
            readable: self.shared.pidfd.is_some(),
            writable: false,
        }
    }

    fn mode(&self) -> Mode {
        Mode::Edge
    }

    fn process(&mut self, lp: &Loop, _: Readiness) -> PostAction {
        self.shared.try_reap(lp);
        PostAction::Continue
    }

    fn loop_closed(&mut self, _lp: &Loop) {
        if self.shared.detached.get() {
            reap_in_thread(&self.shared);
        } else {
            kill_and_reap(&self.shared);
        }
        if let Some(h) = self.sigchld.take() {
            h.remove();
        }
        let waiters = std::mem::take(&mut *self.shared.waiters.borrow_mut());
        for r in waiters {
            r.errback_if_pending(LoopClosed);
        }
    }

    fn name(&self) -> &'static str {
        "child process"
    }
}

/// Starts watching `shared`'s child for its exit; installs `shared.unwatch`.
pub(super) fn watch(
    lp: &Loop,
    shared: &Rc<ChildState>,
    at: &'static Location<'static>,
) -> Result<(), Error> {
    let sigchld = if shared.pidfd.is_some() {
        None
    } else {
        let weak = Rc::downgrade(shared);
        Some(lp.add_signal_handler(Signal::CHLD, move |lp, _| {
            if let Some(s) = weak.upgrade() {
                s.try_reap(lp);
            }
        })?)
    };
    let added = lp.add_source_at(
        at,
        ChildSource {
            shared: shared.clone(),
            sigchld: sigchld.clone(),
        },
    );
    let src = match added {
        Ok(h) => {
            let src = h.downgrade();
            h.detach();
            src
        }
        Err(e) => {
            if let Some(h) = sigchld {
                h.remove();
            }
            return Err(e);
        }
    };
    *shared.unwatch.borrow_mut() = Some(Box::new(move |_: &Loop| {
        if let Some(h) = sigchld {
            h.remove();
        }
        src.remove(); // deregisters the pidfd, which stays open in `shared`
    }));
    Ok(())
}

/// Kills the child if it is still ours (by pidfd, or by pid while known
/// unreaped), with its group if it leads one, and waits for it: a
/// `SIGKILL`ed child is gone at once.
pub(super) fn kill_and_reap(shared: &ChildState) {
    if shared.reaped.replace(true) {
        return;
    }
    let pidfd = shared.pidfd.as_ref();
    if shared.own_group {
        // What it started goes with it.
        let _ = reap::send_group_signal(shared.pid, pidfd, libc::SIGKILL);
    }
    let _ = reap::send_signal(shared.pid, pidfd, libc::SIGKILL);
    // ECHILD (reaped without us) is fine: nothing is left to wait for.
    let _ = reap::wait(shared.pid, pidfd, true);
}

/// Leaves a detached child running, reaped by a thread that waits for it.
fn reap_in_thread(shared: &ChildState) {
    if shared.reaped.replace(true) {
        return;
    }
    let pid = shared.pid;
    let pidfd = shared.pidfd.as_ref().and_then(|fd| fd.try_clone().ok());
    let name = format!("deferloop-reap-{pid}");
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let _ = reap::wait(pid, pidfd.as_ref(), true);
    });
    if let Err(e) = spawned {
        log::warn!(pid = pid; "deferloop: no thread to reap a detached child: {e}");
    }
}
