//! Your own event sources: an eventfd, a timerfd, inotify, a GUI toolkit's
//! descriptor, or a source with no descriptor at all, dispatched by the loop
//! in the same steps as its own sockets (4: readiness noted, 6: dispatched).
//! Owns [`EventSource`], [`Interest`], [`Readiness`], [`PostAction`] and the
//! adapter that puts a source on the crate's internal source trait (stream
//! connections keep their own, shorter path); `handle.rs` owns
//! [`SourceHandle`], [`Loop::add_source`] and the crate's `add_source_with`.
//!
//! calloop's `EventSource` is the model; where its users hit walls, this one
//! differs:
//! - **No `&mut Data` lent to every callback, and no double borrow.** Your
//!   source is `&mut self` in [`EventSource::process`] and gets the `&Loop`;
//!   the loop holds no borrow of its own while it runs, so `process` may add
//!   sources, remove others or itself, wake, enable or disable
//!   ([calloop#109](https://github.com/Smithay/calloop/issues/109) panics).
//!   Changes to the running source itself are queued and applied when
//!   `process` returns.
//! - **No Rc cycle through a loop handle.** `process` is given the loop, so a
//!   source need keep none; the [`SourceHandle`] holds the loop weakly
//!   ([calloop#212](https://github.com/Smithay/calloop/issues/212)).
//! - **Dropping the handle removes the source, and says so**: the handle is
//!   `#[must_use]`; [`SourceHandle::detach`] keeps the source until it returns
//!   [`PostAction::Remove`] or the loop closes
//!   ([calloop#7](https://github.com/Smithay/calloop/issues/7)). mio's sources
//!   leak if dropped registered; here removal deregisters first.
//! - **`process` may return a [`Deferred`]**: the source is not dispatched
//!   (nor its descriptor polled) until it fires — back-pressure without a
//!   flag of your own. Or a `Result`: an error is reported and the source removed.
//!
//! Readiness is level-triggered by default, as `add_reader`'s is: after a
//! dispatch that delivered readiness, the descriptor is re-armed (one
//! `epoll_ctl`), so data left unread is reported at the next poll. A source
//! that drains its descriptor each time asks for [`Mode::Edge`]: registered
//! once, never re-armed, so [`PostAction::Continue`] costs no system call.
//! The crate's own signals, child processes, listeners and UDP sockets are
//! such sources, on this same trait. Tests: tests/source_public.rs,
//! tests/net_fd_reuse.rs.

mod handle;

pub use handle::{SourceHandle, WeakSource};

use crate::reactor::{self, Ready, SourceKey, WeakLoop};
use crate::{Deferred, ExceptionContext, Failure, Loop};
use mio::unix::SourceFd;
use std::cell::RefCell;

use std::os::unix::io::{BorrowedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;

/// What a source's descriptor is polled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Poll for readable.
    pub readable: bool,
    /// Poll for writable.
    pub writable: bool,
}

impl Interest {
    /// Readable only.
    pub const READABLE: Interest = Interest {
        readable: true,
        writable: false,
    };
    /// Writable only.
    pub const WRITABLE: Interest = Interest {
        readable: false,
        writable: true,
    };
    /// Both.
    pub const BOTH: Interest = Interest {
        readable: true,
        writable: true,
    };

    fn to_mio(self) -> Option<mio::Interest> {
        match (self.readable, self.writable) {
            (true, true) => Some(mio::Interest::READABLE | mio::Interest::WRITABLE),
            (true, false) => Some(mio::Interest::READABLE),
            (false, true) => Some(mio::Interest::WRITABLE),
            (false, false) => None,
        }
    }
}

