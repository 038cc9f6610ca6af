//! The I/O registry: which sources the selector watches and whose callbacks run
//! when they are ready. Owns `Registry`, `IoKey`, and raw readers/writers.
//!
//! mio is edge-triggered: it reports a socket once when it *becomes* readable.
//! asyncio's readers are level-triggered: called on every turn while data is
//! unread. For raw readers and writers (`add_reader`/`add_writer`) the registry
//! re-arms the source (`reregister`, one `epoll_ctl`) after each callback, so the
//! kernel reports it again at the next poll if it is still ready. Transports do
//! not pay that syscall: they read until `WouldBlock` themselves (net/).
//!
//! Keys carry a generation, so an event or queued dispatch for a source that was
//! removed (and its slot reused) during the same turn is ignored.
//! Tests: tests/loop_io.rs, tests/net_*.rs.

use super::monitor::IoInfo;
use super::ready::{Job, Task};
use super::{Inner, Loop};
use crate::context::Context;
use crate::Error;
use slab::Slab;
use std::cell::{Ref, RefMut};
use std::collections::HashMap;
use std::panic::Location;
use std::rc::Weak;

#[cfg(unix)]
use std::os::unix::io::RawFd;

/// A registered source: its slab index and generation. Also its mio `Token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct IoKey {
    index: u32,
    gen: u32,
}

impl IoKey {
    pub(crate) fn token(self) -> mio::Token {
        mio::Token((self.gen as usize) << 32 | self.index as usize)
    }

    pub(crate) fn from_token(t: mio::Token) -> IoKey {
        IoKey {
            index: (t.0 & 0xffff_ffff) as u32,
            gen: (t.0 >> 32) as u32,
        }
    }
}

/// A raw reader or writer callback; kept in an `Option` so it can be taken out
/// while it runs.
pub(crate) type RawCallback = Box<dyn FnMut(&super::Loop)>;

pub(crate) struct RawSource {
    #[cfg(unix)]
    pub(crate) fd: RawFd,
    pub(crate) reader: Option<RawCallback>,
    pub(crate) writer: Option<RawCallback>,
    /// Bumped whenever the reader/writer is replaced or removed, so a callback
    /// taken out to run is not put back over its replacement.
    pub(crate) reader_version: u64,
    pub(crate) writer_version: u64,
}

pub(crate) enum Kind {
    Raw(RawSource),
    /// A TCP or Unix stream connection (net/stream.rs).
    Stream(crate::net::stream::StreamState),
    /// A listening socket (net/listener.rs).
    Listen(crate::net::listener::ListenState),
    /// A UDP socket (net/udp.rs).
    Datagram(crate::net::udp::DgramState),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Raw(_) => "reader/writer",
            Kind::Stream(s) => s.kind_name(),
            Kind::Listen(l) => l.kind_name(),
            Kind::Datagram(_) => "udp",
        }
    }
}

pub(crate) struct Source {
    gen: u32,
    pub(crate) kind: Kind,
    pub(crate) interest: Option<mio::Interest>,
    /// Readiness seen since the last dispatch.
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The peer closed its writing side (or hung up), as the selector said
    /// once; sticky (an edge-triggered selector does not say it twice).
    pub(crate) read_closed: bool,
    /// Whether a dispatch task is already in the ready queue.
    pub(crate) queued: bool,
    pub(crate) registered_at: &'static Location<'static>,
}

/// Who owns a file descriptor in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// `add_reader`/`add_writer`.
    User,
    /// A transport or listener: `add_reader` must not take it over.
    Transport,
}

#[derive(Default)]
pub(crate) struct Registry {
    sources: Slab<Source>,
    next_gen: u32,
    #[cfg(unix)]
    by_fd: HashMap<RawFd, (IoKey, Owner)>,
}

impl Registry {
    pub(crate) fn insert(
        &mut self,
        kind: Kind,
        registered_at: &'static Location<'static>,
    ) -> IoKey {
        let key = self.vacant_key();
        self.insert_at(key, kind, registered_at);
        key
    }

