//! [`SourceHandle`], and [`Loop::add_source`] that makes one: what a user
//! holds of a source the loop owns.

use super::{Adapter, EventSource, Interest, Readiness, State};
use crate::reactor::{self, Ready};
use crate::Loop;
use mio::unix::SourceFd;
use std::cell::RefCell;
use std::fmt;
use std::os::unix::io::AsRawFd;
use std::panic::Location;
use std::rc::{Rc, Weak};

/// The handle of a source added with [`Loop::add_source`]. Dropping it
/// removes the source (deregistering its descriptor first); it holds the
/// loop and the source weakly, so keeping it anywhere — in the source itself
/// included — makes no cycle.
///
/// Called while the source's own `process` runs, `remove`, `enable`,
/// `disable` and `set_interest` are queued and applied when it returns.
#[must_use = "dropping a SourceHandle removes its source; call detach() to keep it"]
pub struct SourceHandle<S: EventSource> {
    inner: Weak<Adapter<S>>,
}

impl<S: EventSource> SourceHandle<S> {
    fn change(&self, f: impl FnOnce(&mut State<S>)) -> bool {
        let Some(a) = self.inner.upgrade() else {
            return false;
        };
        let Some(lp) = a.lp.upgrade() else {
            return false;
        };
        {
            let mut st = a.st.borrow_mut();
            if st.remove {
                return false;
            }
            f(&mut st);
        }
        a.sync(&lp, false);
        true
    }

    /// Asks for a dispatch in the next step 6 with [`Readiness::woken`] set
    /// (a source with no descriptor is dispatched only so). Idempotent
    /// within a turn.
    pub fn wake(&self) {
        if let Some(a) = self.inner.upgrade() {
            if let Some(lp) = a.lp.upgrade() {
                lp.wake_source(a.key, Ready::WOKEN);
            }
        }
    }

    /// Polls and dispatches the source again after [`disable`](Self::disable)
    /// or [`PostAction::Disable`](super::PostAction::Disable); what was woken meanwhile is delivered.
    /// Returns whether the source is still there.
    pub fn enable(&self) -> bool {
        let ok = self.change(|st| st.enabled = true);
        if ok {
            let stashed = self
                .inner
                .upgrade()
                .is_some_and(|a| !a.st.borrow().stash.is_empty());
            if stashed {
                self.wake();
            }
        }
        ok
    }

    /// Stops polling and dispatching the source until [`enable`](Self::enable).
    pub fn disable(&self) -> bool {
        self.change(|st| st.enabled = false)
    }

    /// Polls the descriptor for `interest` from now on.
    pub fn set_interest(&self, interest: Interest) -> bool {
        self.change(|st| st.interest = interest)
    }

    /// Runs `f` with the source, unless it is running now (`None`), or gone.
    pub fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        let a = self.inner.upgrade()?;
        let mut src = a.st.borrow_mut().src.take()?;
        let r = f(&mut src);
        let mut st = a.st.borrow_mut();
        if st.src.is_none() && !st.remove {
            st.src = Some(src);
        }
        Some(r)
    }

    /// Whether the source is still registered.
    pub fn is_active(&self) -> bool {
        self.inner
            .upgrade()
            .is_some_and(|a| !a.st.borrow().remove && a.lp.upgrade().is_some())
    }

    /// Removes the source and gives it back (`None` if it is gone, or if it
    /// is running now: then it is removed when `process` returns).
    pub fn remove(self) -> Option<S> {
        let a = self.inner.upgrade()?;
        let src = {
            let mut st = a.st.borrow_mut();
            st.remove = true;
            if st.running {
                None
            } else {
                st.src.take()
            }
        };
        if let Some(lp) = a.lp.upgrade() {
            a.sync(&lp, false);
        }
        src
    }

    /// Lets the handle go without removing the source: it stays until it
    /// returns [`PostAction::Remove`](super::PostAction::Remove) or the loop closes.
    pub fn detach(self) {
        let mut me = std::mem::ManuallyDrop::new(self);
        drop(std::mem::take(&mut me.inner));
    }
}

impl<S: EventSource> Drop for SourceHandle<S> {
    fn drop(&mut self) {
        let Some(a) = self.inner.upgrade() else {
            return;
        };
        a.st.borrow_mut().remove = true;
        if let Some(lp) = a.lp.upgrade() {
            a.sync(&lp, false);
        }
    }
}

impl<S: EventSource> fmt::Debug for SourceHandle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceHandle")
            .field("active", &self.is_active())
            .finish()
    }
}

impl Loop {
    /// Adds `source` to the loop: its descriptor (if any) is polled for its
    /// [`interest`](EventSource::interest), and its
    /// [`process`](EventSource::process) runs in step 6 of each turn in which
    /// it is ready or woken. `add_reader` refuses its descriptor meanwhile.
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed); [`Error::Io`](crate::Error::Io)
    /// if the selector refuses the descriptor (e.g. it is already polled).
    #[track_caller]
    pub fn add_source<S: EventSource>(&self, source: S) -> Result<SourceHandle<S>, crate::Error> {
        let at = Location::caller();
        let fd = source.fd().map(|f| f.as_raw_fd());
        let interest = source.interest();
        let name = source.name();
        let mut source = Some(source);
        let mut made = None;
        let key = self.insert_source(at, |key, reg| {
            let registered = match (fd, interest.to_mio()) {
                (Some(fd), Some(i)) => {
                    reg.register(&mut SourceFd(&fd), key.token(), i)?;
                    Some(i)
                }
                _ => None,
            };
            let a = Rc::new(Adapter {
                key,
                lp: self.downgrade(),
                at,
                fd,
                name,
                st: RefCell::new(State {
                    src: source.take(),
                    running: false,
                    waiting: false,
                    enabled: true,
                    remove: false,
                    interest,
                    registered,
                    stash: Readiness::default(),
                }),
            });
            made = Some(a.clone());
            Ok(a as Rc<dyn reactor::Source>)
        })?;
        if let Some(fd) = fd {
            self.claim_fd(fd, key);
        }
        let a = made.expect("built");
        Ok(SourceHandle {
            inner: Rc::downgrade(&a),
        })
    }
}
