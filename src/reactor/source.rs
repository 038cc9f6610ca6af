//! Sources: anything the loop polls. Owns the [`Source`] trait, [`Ready`],
//! [`PostAction`] and the registry that stores sources behind the trait; a
//! source's [`SourceKey`] is `key.rs`.
//!
//! The reactor knows no kind of source. A stream connection, a raw reader,
//! an in-memory test connection, the adapter under every public
//! `EventSource` (signals, children, listeners, UDP sockets, users'): each
//! is a type that implements `Source`, is inserted with [`Loop::insert_source`], and from then
//! on is dispatched once per turn in which it is ready. Readiness comes from
//! the selector (step 4) or from [`Loop::wake_source`] (a source with no file
//! descriptor, or work the source found for itself); both are merged into one
//! dispatch task per source per turn.
//!
//! The registry holds each source as an `Rc<dyn Source>`: a dispatch clones the
//! `Rc` out and releases the registry before it calls the source, so a source
//! (and the user code it runs) may insert, wake or remove sources, its own
//! included, while it runs (calloop's double-borrow panics,
//! [calloop#107](https://github.com/Smithay/calloop/issues/107), cannot
//! happen). Keys carry a generation, so an event or queued dispatch for a
//! source that was removed, and whose slot was reused, in the same turn is
//! ignored. Tests: below, tests/loop_io.rs, tests/net_*.rs.

use super::key::SourceKey;
use super::published::IoInfo;
use super::ready::{Job, Task};
use super::Loop;
use crate::context::Context;
use crate::Error;
use slab::Slab;
use smallvec::SmallVec;
use std::any::Any;
use std::collections::HashMap;
use std::io;
use std::os::unix::io::RawFd;
use std::panic::Location;
use std::rc::Rc;

/// What happened to a source since its last dispatch: bits of readiness the
/// selector reported, and whether the source was woken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ready(u8);

impl Ready {
    /// Nothing.
    pub(crate) const EMPTY: Ready = Ready(0);
    /// The selector said readable (or error / hang-up: a read will tell).
    pub(crate) const READABLE: Ready = Ready(1);
    /// The selector said writable (or error / hang-up: a write will tell).
    pub(crate) const WRITABLE: Ready = Ready(2);
    /// The peer closed its writing side, or hung up. An edge-triggered
    /// selector says it once: a source must remember it.
    pub(crate) const READ_CLOSED: Ready = Ready(4);
    /// [`Loop::wake_source`] asked for a dispatch with no readiness.
    pub(crate) const WOKEN: Ready = Ready(8);

    /// Whether every bit of `other` is set.
    pub(crate) fn contains(self, other: Ready) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no bit is set.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn from_event(ev: &mio::event::Event) -> Ready {
        let mut r = Ready::EMPTY;
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            r = r | Ready::READABLE;
        }
        if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
            r = r | Ready::WRITABLE;
        }
        if ev.is_read_closed() || ev.is_error() {
            r = r | Ready::READ_CLOSED;
        }
        r
    }
}

impl std::ops::BitOr for Ready {
    type Output = Ready;
    fn bitor(self, rhs: Ready) -> Ready {
        Ready(self.0 | rhs.0)
    }
}

/// What a dispatch asks of the loop when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PostAction {
    /// Dispatch again only when new readiness (or a wake) arrives.
    Continue,
    /// Dispatch again in the next turn even if nothing new arrives (a read
    /// budget ran out with data left): behind the others, for fairness.
    Again,
}

/// Anything the loop polls. The one trait a new kind of source implements;
/// the reactor calls nothing else.
///
/// A source registers its own file descriptor (if it has one) with the
/// selector under [`SourceKey::token`] when it is built (the `build` closure of
/// [`Loop::insert_source`] gets the selector's registry), and deregisters it
/// before it calls [`Loop::remove_source`]. It keeps its state behind its own
/// `Cell`s/`RefCell`s, borrowed only while no user code runs.
pub(crate) trait Source: Any {
    /// Step 6, once per turn in which the source was ready or woken: `ready`
    /// is everything reported since the last dispatch. Runs with no borrow of
    /// the loop held; a panic that escapes is caught and reported by the loop.
    fn dispatch(self: Rc<Self>, lp: &Loop, key: SourceKey, ready: Ready) -> PostAction;