    /// The key the next [`insert_at`](Self::insert_at) must use: known before
    /// the source exists, so a socket can be registered with the selector under
    /// its token first. Nothing may be inserted in between.
    pub(crate) fn vacant_key(&mut self) -> IoKey {
        self.next_gen = self.next_gen.wrapping_add(1);
        IoKey {
            index: u32::try_from(self.sources.vacant_key()).expect("more than 2^32 I/O sources"),
            gen: self.next_gen,
        }
    }

    pub(crate) fn insert_at(
        &mut self,
        key: IoKey,
        kind: Kind,
        registered_at: &'static Location<'static>,
    ) {
        let index = self.sources.insert(Source {
            gen: key.gen,
            kind,
            interest: None,
            readable: false,
            writable: false,
            read_closed: false,
            queued: false,
            registered_at,
        });
        assert_eq!(
            index, key.index as usize,
            "insert_at with a stale vacant key"
        );
    }

    pub(crate) fn get(&self, key: IoKey) -> Option<&Source> {
        self.sources
            .get(key.index as usize)
            .filter(|s| s.gen == key.gen)
    }

    pub(crate) fn get_mut(&mut self, key: IoKey) -> Option<&mut Source> {
        self.sources
            .get_mut(key.index as usize)
            .filter(|s| s.gen == key.gen)
    }

    pub(crate) fn remove(&mut self, key: IoKey) -> Option<Source> {
        self.get(key)?;
        Some(self.sources.remove(key.index as usize))
    }

    pub(crate) fn len(&self) -> usize {
        self.sources.len()
    }

    /// Records readiness from a poll event; returns whether a dispatch task
    /// must be queued for it.
    pub(crate) fn note_event(
        &mut self,
        key: IoKey,
        readable: bool,
        writable: bool,
        read_closed: bool,
    ) -> bool {
        let Some(s) = self.get_mut(key) else {
            return false;
        };
        s.readable |= readable;
        s.writable |= writable;
        s.read_closed |= read_closed;
        if s.queued || !(s.readable || s.writable) {
            return false;
        }
        s.queued = true;
        true
    }

    /// Removes every source (for `close()`), returning them to be dropped.
    pub(crate) fn drain(&mut self) -> Vec<(IoKey, Source)> {
        #[cfg(unix)]
        self.by_fd.clear();
        std::mem::take(&mut self.sources)
            .into_iter()
            .map(|(index, s)| {
                let key = IoKey {
                    index: index as u32,
                    gen: s.gen,
                };
                (key, s)
            })
            .collect()
    }

    pub(crate) fn infos(&self, at_most: usize) -> Vec<IoInfo> {
        self.sources
            .iter()
            .take(at_most)
            .map(|(_, s)| IoInfo {
                kind: s.kind.name(),
                interest: s
                    .interest
                    .map_or((false, false), |i| (i.is_readable(), i.is_writable())),
                registered_at: s.registered_at,
            })
            .collect()
    }

    #[cfg(unix)]
    pub(crate) fn by_fd(&self, fd: RawFd) -> Option<(IoKey, Owner)> {
        self.by_fd.get(&fd).copied()
    }

    #[cfg(unix)]
    pub(crate) fn set_fd(&mut self, fd: RawFd, key: IoKey, owner: Owner) {
        self.by_fd.insert(fd, (key, owner));
    }

    #[cfg(unix)]
    pub(crate) fn clear_fd(&mut self, fd: RawFd) {
        self.by_fd.remove(&fd);
    }

    /// Forgets `fd` if it still names `key` (call it as the fd is closed).
    #[cfg(unix)]
    pub(crate) fn clear_fd_for(&mut self, fd: RawFd, key: IoKey) {
        if self.by_fd.get(&fd).is_some_and(|(k, _)| *k == key) {
            self.by_fd.remove(&fd);
        }
    }