/// How readiness of a source's descriptor is reported.
///
/// # Examples
/// A source that reads until `WouldBlock` each time needs no re-arm:
/// ```
/// use deferloop::source::{EventSource, Mode, PostAction, Readiness};
/// use deferloop::Loop;
/// use std::io::Read;
/// use std::os::unix::io::{AsFd, BorrowedFd};
/// use std::os::unix::net::UnixStream;
///
/// struct Drain(UnixStream);
///
/// impl EventSource for Drain {
///     type Ret = PostAction;
///     fn fd(&self) -> Option<BorrowedFd<'_>> {
///         Some(self.0.as_fd())
///     }
///     fn mode(&self) -> Mode {
///         Mode::Edge
///     }
///     fn process(&mut self, _: &Loop, _: Readiness) -> PostAction {
///         let mut buf = [0u8; 4096];
///         while let Ok(n) = (&self.0).read(&mut buf) {
///             if n == 0 {
///                 return PostAction::Remove;
///             }
///         }
///         PostAction::Continue // drained (WouldBlock): no system call
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Re-armed after each dispatch that delivered readiness (one
    /// `epoll_ctl`): what is left unread is reported again at the next poll.
    #[default]
    Level,
    /// Registered once and never re-armed (epoll's `EPOLLET`): readiness is
    /// reported when it changes, so `process` must read (or write) until
    /// `WouldBlock`, or return [`PostAction::Again`] or wake itself with work
    /// left. [`PostAction::Continue`] costs no system call.
    Edge,
}

/// What happened since the source's last dispatch (everything that arrived,
/// merged into one dispatch per turn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// The descriptor is readable (or in error, or hung up: a read will tell).
    pub readable: bool,
    /// The descriptor is writable (or in error: a write will tell).
    pub writable: bool,
    /// The peer closed its writing side or hung up.
    pub read_closed: bool,
    /// [`SourceHandle::wake`] or [`WeakSource::wake`] was called,
    /// [`PostAction::Again`] returned, or
    /// the source resumed (enabled, or its Deferred fired) with news kept.
    pub woken: bool,
}

impl Readiness {
    fn from_ready(r: Ready) -> Readiness {
        Readiness {
            readable: r.contains(Ready::READABLE),
            writable: r.contains(Ready::WRITABLE),
            read_closed: r.contains(Ready::READ_CLOSED),
            woken: r.contains(Ready::WOKEN),
        }
    }

    fn merge(self, o: Readiness) -> Readiness {
        Readiness {
            readable: self.readable | o.readable,
            writable: self.writable | o.writable,
            read_closed: self.read_closed | o.read_closed,
            woken: self.woken | o.woken,
        }
    }

    fn is_empty(self) -> bool {
        self == Readiness::default()
    }
}

/// What the loop does with a source after [`EventSource::process`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostAction {
    /// Keep it as it is: dispatched when its descriptor is ready (again, if
    /// data was left unread) or it is woken.
    Continue,
    /// Dispatch it again in the next turn even with nothing new, behind the
    /// other ready work (a budget ran out with work left).
    Again,
    /// Poll its descriptor for this from now on (calloop's `Reregister`).
    Rearm(Interest),
    /// Stop polling and dispatching it until [`SourceHandle::enable`].
    Disable,
    /// Deregister it and drop it.
    Remove,
}

/// What [`EventSource::process`] may return: a [`PostAction`], a
/// `Result<PostAction, E>` (an error is given to the exception handler and
/// the source is removed), or a `Deferred<PostAction>` (the source waits —
/// neither polled nor dispatched — until it fires; a failure is reported and
/// the source removed). Sealed.
pub trait IntoPostAction: sealed::Sealed {}

mod sealed {
    use super::PostAction;
    use crate::{Deferred, Failure};

    #[derive(Debug)]
    pub enum Outcome {
        Now(PostAction),
        Failed(Failure),
        Later(Deferred<PostAction>),
    }

    pub trait Sealed {
        fn into_outcome(self) -> Outcome;
        /// "Carry on" (`Some(false)`) or "again" (`Some(true)`), read
        /// without a move: the common case, that needs no more work.
        fn plain(&self) -> Option<bool>;
    }

