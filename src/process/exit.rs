//! Noticing that a child exited, and reaping it: `ChildSource`, a source per
//! child that owns the `Child` until it is reaped. Through a pidfd (Linux
//! 5.3+: readable once the child exits) or, where there is none, a `SIGCHLD`
//! handler of the loop; either way the child's own pid is waited for
//! (`waitpid(pid, WNOHANG)`), never `-1`, so children that other code
//! spawned are left to it.
//!
//! When the loop closes with the child still running it is killed and
//! reaped (a `SIGKILL`ed child is gone at once), or, if detached, waited for
//! by a thread of its own: no zombie either way.

use super::ChildState;
use crate::deferred::LoopClosed;
use crate::reactor::{PostAction, Ready, Source, SourceKey};
use crate::{Error, Loop, Signal, SignalHandler};
use std::cell::RefCell;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::Location;
use std::rc::Rc;

/// Set (to anything) in the environment, exits are watched through
/// `SIGCHLD` even where the kernel has pidfds: for a sandbox that refuses
/// `pidfd_open` in a way the fallback does not notice, and for the tests of
/// the `SIGCHLD` path (tests/process_sigchld.rs). Read at each spawn.
const NO_PIDFD_ENV: &str = "DEFERLOOP_NO_PIDFD";

#[cfg(any(target_os = "linux", target_os = "android"))]
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    if std::env::var_os(NO_PIDFD_ENV).is_some() {
        return None;
    }
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1;
    // the pid is our unreaped child's, so it cannot name another process.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: a new fd that nothing else owns (O_CLOEXEC by default).
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pidfd_open(_: u32) -> Option<OwnedFd> {
    None
}

struct ChildSource {
    shared: Rc<ChildState>,
    pidfd: Option<OwnedFd>,
    sigchld: RefCell<Option<SignalHandler>>,
}

impl Source for ChildSource {
    fn dispatch(self: Rc<Self>, lp: &Loop, _: SourceKey, _: Ready) -> PostAction {
        self.shared.try_reap(lp);
        PostAction::Continue
    }

    fn close(self: Rc<Self>, _lp: &Loop) {
        let child = self.shared.child.borrow_mut().take();
        if let Some(mut c) = child {
            if self.shared.detached.get() {
                let name = format!("deferloop-reap-{}", c.id());
                let spawned = std::thread::Builder::new().name(name).spawn(move || {
                    let _ = c.wait();
                });
                if let Err(e) = spawned {
                    log::warn!("deferloop: no thread to reap a detached child: {e}");
                }
            } else {
                let _ = c.kill();
                let _ = c.wait();
            }
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
        (self.pidfd.is_some(), false)
    }
}

/// Starts watching `shared`'s child for its exit; installs `shared.unwatch`.
pub(super) fn watch(
    lp: &Loop,
    shared: &Rc<ChildState>,
    at: &'static Location<'static>,
) -> Result<(), Error> {
    let pidfd = pidfd_open(shared.pid);
    let raw = pidfd.as_ref().map(AsRawFd::as_raw_fd);
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
            pidfd,
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