    /// The user-owned raw source for `fd`, creating it if needed.
    #[cfg(unix)]
    pub(crate) fn raw_for_fd(
        &mut self,
        fd: RawFd,
        at: &'static Location<'static>,
    ) -> Result<IoKey, Error> {
        match self.by_fd(fd) {
            Some((_, Owner::Transport)) => Err(Error::Owned),
            Some((key, Owner::User)) => Ok(key),
            None => {
                let key = self.insert(
                    Kind::Raw(RawSource {
                        fd,
                        reader: None,
                        writer: None,
                        reader_version: 0,
                        writer_version: 0,
                    }),
                    at,
                );
                self.set_fd(fd, key, Owner::User);
                Ok(key)
            }
        }
    }
}

/// The interest a raw source needs for its current reader/writer.
pub(crate) fn raw_interest(raw: &RawSource) -> Option<mio::Interest> {
    match (raw.reader.is_some(), raw.writer.is_some()) {
        (true, true) => Some(mio::Interest::READABLE | mio::Interest::WRITABLE),
        (true, false) => Some(mio::Interest::READABLE),
        (false, true) => Some(mio::Interest::WRITABLE),
        (false, false) => None,
    }
}

/// The registry and the selector, borrowed together: what the transports in
/// `net/` change when they open, close or re-check a source.
pub(crate) struct IoCtx<'a> {
    pub(crate) io: RefMut<'a, Registry>,
    pub(crate) poll: Ref<'a, mio::Poll>,
}

/// The size of the loop's one read buffer, shared by every transport: as
/// large as a connection's read budget per dispatch (`net::READ_BUDGET`), so a
/// message of up to 256 KiB takes one `recv` (asyncio reads 256 KiB too).
/// Reused, never reallocated: its size costs memory once per loop, not per read.
pub(crate) const READ_BUFFER_SIZE: usize = 256 * 1024;

/// What kind of source a key names, read before dispatching to its module.
enum Tag {
    Raw,
    Stream,
    Listen,
    Datagram,
}

impl Loop {
    /// Runs the dispatch task of a ready source (step 6): the raw reader or
    /// writer, or the transport's own I/O (net/).
    pub(crate) fn dispatch_io(&self, key: IoKey) {
        let tag = match self.inner.io.borrow().get(key).map(|s| &s.kind) {
            None => return,
            Some(Kind::Raw(_)) => Tag::Raw,
            Some(Kind::Stream(_)) => Tag::Stream,
            Some(Kind::Listen(_)) => Tag::Listen,
            Some(Kind::Datagram(_)) => Tag::Datagram,
        };
        match tag {
            #[cfg(unix)]
            Tag::Raw => self.dispatch_raw(key),
            #[cfg(not(unix))]
            Tag::Raw => {}
            Tag::Stream => crate::net::stream::dispatch(self, key),
            Tag::Listen => crate::net::listener::dispatch(self, key),
            Tag::Datagram => crate::net::udp::dispatch(self, key),
        }
    }