    impl Sealed for PostAction {
        fn into_outcome(self) -> Outcome {
            Outcome::Now(self)
        }
        #[inline(always)]
        fn plain(&self) -> Option<bool> {
            match self {
                PostAction::Continue => Some(false),
                PostAction::Again => Some(true),
                _ => None,
            }
        }
    }

    impl<E: Into<Failure>> Sealed for Result<PostAction, E> {
        #[inline(always)]
        fn plain(&self) -> Option<bool> {
            self.as_ref().ok().and_then(PostAction::plain)
        }
        fn into_outcome(self) -> Outcome {
            match self {
                Ok(a) => Outcome::Now(a),
                Err(e) => Outcome::Failed(e.into()),
            }
        }
    }

    impl Sealed for Deferred<PostAction> {
        fn plain(&self) -> Option<bool> {
            None
        }
        fn into_outcome(self) -> Outcome {
            Outcome::Later(self)
        }
    }
}
use sealed::{Outcome, Sealed};

impl IntoPostAction for PostAction {}
impl<E: Into<Failure>> IntoPostAction for Result<PostAction, E> {}
impl IntoPostAction for Deferred<PostAction> {}

/// A source of events of your own, added with [`Loop::add_source`].
///
/// The borrow rule: the loop owns the source and lends it `&mut self` only
/// in these methods; nothing of the loop is borrowed meanwhile, so
/// `process` may call any method of `lp` (add sources, remove itself through
/// its handle, schedule calls). State shared with other code goes in the
/// source's own fields, or in the chain of a Deferred it returns.
///
/// # Examples
/// A source with no descriptor, woken by hand:
/// ```
/// use deferloop::source::{EventSource, PostAction, Readiness};
/// use deferloop::{EventLoop, Loop};
///
/// struct Count(u32);
///
/// impl EventSource for Count {
///     type Ret = PostAction;
///     fn process(&mut self, lp: &Loop, r: Readiness) -> PostAction {
///         assert!(r.woken);
///         self.0 += 1;
///         lp.stop();
///         PostAction::Continue
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let h = ev.add_source(Count(0))?;
/// h.wake();
/// ev.run()?;
/// assert_eq!(h.with(|c| c.0), Some(1));
/// # Ok::<(), deferloop::Error>(())
/// ```
pub trait EventSource: 'static {
    /// What [`process`](Self::process) returns: [`PostAction`],
    /// `Result<PostAction, E>` or `Deferred<PostAction>`.
    type Ret: IntoPostAction;

    /// The descriptor to poll, if any: asked once, when the source is added;
    /// it must stay open while the source is registered.
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// What to poll the descriptor for at first (default: readable).
    fn interest(&self) -> Interest {
        Interest::READABLE
    }

    /// How readiness is reported: asked once, when the source is added
    /// (default: [`Mode::Level`]).
    fn mode(&self) -> Mode {
        Mode::Level
    }

    /// Step 6, once per turn in which the source was ready or woken.
    /// A panic is given to the exception handler; the source stays.
    fn process(&mut self, lp: &Loop, readiness: Readiness) -> Self::Ret;

    /// The loop is closing with the source still in it: finish what you owe.
    /// The loop refuses new work by now.
    fn loop_closed(&mut self, lp: &Loop) {
        let _ = lp;
    }

    /// A short name for diagnostics ([`Monitor`](crate::Monitor)'s I/O list).
    fn name(&self) -> &'static str {
        "event source"
    }
}

/// The adapter: a user's source on the crate's internal trait.
struct Adapter<S> {
    key: SourceKey,
    lp: WeakLoop,
    at: &'static Location<'static>,
    fd: Option<RawFd>,
    name: &'static str,
    /// Re-arm after a dispatch that delivered readiness ([`Mode::Level`]).
    rearm: bool,
    /// The source: borrowed while `process` (or a handle's `with`) runs,
    /// in place, with no move; `None` once removed.
    src: RefCell<Option<S>>,
    st: RefCell<State>,
}