    /// The loop is closing: the source has left the registry, and must finish
    /// what it owes its users (a protocol's `connection_lost`, a Deferred's
    /// failure). The loop is already closed: what this schedules is refused.
    fn close(self: Rc<Self>, lp: &Loop) {
        let _ = lp;
    }

    /// A short name for diagnostics: `"tcp"`, `"unix listener"`, `"reader/writer"`.
    fn name(&self) -> &'static str;

    /// Whether the source currently waits to read, and to write (diagnostics).
    fn interest(&self) -> (bool, bool) {
        (true, true)
    }
}

struct Entry {
    gen: u32,
    src: Rc<dyn Source>,
    ready: Ready,
    /// Whether a dispatch task is queued, or running: a wake meanwhile only
    /// adds bits, and the end of the dispatch queues the next one.
    queued: bool,
    at: &'static Location<'static>,
    /// The file descriptors `by_fd` gives to this source (one, nearly
    /// always): removing the source forgets them without a scan of `by_fd`.
    fds: SmallVec<[RawFd; 1]>,
}

/// Who owns a file descriptor in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// `add_reader`/`add_writer`.
    User,
    /// A source that is not a raw reader/writer (a socket, a pipe): `add_reader`
    /// must not take it over.
    Source,
}

/// The slab of sources, and which file descriptor belongs to which.
///
/// `by_fd` and the entries' `fds` mirror each other (`fd → key` there, and
/// `fd` in that key's entry): claiming, releasing and removing each cost
/// O(1) in the number of sources, so closing n connections is O(n), not the
/// O(n²) of a scan of `by_fd` per close.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Slab<Entry>,
    next_gen: u32,
    by_fd: HashMap<RawFd, (SourceKey, Owner)>,
}

impl Registry {
    fn get_mut(&mut self, key: SourceKey) -> Option<&mut Entry> {
        self.entries
            .get_mut(key.index as usize)
            .filter(|e| e.gen == key.gen)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records readiness; returns whether a dispatch task must be queued.
    pub(crate) fn note(
        &mut self,
        key: SourceKey,
        ready: Ready,
    ) -> Option<&'static Location<'static>> {
        let e = self.get_mut(key)?;
        e.ready = e.ready | ready;
        if e.queued || e.ready.is_empty() {
            return None;
        }
        e.queued = true;
        Some(e.at)
    }

    pub(crate) fn infos(&self, at_most: usize) -> Vec<IoInfo> {
        self.entries
            .iter()
            .take(at_most)
            .map(|(_, e)| IoInfo {
                kind: e.src.name(),
                interest: e.src.interest(),
                registered_at: e.at,
            })
            .collect()
    }

    pub(crate) fn by_fd(&self, fd: RawFd) -> Option<(SourceKey, Owner)> {
        self.by_fd.get(&fd).copied()
    }

    /// Gives `fd` to the source at `key` (taking it from a previous owner).
    /// Ignored if there is no such source: a key that is gone owns nothing.
    pub(crate) fn set_owner(&mut self, fd: RawFd, key: SourceKey, owner: Owner) {
        if self.get_mut(key).is_none() {
            return;
        }
        if let Some((old, _)) = self.by_fd.insert(fd, (key, owner)) {
            if old != key {
                if let Some(e) = self.get_mut(old) {
                    e.fds.retain(|f| *f != fd);
                }
            }
        }
        let e = self.get_mut(key).expect("checked above");
        if !e.fds.contains(&fd) {
            e.fds.push(fd);
        }
    }

    /// Forgets `fd` if it belongs to the source at `key`.
    fn release(&mut self, fd: RawFd, key: SourceKey) {
        if self.by_fd.get(&fd).is_some_and(|(k, _)| *k == key) {
            self.by_fd.remove(&fd);
            if let Some(e) = self.get_mut(key) {
                e.fds.retain(|f| *f != fd);
            }
        }
    }

    /// Removes the source at `key` and the file descriptors it owns.
    fn remove(&mut self, key: SourceKey) -> Option<Rc<dyn Source>> {
        self.get_mut(key)?;
        let e = self.entries.remove(key.index as usize);
        for fd in e.fds {
            self.by_fd.remove(&fd);
        }
        Some(e.src)
    }

    /// The source at `key`, downcast to its concrete type.
    pub(crate) fn get_as<S: Source>(&self, key: SourceKey) -> Option<Rc<S>> {
        let e = self
            .entries
            .get(key.index as usize)
            .filter(|e| e.gen == key.gen)?;
        let any: Rc<dyn Any> = e.src.clone();
        any.downcast().ok()
    }

    /// Removes every source (for `close()`), returning them to be closed.
    pub(crate) fn drain(&mut self) -> Vec<Rc<dyn Source>> {
        self.by_fd.clear();
        std::mem::take(&mut self.entries)
            .into_iter()
            .map(|(_, e)| e.src)
            .collect()
    }
}

impl Loop {
    /// Inserts a source. `build` gets its key and the selector's registry, to
    /// register its file descriptor (if any) under `key.token()`, and returns
    /// the source. Nothing is inserted if `build` fails.
    ///
    /// `build` must not call back into the loop's registry.
    ///
    /// # Errors
    /// [`Error::Closed`], or `build`'s error as [`Error::Io`].
    pub(crate) fn insert_source(
        &self,
        at: &'static Location<'static>,
        build: impl FnOnce(SourceKey, &mio::Registry) -> io::Result<Rc<dyn Source>>,
    ) -> Result<SourceKey, Error> {
        let inner = &self.inner;
        inner.check_open()?;
        let mut io = inner.io.borrow_mut();
        let io = &mut *io;
        io.next_gen = io.next_gen.wrapping_add(1);
        let vacant = io.entries.vacant_entry();
        let key = SourceKey {
            index: u32::try_from(vacant.key())
                .map_err(|_| Error::InvalidInput("more than 2^32 sources"))?,
            gen: io.next_gen,
        };
        let poll = inner.poll.borrow();
        let src = build(key, poll.registry())?;
        vacant.insert(Entry {
            gen: key.gen,
            src,
            ready: Ready::EMPTY,
            queued: false,
            at,
            fds: SmallVec::new(),
        });
        Ok(key)
    }

