//! [`SourceHandle`], and [`Loop::add_source`] that makes one: what a user
//! holds of a source the loop owns; [`WeakSource`], a reference that does
//! not own it (to wake or remove it from elsewhere, the source included);
//! `add_source_with`, how the crate's own sources are built with their key.

use super::{Adapter, EventSource, Interest, Mode, Readiness, State};
use crate::reactor::{self, Ready, SourceKey};
use crate::Loop;
use mio::unix::SourceFd;
use std::cell::RefCell;
use std::fmt;
use std::io;
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
    fn change(&self, f: impl FnOnce(&mut State)) -> bool {
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
        wake(&self.inner);
    }

    /// A reference to the source that does not own it: dropping it leaves
    /// the source in place. Kept in the source itself, it lets `process` (or
    /// a timer it set) wake the source with no cycle.
    pub fn downgrade(&self) -> WeakSource<S> {
        WeakSource {
            inner: self.inner.clone(),
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
        with(&self.inner, f)
    }

    /// Whether the source is still registered.
    pub fn is_active(&self) -> bool {
        is_active(&self.inner)
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
                a.src.try_borrow_mut().ok().and_then(|mut s| s.take())
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

fn wake<S: EventSource>(inner: &Weak<Adapter<S>>) {
    if let Some(a) = inner.upgrade() {
        if let Some(lp) = a.lp.upgrade() {
            lp.wake_source(a.key, Ready::WOKEN);
        }
    }
}

fn with<S: EventSource, R>(inner: &Weak<Adapter<S>>, f: impl FnOnce(&mut S) -> R) -> Option<R> {
    let a = inner.upgrade()?;
    let r = {
        let mut src = a.src.try_borrow_mut().ok()?;
        f(src.as_mut()?)
    };
    // Removed by `f` (through a handle): finish the removal now.
    let garbage = if a.st.borrow().remove {
        a.src.borrow_mut().take()
    } else {
        None
    };
    drop(garbage);
    // A turn that `f` ran kept what it could not deliver: deliver it.
    if !a.st.borrow().stash.is_empty() {
        wake(inner);
    }
    Some(r)
}

fn is_active<S: EventSource>(inner: &Weak<Adapter<S>>) -> bool {
    inner
        .upgrade()
        .is_some_and(|a| !a.st.borrow().remove && a.lp.upgrade().is_some())
}

/// A reference to a source that does not own it, from
/// [`SourceHandle::downgrade`]: `Clone`, and dropping it changes nothing.
/// The source stays until a [`SourceHandle`] of it is dropped or removes
/// it, [`remove`](Self::remove) is called here, it returns
/// [`PostAction::Remove`](super::PostAction::Remove), or the loop closes.
///
/// # Examples
/// A source that wakes itself later, from a timer:
/// ```
/// use deferloop::source::{EventSource, PostAction, Readiness, WeakSource};
/// use deferloop::{EventLoop, Loop};
/// use std::time::Duration;
///
/// struct Tick {
///     me: Option<WeakSource<Tick>>,
///     n: u32,
/// }
///
/// impl EventSource for Tick {
///     type Ret = PostAction;
///     fn process(&mut self, lp: &Loop, _: Readiness) -> PostAction {
///         self.n += 1;
///         if self.n == 3 {
///             lp.stop();
///             return PostAction::Remove;
///         }
///         let me = self.me.clone().expect("set after add_source");
///         match lp.call_later(Duration::ZERO, move |_| me.wake()) {
///             Ok(_) => PostAction::Continue,
///             Err(_) => PostAction::Remove, // the loop is closed
///         }
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let h = ev.add_source(Tick { me: None, n: 0 })?;
/// let me = h.downgrade();
/// h.with(|t| t.me = Some(me.clone()));
/// h.detach();
/// me.wake();
/// ev.run()?;
/// assert!(!me.is_active(), "it removed itself");
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct WeakSource<S: EventSource> {
    inner: Weak<Adapter<S>>,
}

impl<S: EventSource> WeakSource<S> {
    /// As [`SourceHandle::wake`]; nothing if the source is gone.
    pub fn wake(&self) {
        wake(&self.inner);
    }

    /// As [`SourceHandle::with`].
    pub fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        with(&self.inner, f)
    }

    /// Whether the source is still registered.
    pub fn is_active(&self) -> bool {
        is_active(&self.inner)
    }

    /// Removes the source (deregistering its descriptor, then dropping it;
    /// while its own `process` runs, when that returns). Returns whether it
    /// was still there.
    pub fn remove(&self) -> bool {
        let Some(a) = self.inner.upgrade() else {
            return false;
        };
        if a.st.borrow().remove {
            return false;
        }
        a.st.borrow_mut().remove = true;
        if let Some(lp) = a.lp.upgrade() {
            a.sync(&lp, false);
        }
        true
    }
}

impl<S: EventSource> Clone for WeakSource<S> {
    fn clone(&self) -> Self {
        WeakSource {
            inner: self.inner.clone(),
        }
    }
}

impl<S: EventSource> fmt::Debug for WeakSource<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakSource")
            .field("active", &self.is_active())
            .finish()
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
        self.add_source_at(Location::caller(), source)
    }

    /// [`add_source`](Self::add_source), reported as registered at `at`.
    pub(crate) fn add_source_at<S: EventSource>(
        &self,
        at: &'static Location<'static>,
        source: S,
    ) -> Result<SourceHandle<S>, crate::Error> {
        let mut source = Some(source);
        self.add_source_with(at, |_, _| Ok(source.take().expect("built once")))
    }

    /// How the crate's own sources are added: `make` gets the source's key
    /// (to wake it by) and the selector (where a simulated socket, which has
    /// no descriptor, leaves its token), and builds the source; the adapter
    /// then registers the descriptor [`EventSource::fd`] gives, and
    /// deregisters it before the source is dropped — so a source that owns
    /// its descriptor closes it only once it is out of the selector.
    pub(crate) fn add_source_with<S: EventSource>(
        &self,
        at: &'static Location<'static>,
        make: impl FnOnce(SourceKey, &mio::Registry) -> io::Result<S>,
    ) -> Result<SourceHandle<S>, crate::Error> {
        let mut made = None;
        let key = self.insert_source(at, |key, reg| {
            let source = make(key, reg)?;
            let fd = source.fd().map(|f| f.as_raw_fd());
            let interest = source.interest();
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
                name: source.name(),
                rearm: source.mode() == Mode::Level,
                src: RefCell::new(Some(source)),
                st: RefCell::new(State {
                    running: false,
                    dirty: false,
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
        let a = made.expect("built");
        if let Some(fd) = a.fd {
            self.claim_fd(fd, key);
        }
        Ok(SourceHandle {
            inner: Rc::downgrade(&a),
        })
    }
}
