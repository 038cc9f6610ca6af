//! The public source trait: readiness, re-arm or edge mode, changes from
//! inside a dispatch, removal on drop, wake-only sources, weak references
//! that wake and remove, contained panics, and Deferred/Result returns.

#[path = "../examples/eventfd_source.rs"]
#[allow(dead_code)]
mod eventfd_source;

use deferloop::source::{
    EventSource, Interest, Mode, PostAction, Readiness, SourceHandle, WeakSource,
};
use deferloop::{Deferred, EventLoop, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::os::unix::io::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;

/// A Unix socket pair's reading end, read `per_call` bytes at a time.
struct Reader {
    sock: Rc<UnixStream>,
    per_call: usize,
    got: Rc<RefCell<Vec<u8>>>,
    calls: Rc<Cell<u32>>,
    action: PostAction,
}

impl EventSource for Reader {
    type Ret = PostAction;
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }
    fn process(&mut self, _: &Loop, r: Readiness) -> PostAction {
        assert!(r.readable, "dispatched without readiness: {r:?}");
        self.calls.set(self.calls.get() + 1);
        let mut buf = vec![0; self.per_call];
        if let Ok(n) = (&*self.sock).read(&mut buf) {
            self.got.borrow_mut().extend_from_slice(&buf[..n]);
        }
        self.action
    }
}

type Bytes = Rc<RefCell<Vec<u8>>>;

fn reader(per_call: usize, action: PostAction) -> (Reader, UnixStream, Bytes, Rc<Cell<u32>>) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let calls = Rc::new(Cell::new(0));
    let r = Reader {
        sock: Rc::new(a),
        per_call,
        got: got.clone(),
        calls: calls.clone(),
        action,
    };
    (r, b, got, calls)
}

fn turns(ev: &EventLoop, n: usize) {
    for _ in 0..n {
        ev.run_once_timeout(std::time::Duration::ZERO).unwrap();
    }
}

#[test]
fn readiness_is_delivered_and_rearmed_level_triggered() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, calls) = reader(2, PostAction::Continue);
    let h = ev.add_source(r).unwrap();
    peer.write_all(b"abcdef").unwrap();
    turns(&ev, 5);
    // Two bytes a call, no more data after the first edge: only a re-arm
    // after each dispatch reports the rest.
    assert_eq!(&*got.borrow(), b"abcdef");
    assert_eq!(calls.get(), 3);
    drop(h);
}

#[test]
fn rearm_changes_the_interest() {
    struct W {
        sock: UnixStream,
        seen: Rc<RefCell<Vec<Readiness>>>,
    }
    impl EventSource for W {
        type Ret = PostAction;
        fn fd(&self) -> Option<BorrowedFd<'_>> {
            Some(self.sock.as_fd())
        }
        fn interest(&self) -> Interest {
            Interest::WRITABLE
        }
        fn process(&mut self, _: &Loop, r: Readiness) -> PostAction {
            self.seen.borrow_mut().push(r);
            // Writable at once; then wait for input only.
            PostAction::Rearm(Interest::READABLE)
        }
    }
    let ev = EventLoop::new().unwrap();
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let h = ev
        .add_source(W {
            sock: a,
            seen: seen.clone(),
        })
        .unwrap();
    turns(&ev, 3);
    assert_eq!(
        seen.borrow().len(),
        1,
        "writable once, then not polled for it"
    );
    assert!(seen.borrow()[0].writable);
    b.write_all(b"x").unwrap();
    turns(&ev, 2);
    let s = seen.borrow();
    assert!(s.len() >= 2 && s[1].readable && !s[1].writable, "{s:?}");
    drop(s);
    drop(h);
}

#[test]
fn remove_from_inside_process() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, calls) = reader(1, PostAction::Remove);
    let h = ev.add_source(r).unwrap();
    peer.write_all(b"abc").unwrap();
    turns(&ev, 4);
    assert_eq!(calls.get(), 1);
    assert_eq!(&*got.borrow(), b"a");
    assert!(!h.is_active());
    assert!(h.remove().is_none(), "already gone");
}