    /// Removes the source at `key` and returns it (to be dropped by the
    /// caller, outside any borrow). Its file descriptor, if claimed, is
    /// released. A dispatch already queued for it is skipped.
    pub(crate) fn remove_source(&self, key: SourceKey) -> Option<Rc<dyn Source>> {
        self.inner.io.borrow_mut().remove(key)
    }

    /// Asks for a dispatch of `key` with `ready` added to its readiness: in
    /// the next step 6, or, if the source is being dispatched now, right
    /// after that dispatch returns. No allocation; idempotent within a turn.
    pub(crate) fn wake_source(&self, key: SourceKey, ready: Ready) {
        let ready = if ready.is_empty() {
            Ready::WOKEN
        } else {
            ready
        };
        let at = self.inner.io.borrow_mut().note(key, ready);
        if let Some(at) = at {
            self.inner.wake_host();
            self.inner.ready.borrow_mut().push(Task {
                job: Job::Io(key),
                ctx: Context::default(),
                loc: at,
            });
        }
    }

    /// Runs `f` with the selector's registry (to register, reregister or
    /// deregister a file descriptor). `f` must not call back into the loop.
    pub(crate) fn with_selector<R>(&self, f: impl FnOnce(&mio::Registry) -> R) -> R {
        f(self.inner.poll.borrow().registry())
    }

    /// Records that `fd` belongs to the source at `key`, so that `add_reader`
    /// refuses it ([`Error::Owned`]). Released by [`release_fd`](Self::release_fd)
    /// or when the source is removed.
    pub(crate) fn claim_fd(&self, fd: RawFd, key: SourceKey) {
        self.inner.io.borrow_mut().set_owner(fd, key, Owner::Source);
    }

    /// Forgets `fd` if it still belongs to `key` (call it as the fd is closed).
    pub(crate) fn release_fd(&self, fd: RawFd, key: SourceKey) {
        self.inner.io.borrow_mut().release(fd, key);
    }

    /// The source at `key`, if it is still there, as its concrete type.
    pub(crate) fn source_as<S: Source>(&self, key: SourceKey) -> Option<Rc<S>> {
        self.inner.io.borrow().get_as(key)
    }

