//! Raw readers and writers (`add_reader`/`add_writer`): a callback per file
//! descriptor and direction, level-triggered as asyncio's are. Owns `RawSource`.
//!
//! mio is edge-triggered: it reports a descriptor once when it *becomes*
//! readable. After each call the source re-arms its descriptor (`reregister`,
//! one `epoll_ctl`), so the kernel reports it again at the next poll if data is
//! still unread. Transports do not pay that system call: they read until
//! `WouldBlock` themselves.
//!
//! A callback may add, replace or remove the reader or writer of its own
//! descriptor while it runs: each direction has a `present` flag that stays
//! set while its callback is taken out to run, so the registry's interest, the
//! return value of `remove_*` and the put-back after the call all see the
//! running callback. Tests: tests/loop_io.rs.

use super::key::SourceKey;
use super::source::{Owner, PostAction, Ready, Source};
use super::Loop;
use crate::reactor::ExceptionContext;
use crate::{Error, Failure};
use mio::unix::SourceFd;
use std::cell::RefCell;
use std::os::unix::io::RawFd;
use std::panic::{self, AssertUnwindSafe, Location};
use std::rc::Rc;

type RawCallback = Box<dyn FnMut(&Loop)>;

#[derive(Default)]
struct Side {
    /// `None` while the callback runs (or when there is none).
    cb: Option<RawCallback>,
    /// Whether a callback is installed, running or not.
    present: bool,
    /// Bumped whenever the callback is replaced or removed, so a callback
    /// taken out to run is not put back over its replacement.
    version: u64,
}

#[derive(Default)]
struct Sides {
    reader: Side,
    writer: Side,
    /// The interest registered with the selector.
    registered: Option<mio::Interest>,
}

impl Sides {
    fn side(&mut self, read: bool) -> &mut Side {
        if read {
            &mut self.reader
        } else {
            &mut self.writer
        }
    }

    fn wanted(&self) -> Option<mio::Interest> {
        match (self.reader.present, self.writer.present) {
            (true, true) => Some(mio::Interest::READABLE | mio::Interest::WRITABLE),
            (true, false) => Some(mio::Interest::READABLE),
            (false, true) => Some(mio::Interest::WRITABLE),
            (false, false) => None,
        }
    }
}

/// The source behind the raw reader and writer of one descriptor.
pub(crate) struct RawSource {
    fd: RawFd,
    key: SourceKey,
    sides: RefCell<Sides>,
}

impl Source for RawSource {
    fn dispatch(self: Rc<Self>, lp: &Loop, key: SourceKey, ready: Ready) -> PostAction {
        let mut called = false;
        if ready.contains(Ready::READABLE) {
            called |= self.run_side(lp, key, true);
        }
        if ready.contains(Ready::WRITABLE) {
            called |= self.run_side(lp, key, false);
        }
        // Level-triggered: re-arm, so the kernel reports the descriptor again
        // at the next poll if it is still ready.
        let registered = self.sides.borrow().registered;
        if let (true, Some(interest)) = (called, registered) {
            let r =
                lp.with_selector(|s| s.reregister(&mut SourceFd(&self.fd), key.token(), interest));
            if let Err(e) = r {
                log::error!("deferloop: re-arming fd {} failed: {e}", self.fd);
            }
        }
        PostAction::Continue
    }

    fn name(&self) -> &'static str {
        "reader/writer"
    }

    fn interest(&self) -> (bool, bool) {
        let s = self.sides.borrow();
        (s.reader.present, s.writer.present)
    }
}