struct State {
    running: bool,
    /// A change asked for while `process` ran: `sync` when it returns.
    dirty: bool,
    /// Waiting on a Deferred `process` returned.
    waiting: bool,
    enabled: bool,
    remove: bool,
    interest: Interest,
    /// What the selector has now.
    registered: Option<mio::Interest>,
    /// Readiness that arrived while disabled or waiting.
    stash: Readiness,
}

impl<S: EventSource> Adapter<S> {
    /// Brings the registration in line with the state, or removes the
    /// source; `rearm` re-registers even if nothing changed (level trigger).
    fn sync(self: &Rc<Self>, lp: &Loop, rearm: bool) {
        let mut st = self.st.borrow_mut();
        if st.running {
            st.dirty = true; // applied when `process` returns
            return;
        }
        if st.remove {
            // Borrowed only by a handle's `with` running now: dropped when it ends.
            let garbage = self.src.try_borrow_mut().ok().and_then(|mut s| s.take());
            let had = st.registered.take();
            drop(st);
            if let (Some(fd), Some(_)) = (self.fd, had) {
                lp.with_selector(|s| {
                    let _ = s.deregister(&mut SourceFd(&fd));
                });
            }
            let entry = lp.remove_source(self.key);
            drop(entry);
            drop(garbage);
            return;
        }
        let Some(fd) = self.fd else {
            return;
        };
        let want = if st.enabled && !st.waiting {
            st.interest.to_mio()
        } else {
            None
        };
        let token = self.key.token();
        let r = lp.with_selector(|s| match (st.registered, want) {
            (None, Some(i)) => s.register(&mut SourceFd(&fd), token, i),
            (Some(h), Some(i)) if h != i || rearm => s.reregister(&mut SourceFd(&fd), token, i),
            (Some(_), None) => s.deregister(&mut SourceFd(&fd)),
            _ => Ok(()),
        });
        match r {
            Ok(()) => st.registered = want,
            Err(e) => log::error!("deferloop: re-arming event source fd {fd} failed: {e}"),
        }
    }

    fn report(&self, lp: &Loop, message: &str, failure: &Failure) {
        lp.call_exception_handler(&ExceptionContext {
            message,
            failure: Some(failure),
            location: Some(self.at),
        });
    }

    /// Applies what `process` (or its Deferred) asked for.
    fn apply(&self, action: PostAction) -> bool {
        let mut st = self.st.borrow_mut();
        match action {
            PostAction::Continue | PostAction::Again => {}
            PostAction::Rearm(i) => st.interest = i,
            PostAction::Disable => st.enabled = false,
            PostAction::Remove => st.remove = true,
        }
        action == PostAction::Again
    }

    fn wait_for(self: &Rc<Self>, d: Deferred<PostAction>) {
        self.st.borrow_mut().waiting = true;
        let me = Rc::downgrade(self);
        d.add_both(move |r| {
            let Some(me) = me.upgrade() else {
                return Ok(());
            };
            let Some(lp) = me.lp.upgrade() else {
                return Ok(());
            };
            me.st.borrow_mut().waiting = false;
            let again = match r {
                Ok(a) => me.apply(a),
                Err(f) => {
                    me.report(&lp, "Error in event source", &f);
                    me.st.borrow_mut().remove = true;
                    false
                }
            };
            me.sync(&lp, false);
            let stashed = !me.st.borrow().stash.is_empty();
            if again || stashed {
                lp.wake_source(me.key, Ready::WOKEN);
            }
            Ok::<(), Failure>(())
        })
        .detach();
    }
}

impl<S: EventSource> Adapter<S> {
    /// A dispatch the fast path does not take: the source is removed,
    /// waiting, disabled or lent out, or news was kept for it.
    #[cold]
    #[inline(never)]
    fn dispatch_slow(self: &Rc<Self>, lp: &Loop, readiness: Readiness) -> reactor::PostAction {
        let readiness = {
            let mut st = self.st.borrow_mut();
            let readiness = std::mem::take(&mut st.stash).merge(readiness);
            // `running` here would need a turn inside `process`, which the
            // loop refuses (`Error::Running`): checked so as never to lend twice.
            if st.remove || st.waiting || !st.enabled || st.running {
                st.stash = readiness;
                return reactor::PostAction::Continue;
            }
            st.running = true;
            readiness
        };
        self.run(lp, readiness)
    }