    /// Where the source at `key` was registered (for reports about it).
    pub(crate) fn source_location(&self, key: SourceKey) -> &'static Location<'static> {
        let mut io = self.inner.io.borrow_mut();
        io.get_mut(key).map_or(Location::caller(), |e| e.at)
    }

    /// Step 6 for a source: one dispatch, then the next one queued if the
    /// dispatch asked for it or a wake arrived while it ran.
    pub(crate) fn dispatch_source(&self, key: SourceKey) {
        let taken = {
            let mut io = self.inner.io.borrow_mut();
            io.get_mut(key)
                .map(|e| (e.src.clone(), std::mem::take(&mut e.ready)))
        };
        let Some((src, ready)) = taken else { return };
        let action = src.dispatch(self, key, ready);
        let mut io = self.inner.io.borrow_mut();
        let Some(e) = io.get_mut(key) else {
            return;
        };
        e.queued = false;
        let again = action == PostAction::Again || !e.ready.is_empty();
        drop(io);
        if again {
            self.wake_source(key, Ready::EMPTY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLoop;
    use std::cell::Cell;

    struct Counter {
        dispatched: Cell<u32>,
        again: Cell<u32>,
    }

    impl Source for Counter {
        fn dispatch(self: Rc<Self>, _: &Loop, _: SourceKey, _: Ready) -> PostAction {
            self.dispatched.set(self.dispatched.get() + 1);
            if self.again.get() > 0 {
                self.again.set(self.again.get() - 1);
                PostAction::Again
            } else {
                PostAction::Continue
            }
        }
        fn name(&self) -> &'static str {
            "counter"
        }
    }

    fn counter(ev: &EventLoop, again: u32) -> (SourceKey, Rc<Counter>) {
        let c = Rc::new(Counter {
            dispatched: Cell::new(0),
            again: Cell::new(again),
        });
        let c2 = c.clone();
        let key = ev
            .insert_source(Location::caller(), move |_, _| Ok(c2 as Rc<dyn Source>))
            .unwrap();
        (key, c)
    }

    #[test]
    fn tokens_round_trip_and_stale_keys_miss() {
        let ev = EventLoop::new().unwrap();
        let (a, _) = counter(&ev, 0);
        assert_eq!(SourceKey::from_token(a.token()), a);
        assert!(ev.remove_source(a).is_some());
        let (b, _) = counter(&ev, 0);
        assert_eq!(a.index, b.index, "slot reused");
        assert!(
            ev.source_as::<Counter>(a).is_none(),
            "the old key must not reach the new source"
        );
        assert!(ev.source_as::<Counter>(b).is_some());
        assert!(ev.remove_source(a).is_none());
    }

    #[test]
    fn wakes_in_one_turn_make_one_dispatch() {
        let ev = EventLoop::new().unwrap();
        let (k, c) = counter(&ev, 0);
        ev.wake_source(k, Ready::EMPTY);
        ev.wake_source(k, Ready::READABLE);
        ev.run_once().unwrap();
        assert_eq!(c.dispatched.get(), 1);
        ev.stop();
        ev.run_once().unwrap();
        assert_eq!(c.dispatched.get(), 1, "no readiness, no dispatch");
    }

    #[test]
    fn again_dispatches_once_per_turn() {
        let ev = EventLoop::new().unwrap();
        let (k, c) = counter(&ev, 2);
        ev.wake_source(k, Ready::EMPTY);
        for expected in 1..=3 {
            ev.run_once().unwrap();
            assert_eq!(c.dispatched.get(), expected);
        }
        ev.stop();
        ev.run_once().unwrap();
        assert_eq!(c.dispatched.get(), 3);
    }

    #[test]
    fn a_removed_source_is_not_dispatched() {
        let ev = EventLoop::new().unwrap();
        let (k, c) = counter(&ev, 0);
        ev.wake_source(k, Ready::EMPTY);
        ev.remove_source(k);
        ev.stop();
        ev.run_once().unwrap();
        assert_eq!(c.dispatched.get(), 0);
    }
}

#[cfg(test)]
#[path = "source_fds.rs"]
mod fds_tests;