impl RawSource {
    /// Runs one side's callback if it is installed; returns whether it ran.
    fn run_side(&self, lp: &Loop, key: SourceKey, read: bool) -> bool {
        let taken = {
            let mut sides = self.sides.borrow_mut();
            let side = sides.side(read);
            if side.present {
                side.cb.take().map(|cb| (cb, side.version))
            } else {
                None
            }
        };
        let Some((mut cb, version)) = taken else {
            return false;
        };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| cb(lp))) {
            let at = lp.source_location(key);
            let failure = Failure::from_panic(payload, at);
            lp.call_exception_handler(&ExceptionContext {
                message: if read {
                    "Exception in reader callback"
                } else {
                    "Exception in writer callback"
                },
                failure: Some(&failure),
                location: Some(at),
            });
        }
        // Put it back unless it was replaced or removed meanwhile; else drop
        // it outside the borrow (dropping a closure may run user code).
        let garbage = {
            let mut sides = self.sides.borrow_mut();
            let side = sides.side(read);
            if side.version == version && side.present && side.cb.is_none() {
                side.cb = Some(cb);
                None
            } else {
                Some(cb)
            }
        };
        drop(garbage);
        true
    }

    /// Installs (`cb` is `Some`) or removes one side; returns whether that
    /// side had a callback, the running one included.
    fn set(&self, lp: &Loop, cb: Option<RawCallback>, read: bool) -> Result<bool, Error> {
        let adding = cb.is_some();
        let mut sides = self.sides.borrow_mut();
        let side = sides.side(read);
        let (had, old_version) = (side.present, side.version);
        side.version += 1;
        side.present = adding;
        let old = std::mem::replace(&mut side.cb, cb);
        let (have, want) = (sides.registered, sides.wanted());
        let fd = self.fd;
        let token = self.key.token();
        let result = lp.with_selector(|s| match (have, want) {
            (None, Some(i)) => s.register(&mut SourceFd(&fd), token, i),
            (Some(h), Some(i)) if h != i => s.reregister(&mut SourceFd(&fd), token, i),
            (Some(_), None) => s.deregister(&mut SourceFd(&fd)),
            _ => Ok(()),
        });
        match result {
            Ok(()) => {
                sides.registered = want;
                drop(sides);
                if want.is_none() {
                    let garbage = lp.remove_source(self.key);
                    drop(garbage);
                }
                drop(old);
                Ok(had)
            }
            Err(e) => {
                // Undo: the side is as it was, and the new callback goes.
                let side = sides.side(read);
                side.present = had;
                side.version = old_version;
                let new = std::mem::replace(&mut side.cb, old);
                let empty = sides.registered.is_none();
                drop(sides);
                if empty {
                    let garbage = lp.remove_source(self.key);
                    drop(garbage);
                }
                drop(new);
                Err(Error::Io(e))
            }
        }
    }
}

impl Loop {
    /// Calls `f` whenever `fd` is readable: on every turn while unread data
    /// remains (level-triggered, as asyncio's readers are), until
    /// [`remove_reader`](Self::remove_reader). One reader per fd: a new one
    /// replaces the old. Keep `fd` open while it is registered.
    ///
    /// A reader may add or remove the reader or writer of its own `fd` while
    /// it runs; the other direction is left as it is.
    ///
    /// Each call costs one extra `epoll_ctl` to re-arm the fd; transports
    /// do not pay it.
    ///
    /// # Errors
    /// [`Error::Closed`]; [`Error::Owned`] if a transport or listener owns
    /// `fd`; [`Error::Io`] if the selector refuses it (e.g. a regular file).
    #[track_caller]
    pub fn add_reader(&self, fd: RawFd, f: impl FnMut(&Loop) + 'static) -> Result<(), Error> {
        self.set_raw(fd, Some(Box::new(f)), true, Location::caller())
            .map(drop)
    }

    /// Calls `f` on every turn while `fd` is writable; see [`add_reader`](Self::add_reader).
    ///
    /// # Errors
    /// As for `add_reader`.
    #[track_caller]
    pub fn add_writer(&self, fd: RawFd, f: impl FnMut(&Loop) + 'static) -> Result<(), Error> {
        self.set_raw(fd, Some(Box::new(f)), false, Location::caller())
            .map(drop)
    }

    /// Removes the reader of `fd`; returns whether there was one (the reader
    /// that is running now counts). `false` on a closed loop and for a
    /// transport's fd.
    pub fn remove_reader(&self, fd: RawFd) -> bool {
        self.set_raw(fd, None, true, Location::caller())
            .unwrap_or(false)
    }

    /// Removes the writer of `fd`; returns whether there was one.
    pub fn remove_writer(&self, fd: RawFd) -> bool {
        self.set_raw(fd, None, false, Location::caller())
            .unwrap_or(false)
    }

    fn set_raw(
        &self,
        fd: RawFd,
        cb: Option<RawCallback>,
        read: bool,
        at: &'static Location<'static>,
    ) -> Result<bool, Error> {
        self.inner.check_open()?;
        let found = self.inner.io.borrow().by_fd(fd);
        let src = match found {
            Some((_, Owner::Source)) => return Err(Error::Owned),
            Some((key, Owner::User)) => self
                .source_as::<RawSource>(key)
                .expect("a user-owned fd has a raw source"),
            None if cb.is_none() => return Ok(false),
            None => {
                let mut made = None;
                let key = self.insert_source(at, |key, _| {
                    let src = Rc::new(RawSource {
                        fd,
                        key,
                        sides: RefCell::default(),
                    });
                    made = Some(src.clone());
                    Ok(src as Rc<dyn Source>)
                })?;
                self.inner.io.borrow_mut().set_owner(fd, key, Owner::User);
                made.expect("built")
            }
        };
        src.set(self, cb, read)
    }
}