#[test]
fn handle_removal_from_inside_process_is_applied_on_return() {
    struct SelfRemover {
        handle: Rc<RefCell<Option<SourceHandle<SelfRemover>>>>,
        calls: Rc<Cell<u32>>,
        during: Rc<Cell<bool>>,
    }
    impl EventSource for SelfRemover {
        type Ret = PostAction;
        fn process(&mut self, _: &Loop, _: Readiness) -> PostAction {
            self.calls.set(self.calls.get() + 1);
            let h = self.handle.borrow_mut().take().unwrap();
            // Queued: this call still runs with `self` intact.
            assert!(h.remove().is_none());
            self.during.set(true);
            PostAction::Again
        }
    }
    let ev = EventLoop::new().unwrap();
    let slot = Rc::new(RefCell::new(None));
    let calls = Rc::new(Cell::new(0));
    let during = Rc::new(Cell::new(false));
    let h = ev
        .add_source(SelfRemover {
            handle: slot.clone(),
            calls: calls.clone(),
            during: during.clone(),
        })
        .unwrap();
    h.wake();
    *slot.borrow_mut() = Some(h);
    turns(&ev, 3);
    assert!(during.get());
    assert_eq!(calls.get(), 1, "removed despite Again");
}

#[test]
fn insert_another_source_from_inside_process() {
    struct Spawner {
        made: Rc<RefCell<Vec<SourceHandle<Child>>>>,
    }
    struct Child {
        ran: Rc<Cell<u32>>,
    }
    impl EventSource for Child {
        type Ret = PostAction;
        fn process(&mut self, _: &Loop, r: Readiness) -> PostAction {
            assert!(r.woken);
            self.ran.set(self.ran.get() + 1);
            PostAction::Continue
        }
    }
    impl EventSource for Spawner {
        type Ret = Result<PostAction, deferloop::Error>;
        fn process(&mut self, lp: &Loop, _: Readiness) -> Self::Ret {
            let c = lp.add_source(Child {
                ran: Rc::new(Cell::new(0)),
            })?;
            c.wake();
            self.made.borrow_mut().push(c);
            Ok(PostAction::Continue)
        }
    }
    let ev = EventLoop::new().unwrap();
    let made = Rc::new(RefCell::new(Vec::new()));
    let h = ev.add_source(Spawner { made: made.clone() }).unwrap();
    h.wake();
    turns(&ev, 1);
    assert_eq!(made.borrow().len(), 1, "a source added from inside process");
    // The child is dispatched in the next turn (what a turn schedules waits one).
    turns(&ev, 1);
    let n = made.borrow()[0].with(|c| c.ran.get());
    assert_eq!(n, Some(1));
    drop(h);
}

#[test]
fn dropping_the_handle_deregisters_and_frees_the_fd() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, calls) = reader(8, PostAction::Continue);
    let sock = r.sock.clone(); // the fd outlives the source
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&*sock);
    let h = ev.add_source(r).unwrap();
    assert!(ev.add_reader(fd, |_| {}).is_err(), "the source owns its fd");
    drop(h);
    assert!(calls.get() == 0 && got.borrow().is_empty());
    let _ = peer.write_all(b"late");
    turns(&ev, 2);
    assert_eq!(
        calls.get(),
        0,
        "a dropped handle's source is not dispatched"
    );
    // Deregistered and released: the raw reader may take the fd now (the
    // selector would refuse a descriptor still registered).
    let rd = ev.add_reader(fd, |_| {});
    assert!(rd.is_ok(), "{rd:?}");
}

#[test]
fn detach_keeps_the_source() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, _) = reader(8, PostAction::Continue);
    ev.add_source(r).unwrap().detach();
    peer.write_all(b"kept").unwrap();
    turns(&ev, 2);
    assert_eq!(&*got.borrow(), b"kept");
}

#[test]
fn a_source_without_fd_is_woken() {
    struct Tick(Rc<Cell<u32>>);
    impl EventSource for Tick {
        type Ret = PostAction;
        fn process(&mut self, _: &Loop, r: Readiness) -> PostAction {
            assert!(r.woken && !r.readable);
            self.0.set(self.0.get() + 1);
            PostAction::Continue
        }
    }
    let ev = EventLoop::new().unwrap();
    let n = Rc::new(Cell::new(0));
    let h = ev.add_source(Tick(n.clone())).unwrap();
    turns(&ev, 2);
    assert_eq!(n.get(), 0, "never dispatched unwoken");
    h.wake();
    h.wake();
    turns(&ev, 2);
    assert_eq!(n.get(), 1, "two wakes in a turn, one dispatch");
    assert!(h.disable());
    h.wake();
    turns(&ev, 2);
    assert_eq!(n.get(), 1, "disabled");
    assert!(h.enable());
    turns(&ev, 2);
    assert_eq!(n.get(), 2, "the wake kept while disabled is delivered");
}

