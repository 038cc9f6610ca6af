//! Noticing that a child exited, and reaping it: `ChildSource`, a source per
//! child until it is reaped. Through a pidfd (Linux 5.3+: readable once the
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
use crate::reactor::{PostAction, Ready, Source, SourceKey};
use crate::{Error, Loop, Signal, SignalHandler};
use std::cell::RefCell;
use std::os::unix::io::AsRawFd;
use std::panic::Location;
use std::rc::Rc;

struct ChildSource {
    shared: Rc<ChildState>,
    sigchld: RefCell<Option<SignalHandler>>,
}

impl Source for ChildSource {
    fn dispatch(self: Rc<Self>, lp: &Loop, _: SourceKey, _: Ready) -> PostAction {
        self.shared.try_reap(lp);
        PostAction::Continue
    }

    fn close(self: Rc<Self>, _lp: &Loop) {
        if self.shared.detached.get() {
            reap_in_thread(&self.shared);
        } else {
            kill_and_reap(&self.shared);
        }
        let handler = self.sigchld.borrow_mut().take();
        if let Some(h) = handler {
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

    fn interest(&self) -> (bool, bool) {
        (self.shared.pidfd.is_some(), false)
    }
}

/// Starts watching `shared`'s child for its exit; installs `shared.unwatch`.
pub(super) fn watch(
    lp: &Loop,
    shared: &Rc<ChildState>,
    at: &'static Location<'static>,
) -> Result<(), Error> {
    let raw = shared.pidfd.as_ref().map(AsRawFd::as_raw_fd);
    let mut made = None;
    let key = lp.insert_source(at, |key, r| {
        if let Some(fd) = raw {
            r.register(
                &mut mio::unix::SourceFd(&fd),
                key.token(),
                mio::Interest::READABLE,
            )?;
        }
        let src = Rc::new(ChildSource {
            shared: shared.clone(),
            sigchld: RefCell::new(None),
        });
        made = Some(src.clone());
        Ok(src as Rc<dyn Source>)
    })?;
    let src = made.expect("built");
    if let Some(fd) = raw {
        lp.claim_fd(fd, key);
    } else {
        let weak = Rc::downgrade(shared);
        let h = lp.add_signal_handler(Signal::CHLD, move |lp, _| {
            if let Some(s) = weak.upgrade() {
                s.try_reap(lp);
            }
        });
        match h {
            Ok(h) => *src.sigchld.borrow_mut() = Some(h),
            Err(e) => {
                let garbage = lp.remove_source(key);
                drop(garbage);
                return Err(e);
            }
        }
    }
    let weak_src = Rc::downgrade(&src);
    drop(src);
    *shared.unwatch.borrow_mut() = Some(Box::new(move |lp: &Loop| {
        let Some(src) = weak_src.upgrade() else {
            return;
        };
        if let Some(fd) = raw {
            lp.with_selector(|r| {
                let _ = r.deregister(&mut mio::unix::SourceFd(&fd));
            });
            lp.release_fd(fd, key);
        }
        let handler = src.sigchld.borrow_mut().take();
        if let Some(h) = handler {
            h.remove();
        }
        let garbage = lp.remove_source(key);
        drop((garbage, src));
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
