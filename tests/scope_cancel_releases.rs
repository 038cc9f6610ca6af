//! Cancelling a scope releases what its children wait on: a `Stream` read,
//! a connect, a timer, a thread job, a lock, a semaphore, a queue slot, a
//! child's exit. The table in `deferloop::deferred::scope`'s docs says what
//! each cancellation does; each row is checked here.

#[path = "util/process.rs"]
mod process_util;
mod util;

use deferloop::deferred::{defer_later, scope, DeferredLock, DeferredQueue, DeferredSemaphore};
use deferloop::net::Stream;
use deferloop::process::Process;
use deferloop::{Cancelled, EventLoop};
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn a_cancelled_scope_releases_reads_connects_timers_jobs_locks_and_queues() {
    let ev = EventLoop::new().unwrap();
    ev.set_max_threads(1).unwrap();
    let (stream, peer) = Stream::open_memory(&ev).unwrap();
    let (_listener, _filler, full) = util::net::full_listener();
    let lock = DeferredLock::new();
    let held = ev.run_until(lock.acquire()).unwrap();
    let sem = DeferredSemaphore::new(NonZeroUsize::MIN);
    let sem_held = ev.run_until(sem.acquire()).unwrap();
    let queue = DeferredQueue::<u8>::unbounded();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let blocker = ev.defer_to_thread(move || release_rx.recv().unwrap());
    let queued_ran = Arc::new(AtomicBool::new(false));
    let sources_before = ev.io_source_count();
    let timers_before = ev.timer_count();

    let (lp, s2, l2, sem2, q2, qr) = (
        ev.to_loop(),
        stream.clone(),
        lock.clone(),
        sem.clone(),
        queue.clone(),
        queued_ran.clone(),
    );
    let d = scope(move |s| {
        s.spawn(s2.read_exactly(4))?;
        s.spawn(lp.connect_tcp(full, util::net::Rec::new().0).connected())?;
        s.spawn(defer_later(&lp, Duration::from_secs(3600), || Ok(())))?;
        s.spawn(lp.defer_to_thread(move || qr.store(true, Ordering::SeqCst)))?;
        s.spawn(l2.acquire())?;
        s.spawn(sem2.acquire())?;
        s.spawn(q2.get().unwrap())?;
        Ok(())
    });
    assert_eq!(ev.io_source_count(), sources_before + 1, "the connect");
    assert_eq!(
        ev.timer_count(),
        timers_before + 2,
        "the timer, the connect's deadline"
    );
    assert_eq!(lock.waiting(), 1);
    assert_eq!(sem.waiting(), 1);

    d.cancel();
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    assert_eq!(
        ev.io_source_count(),
        sources_before,
        "the connecting socket is closed"
    );
    assert_eq!(ev.timer_count(), timers_before, "no timer is left");
    assert_eq!(lock.waiting(), 0, "the lock's waiter is gone");
    assert_eq!(sem.waiting(), 0, "the semaphore's waiter is gone");
    // The queue's getter is gone: a put stays in the queue.
    queue.put(9).unwrap();
    assert_eq!(ev.run_until(queue.get().unwrap()).unwrap(), 9);
    // The read's request is gone, its bytes are not.
    peer.send(b"data");
    assert_eq!(ev.run_until(stream.read_exactly(4)).unwrap(), b"data");
    // The queued job never runs.
    release_tx.send(()).unwrap();
    ev.run_until(blocker).unwrap();
    ev.run_until(ev.defer_to_thread(|| ())).unwrap();
    assert!(!queued_ran.load(Ordering::SeqCst));
    drop((held, sem_held));
}

#[test]
fn cancelling_a_wait_for_a_child_leaves_it_running_unless_an_errback_kills_it() {
    let ev = EventLoop::new().unwrap();
    let spawn = |ev: &EventLoop| -> Process {
        let (rec, _) = process_util::Recorder::new();
        ev.spawn_process(Command::new("sleep").arg("30"), rec)
            .unwrap()
    };
    // A bare wait: the child runs on.
    let p = spawn(&ev);
    let p2 = p.clone();
    let d = scope(move |s| {
        s.spawn(p2.wait())?;
        Ok(())
    });
    d.cancel();
    assert!(!p.has_exited());
    // The idiom that ties the child to the scope: kill it on cancel.
    let killed: Rc<RefCell<Option<Process>>> = Rc::default();
    let q = spawn(&ev);
    let q2 = q.clone();
    *killed.borrow_mut() = Some(q.clone());
    let d = scope(move |s| {
        let q3 = q2.clone();
        s.spawn(q2.wait().add_errback(move |f| {
            if f.check::<Cancelled>() {
                q3.kill()?;
            }
            Err(f)
        }))?;
        Ok(())
    });
    d.cancel();
    let status = ev.run_until(q.wait()).unwrap();
    assert!(!status.success());
    p.kill().unwrap();
    ev.run_until(p.wait()).unwrap();
}