#[test]
fn panics_are_contained_and_the_source_stays() {
    struct Boom(Rc<Cell<u32>>);
    impl EventSource for Boom {
        type Ret = PostAction;
        fn process(&mut self, _: &Loop, _: Readiness) -> PostAction {
            self.0.set(self.0.get() + 1);
            panic!("boom in a source");
        }
    }
    let ev = EventLoop::new().unwrap();
    let reports = Rc::new(RefCell::new(Vec::new()));
    let r2 = reports.clone();
    ev.set_exception_handler(move |_, ctx| r2.borrow_mut().push(ctx.message.to_string()));
    let n = Rc::new(Cell::new(0));
    let h = ev.add_source(Boom(n.clone())).unwrap();
    h.wake();
    turns(&ev, 1);
    h.wake();
    turns(&ev, 1);
    assert_eq!(n.get(), 2, "still there after a panic");
    assert_eq!(reports.borrow().len(), 2);
    assert!(reports.borrow()[0].contains("event source"));
    assert!(h.is_active());
}

#[test]
fn an_error_is_reported_and_removes_the_source() {
    struct Fails;
    impl EventSource for Fails {
        type Ret = Result<PostAction, std::io::Error>;
        fn process(&mut self, _: &Loop, _: Readiness) -> Self::Ret {
            Err(std::io::Error::other("gone bad"))
        }
    }
    let ev = EventLoop::new().unwrap();
    let reports = Rc::new(RefCell::new(Vec::new()));
    let r2 = reports.clone();
    ev.set_exception_handler(move |_, ctx| {
        r2.borrow_mut()
            .push(ctx.failure.map(|f| f.to_string()).unwrap_or_default())
    });
    let h = ev.add_source(Fails).unwrap();
    h.wake();
    turns(&ev, 1);
    assert!(!h.is_active());
    assert!(
        reports.borrow()[0].contains("gone bad"),
        "{:?}",
        reports.borrow()
    );
}

#[test]
fn a_deferred_return_pauses_the_source_until_it_fires() {
    struct Slow {
        pending: Rc<RefCell<Option<deferloop::Resolver<PostAction>>>>,
        calls: Rc<Cell<u32>>,
    }
    impl EventSource for Slow {
        type Ret = Deferred<PostAction>;
        fn process(&mut self, _: &Loop, _: Readiness) -> Deferred<PostAction> {
            self.calls.set(self.calls.get() + 1);
            let (d, r) = Deferred::new();
            *self.pending.borrow_mut() = Some(r);
            d
        }
    }
    let ev = EventLoop::new().unwrap();
    let pending = Rc::new(RefCell::new(None));
    let calls = Rc::new(Cell::new(0));
    let h = ev
        .add_source(Slow {
            pending: pending.clone(),
            calls: calls.clone(),
        })
        .unwrap();
    h.wake();
    turns(&ev, 1);
    h.wake();
    turns(&ev, 2);
    assert_eq!(calls.get(), 1, "not dispatched while its Deferred waits");
    let r = pending.borrow_mut().take().unwrap();
    r.callback(PostAction::Continue).unwrap();
    turns(&ev, 2);
    assert_eq!(calls.get(), 2, "the wake kept meanwhile is delivered");
    let r = pending.borrow_mut().take().unwrap();
    r.errback(Failure::new(std::io::Error::other("late failure")))
        .unwrap();
    assert!(!h.is_active(), "a failed Deferred removes the source");
}

#[test]
fn loop_closed_is_told() {
    struct Owes(Rc<Cell<bool>>);
    impl EventSource for Owes {
        type Ret = PostAction;
        fn process(&mut self, _: &Loop, _: Readiness) -> PostAction {
            PostAction::Continue
        }
        fn loop_closed(&mut self, _: &Loop) {
            self.0.set(true);
        }
    }
    let ev = EventLoop::new().unwrap();
    let told = Rc::new(Cell::new(false));
    let h = ev.add_source(Owes(told.clone())).unwrap();
    ev.close().unwrap();
    assert!(told.get());
    assert!(!h.is_active());
}

#[test]
fn the_eventfd_example_reads_what_another_thread_wrote() {
    // Runs the example's unsafe eventfd calls.
    assert_eq!(eventfd_source::run().unwrap(), 15);
}

/// A [`Reader`] in edge mode.
struct EdgeReader(Reader);