    /// Borrows the registry and the selector. Never held while user code runs.
    pub(crate) fn io_ctx(&self) -> IoCtx<'_> {
        IoCtx {
            io: self.inner.io.borrow_mut(),
            poll: self.inner.poll.borrow(),
        }
    }

    /// Queues one dispatch task for `key` unless one is queued or running
    /// (a running dispatch re-checks its source before it ends). No allocation.
    pub(crate) fn queue_dispatch(&self, io: &mut Registry, key: IoKey) {
        let Some(src) = io.get_mut(key) else { return };
        if src.queued {
            return;
        }
        src.queued = true;
        self.inner.ready.borrow_mut().push(Task {
            job: Job::Io(key),
            ctx: Context::default(),
            loc: src.registered_at,
        });
    }

    /// Takes the loop's read buffer (allocated once, on first use) for the
    /// length of one dispatch; [`put_read_buf`](Self::put_read_buf) returns it.
    pub(crate) fn take_read_buf(&self) -> Vec<u8> {
        let b = std::mem::take(&mut *self.inner.read_buf.borrow_mut());
        if b.len() == READ_BUFFER_SIZE {
            b
        } else {
            vec![0; READ_BUFFER_SIZE]
        }
    }

    pub(crate) fn put_read_buf(&self, b: Vec<u8>) {
        *self.inner.read_buf.borrow_mut() = b;
    }

    /// Whether `self` and `other` are the same loop.
    pub(crate) fn ptr_eq(&self, other: &Loop) -> bool {
        std::rc::Rc::ptr_eq(&self.inner, &other.inner)
    }

    /// A weak reference, for cancellers and timers that must not keep the loop alive.
    pub(crate) fn downgrade(&self) -> Weak<Inner> {
        std::rc::Rc::downgrade(&self.inner)
    }

    /// The loop behind `w`, if it still exists.
    pub(crate) fn upgrade(w: &Weak<Inner>) -> Option<Loop> {
        w.upgrade().map(|inner| Loop { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_stale_keys_miss() {
        let mut r = Registry::default();
        let kind = || {
            Kind::Raw(RawSource {
                #[cfg(unix)]
                fd: 0,
                reader: None,
                writer: None,
                reader_version: 0,
                writer_version: 0,
            })
        };
        let a = r.insert(kind(), Location::caller());
        assert_eq!(IoKey::from_token(a.token()), a);
        r.remove(a).unwrap();
        let b = r.insert(kind(), Location::caller());
        assert_eq!(a.index, b.index, "slot reused");
        assert!(
            r.get(a).is_none(),
            "the old key must not reach the new source"
        );
        assert!(r.get(b).is_some());
        assert!(r.note_event(b, true, false, false));
        assert!(!r.note_event(b, true, false, false), "queued once");
    }
}

#[cfg(unix)]
mod raw_api {
    use super::*;
    use crate::reactor::{ExceptionContext, Loop};
    use crate::Failure;
    use mio::unix::SourceFd;
    use std::panic::{self, AssertUnwindSafe};

    impl Loop {
        /// Calls `f` whenever `fd` is readable: on every turn while unread data
        /// remains (level-triggered, as asyncio's readers are), until
        /// [`remove_reader`](Self::remove_reader). One reader per fd: a new one
        /// replaces the old. Keep `fd` open while it is registered.
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

        /// Removes the reader of `fd`; returns whether there was one. `false`
        /// on a closed loop and for a transport's fd.
        #[track_caller]
        pub fn remove_reader(&self, fd: RawFd) -> bool {
            self.set_raw(fd, None, true, Location::caller())
                .unwrap_or(false)
        }

        /// Removes the writer of `fd`; returns whether there was one.
        #[track_caller]
        pub fn remove_writer(&self, fd: RawFd) -> bool {
            self.set_raw(fd, None, false, Location::caller())
                .unwrap_or(false)
        }

        /// Installs or removes one side; returns whether that side had a callback.
        fn set_raw(
            &self,
            fd: RawFd,
            cb: Option<RawCallback>,
            read: bool,
            at: &'static Location<'static>,
        ) -> Result<bool, Error> {
            let inner = &self.inner;
            inner.check_open()?;
            let adding = cb.is_some();
            let mut io = inner.io.borrow_mut();
            if !adding && !matches!(io.by_fd(fd), Some((_, Owner::User))) {
                return Ok(false);
            }
            let key = io.raw_for_fd(fd, at)?;
            let src = io.get_mut(key).expect("registered fd has a source");
            let Kind::Raw(raw) = &mut src.kind else {
                unreachable!("a user-owned fd has a raw source")
            };
            let old = if read {
                raw.reader_version += 1;
                std::mem::replace(&mut raw.reader, cb)
            } else {
                raw.writer_version += 1;
                std::mem::replace(&mut raw.writer, cb)
            };
            let want = raw_interest(raw);
            let have = src.interest;
            let poll = inner.poll.borrow();
            let registry = poll.registry();
            let result = match (have, want) {
                (None, Some(i)) => registry.register(&mut SourceFd(&fd), key.token(), i),
                (Some(_), Some(i)) => registry.reregister(&mut SourceFd(&fd), key.token(), i),
                (Some(_), None) => registry.deregister(&mut SourceFd(&fd)),
                (None, None) => Ok(()),
            };
            let had = old.is_some();
            let mut garbage = vec![old];
            match result {
                Ok(()) => {
                    src.interest = want;
                    if want.is_none() {
                        io.clear_fd(fd);
                        if let Some(Source {
                            kind: Kind::Raw(r), ..
                        }) = io.remove(key)
                        {
                            garbage.push(r.reader);
                            garbage.push(r.writer);
                        }
                    }
                }
                Err(e) => {
                    // Undo: the new callback goes, and so does an empty source.
                    let Kind::Raw(raw) = &mut src.kind else {
                        unreachable!("a user-owned fd has a raw source")
                    };
                    let new = if read {
                        &mut raw.reader
                    } else {
                        &mut raw.writer
                    };
                    garbage.push(new.take());
                    if src.interest.is_none() {
                        io.clear_fd(fd);
                        io.remove(key);
                    }
                    drop((poll, io));
                    drop(garbage);
                    return Err(Error::Io(e));
                }
            }
            drop((poll, io));
            drop(garbage);
            Ok(had)
        }

        /// Runs the reader and/or writer of a ready raw source, then re-arms it.
        pub(crate) fn dispatch_raw(&self, key: IoKey) {
            let inner = &self.inner;
            let (fd, mut reader, mut writer) = {
                let mut io = inner.io.borrow_mut();
                let Some(src) = io.get_mut(key) else { return };
                src.queued = false;
                let r = std::mem::take(&mut src.readable);
                let w = std::mem::take(&mut src.writable);
                let Kind::Raw(raw) = &mut src.kind else {
                    return;
                };
                let reader = if r {
                    raw.reader.take().map(|cb| (cb, raw.reader_version))
                } else {
                    None
                };
                let writer = if w {
                    raw.writer.take().map(|cb| (cb, raw.writer_version))
                } else {
                    None
                };
                (raw.fd, reader, writer)
            };
            let called = reader.is_some() || writer.is_some();
            if let Some((cb, _)) = reader.as_mut() {
                self.call_raw(key, cb, true);
            }
            if let Some((cb, _)) = writer.as_mut() {
                self.call_raw(key, cb, false);
            }
            // Put each callback back unless it was replaced or removed meanwhile.
            let mut garbage = Vec::new();
            let mut io = inner.io.borrow_mut();
            if let Some(Source {
                kind: Kind::Raw(raw),
                interest,
                ..
            }) = io.get_mut(key)
            {
                for (taken, read) in [(reader, true), (writer, false)] {
                    let Some((cb, version)) = taken else { continue };
                    let (slot, current) = if read {
                        (&mut raw.reader, raw.reader_version)
                    } else {
                        (&mut raw.writer, raw.writer_version)
                    };
                    if version == current && slot.is_none() {
                        *slot = Some(cb);
                    } else {
                        garbage.push(cb);
                    }
                }
                // Level-triggered: re-arm, so the kernel reports the fd again
                // at the next poll if it is still ready.
                if let (true, Some(interest)) = (called, *interest) {
                    let poll = inner.poll.borrow();
                    if let Err(e) =
                        poll.registry()
                            .reregister(&mut SourceFd(&fd), key.token(), interest)
                    {
                        log::error!("deferloop: re-arming fd {fd} failed: {e}");
                    }
                }
            } else {
                garbage.extend(reader.map(|r| r.0));
                garbage.extend(writer.map(|w| w.0));
            }
            drop(io);
            drop(garbage);
        }

        fn call_raw(&self, key: IoKey, cb: &mut RawCallback, read: bool) {
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| cb(self))) {
                let loc = self
                    .inner
                    .io
                    .borrow()
                    .get(key)
                    .map_or(Location::caller(), |s| s.registered_at);
                let failure = Failure::from_panic(payload, loc);
                let message = if read {
                    "Exception in reader callback"
                } else {
                    "Exception in writer callback"
                };
                self.call_exception_handler(&ExceptionContext {
                    message,
                    failure: Some(&failure),
                    location: Some(loc),
                });
            }
        }
    }
}