    /// Lends the source to `process` and applies what it returns.
    #[inline(always)]
    fn run(self: &Rc<Self>, lp: &Loop, readiness: Readiness) -> reactor::PostAction {
        let out = {
            // Busy only if a handle's `with` runs a turn: the news is kept
            // for when `with` returns.
            let Ok(mut src) = self.src.try_borrow_mut() else {
                return self.busy(readiness);
            };
            let Some(src) = src.as_mut() else {
                self.st.borrow_mut().running = false;
                return reactor::PostAction::Continue;
            };
            catch_unwind(AssertUnwindSafe(|| src.process(lp, readiness)))
        };
        let dirty = {
            let mut st = self.st.borrow_mut();
            st.running = false;
            std::mem::take(&mut st.dirty)
        };
        let polled = self.rearm && (readiness.readable || readiness.writable);
        // The common case returns here, with no system call and no move of
        // the outcome: nothing to re-arm (edge mode, or no readiness),
        // nothing changed, `Continue` or `Again`.
        if !dirty && !polled {
            if let Ok(ret) = &out {
                match ret.plain() {
                    Some(false) => return reactor::PostAction::Continue,
                    Some(true) => return reactor::PostAction::Again,
                    None => {}
                }
            }
        }
        self.finish(lp, out.map(Sealed::into_outcome), polled)
    }

    #[cold]
    #[inline(never)]
    fn busy(&self, readiness: Readiness) -> reactor::PostAction {
        let mut st = self.st.borrow_mut();
        st.running = false;
        st.stash = readiness;
        reactor::PostAction::Continue
    }

    /// What `process` returned, when it is more than "carry on".
    #[inline(never)]
    fn finish(
        self: &Rc<Self>,
        lp: &Loop,
        out: Result<Outcome, Box<dyn std::any::Any + Send>>,
        polled: bool,
    ) -> reactor::PostAction {
        let mut again = false;
        match out {
            Err(payload) => {
                let f = Failure::from_panic(payload, self.at);
                self.report(lp, "Exception in event source", &f);
            }
            Ok(Outcome::Now(a)) => again = self.apply(a),
            Ok(Outcome::Failed(f)) => {
                self.report(lp, "Error in event source", &f);
                self.st.borrow_mut().remove = true;
            }
            Ok(Outcome::Later(d)) => {
                self.sync(lp, false);
                self.wait_for(d);
                return reactor::PostAction::Continue;
            }
        }
        self.sync(lp, polled);
        if again {
            reactor::PostAction::Again
        } else {
            reactor::PostAction::Continue
        }
    }
}

impl<S: EventSource> reactor::Source for Adapter<S> {
    fn dispatch(self: Rc<Self>, lp: &Loop, _: SourceKey, ready: Ready) -> reactor::PostAction {
        let readiness = Readiness::from_ready(ready);
        {
            let mut st = self.st.borrow_mut();
            let plain = st.enabled & !(st.remove | st.waiting | st.running);
            if !plain || !st.stash.is_empty() {
                drop(st);
                return self.dispatch_slow(lp, readiness);
            }
            st.running = true;
        }
        self.run(lp, readiness)
    }

    fn close(self: Rc<Self>, lp: &Loop) {
        let src = self.src.try_borrow_mut().ok().and_then(|mut s| s.take());
        if let Some(mut src) = src {
            let _ = catch_unwind(AssertUnwindSafe(|| src.loop_closed(lp)));
        }
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn interest(&self) -> (bool, bool) {
        let st = self.st.borrow();
        (st.interest.readable, st.interest.writable)
    }
}