impl EventSource for EdgeReader {
    type Ret = PostAction;
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.fd()
    }
    fn mode(&self) -> Mode {
        Mode::Edge
    }
    fn process(&mut self, lp: &Loop, r: Readiness) -> PostAction {
        self.0.process(lp, r)
    }
}

#[test]
fn edge_mode_is_not_rearmed() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, calls) = reader(2, PostAction::Continue);
    let h = ev.add_source(EdgeReader(r)).unwrap();
    peer.write_all(b"abcdef").unwrap();
    turns(&ev, 5);
    // No re-arm: what the one dispatch left unread is not reported again.
    assert_eq!(&*got.borrow(), b"ab");
    assert_eq!(calls.get(), 1);
    // New data is a new edge.
    peer.write_all(b"g").unwrap();
    turns(&ev, 5);
    assert_eq!(&*got.borrow(), b"abcd");
    assert_eq!(calls.get(), 2);
    drop(h);
}

/// A source with no descriptor that keeps a weak reference to itself.
struct SelfWaking {
    me: Option<WeakSource<SelfWaking>>,
    n: Rc<Cell<u32>>,
    until: u32,
    dropped: Rc<Cell<bool>>,
}

impl Drop for SelfWaking {
    fn drop(&mut self) {
        self.dropped.set(true);
    }
}

impl EventSource for SelfWaking {
    type Ret = PostAction;
    fn process(&mut self, lp: &Loop, r: Readiness) -> PostAction {
        assert!(r.woken && !r.readable);
        self.n.set(self.n.get() + 1);
        let me = self.me.clone().unwrap();
        assert!(me.with(|_| ()).is_none(), "running: not lent twice");
        if self.n.get() < self.until {
            lp.call_soon(move |_| me.wake()).unwrap();
        } else {
            assert!(me.remove(), "removed from inside, applied on return");
            assert!(!me.is_active());
        }
        PostAction::Continue
    }
}

fn self_waking(
    ev: &EventLoop,
    until: u32,
) -> (WeakSource<SelfWaking>, Rc<Cell<u32>>, Rc<Cell<bool>>) {
    let n = Rc::new(Cell::new(0));
    let dropped = Rc::new(Cell::new(false));
    let h = ev
        .add_source(SelfWaking {
            me: None,
            n: n.clone(),
            until,
            dropped: dropped.clone(),
        })
        .unwrap();
    let me = h.downgrade();
    assert_eq!(h.with(|s| s.me = Some(me.clone())), Some(()));
    h.detach();
    (me, n, dropped)
}

#[test]
fn a_weak_source_wakes_it_and_dropping_it_keeps_it() {
    let ev = EventLoop::new().unwrap();
    let (me, n, dropped) = self_waking(&ev, 3);
    let other = me.clone();
    drop(other);
    assert!(me.is_active(), "dropping a WeakSource removes nothing");
    me.wake();
    turns(&ev, 10);
    assert_eq!(n.get(), 3, "woken by hand, then twice by itself");
    assert!(!me.is_active());
    assert!(
        dropped.get(),
        "the removal asked inside process was applied"
    );
    assert!(!me.remove(), "removing twice says it was gone");
    me.wake(); // nothing: gone
    turns(&ev, 2);
    assert_eq!(n.get(), 3);
}

#[test]
fn a_weak_source_removes_it_from_outside() {
    let ev = EventLoop::new().unwrap();
    let (me, n, dropped) = self_waking(&ev, 100);
    me.wake();
    turns(&ev, 2);
    assert!(me.remove());
    assert!(dropped.get(), "not running: dropped at once");
    turns(&ev, 3);
    let seen = n.get();
    turns(&ev, 3);
    assert_eq!(n.get(), seen, "no dispatch after removal");
}

#[test]
fn readiness_during_a_turn_run_inside_with_is_kept() {
    let ev = EventLoop::new().unwrap();
    let (r, mut peer, got, calls) = reader(8, PostAction::Continue);
    let h = ev.add_source(EdgeReader(r)).unwrap();
    peer.write_all(b"xy").unwrap();
    // The source is lent to `with` while the turn would dispatch it.
    h.with(|_| turns(&ev, 1)).unwrap();
    assert_eq!(calls.get(), 0);
    turns(&ev, 2);
    assert_eq!(&*got.borrow(), b"xy", "delivered after `with` returned");
    assert_eq!(calls.get(), 1);
}
