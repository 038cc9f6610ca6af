//! `defer_to_thread`: blocking work on the pool, results fired on the loop thread.

mod util;

use deferloop::deferred::{set_unhandled_failure_hook, Cancelled};
use deferloop::{gather_results, Error, EventLoop, Panicked};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// 1,000 jobs on a pool of 4 all fire on the loop thread with the right values.
#[test]
fn a_thousand_jobs_on_four_threads_fire_on_the_loop_thread() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_max_threads(4)?;
    let loop_thread = thread::current().id();
    let ds: Vec<_> = (0..1000u64)
        .map(|i| {
            ev.defer_to_thread(move || (i * i, thread::current().id()))
                .add_callback(move |(v, worker)| {
                    assert_eq!(
                        thread::current().id(),
                        loop_thread,
                        "fired off the loop thread"
                    );
                    assert_ne!(worker, loop_thread);
                    Ok(v)
                })
        })
        .collect();
    let values = ev.run_until(gather_results(ds)).unwrap();
    assert_eq!(values, (0..1000u64).map(|i| i * i).collect::<Vec<_>>());
    assert!(ev.pool_thread_count() <= 4);
    Ok(())
}

/// A panicking job gives a failure, and the pool goes on serving.
#[test]
fn a_panicking_job_fails_its_deferred_and_the_pool_survives() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_max_threads(1)?;
    let f = ev
        .run_until(ev.defer_to_thread(|| -> u8 { panic!("job exploded") }))
        .unwrap_err();
    assert_eq!(
        f.downcast_ref::<Panicked>().unwrap().message,
        "job exploded"
    );
    assert_eq!(ev.run_until(ev.defer_to_thread(|| 7u8)).unwrap(), 7);
    assert_eq!(ev.pool_thread_count(), 1);
    Ok(())
}

/// Cancelling a queued job's Deferred fails it with Cancelled and the job never runs.
#[test]
fn cancelling_a_queued_job_removes_it() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_max_threads(1)?;
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let blocker = ev.defer_to_thread(move || release_rx.recv().unwrap());
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let queued = ev.defer_to_thread(move || r.store(true, Ordering::SeqCst));
    queued.cancel();
    let f = queued.result().unwrap().unwrap_err();
    assert!(f.check::<Cancelled>());
    release_tx.send(()).unwrap();
    ev.run_until(blocker).unwrap();
    ev.run_until(ev.defer_to_thread(|| ())).unwrap();
    assert!(
        !ran.load(Ordering::SeqCst),
        "a cancelled queued job must not run"
    );
    Ok(())
}

/// Cancelling a running job cannot stop it; its late result is dropped quietly.
#[test]
fn cancelling_a_running_job_drops_its_late_result() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    // "Quietly": neither the loop's exception handler nor the unhandled
    // failure hook hears of the late result.
    let reports = std::rc::Rc::new(std::cell::Cell::new(0));
    let r = reports.clone();
    ev.set_exception_handler(move |_, _| r.set(r.get() + 1));
    let r = reports.clone();
    let previous = set_unhandled_failure_hook(Some(Box::new(move |_| r.set(r.get() + 1))));
    // One pool thread: jobs end, and their results come back, in order.
    ev.set_max_threads(1)?;
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let finished = Arc::new(AtomicBool::new(false));
    let f = finished.clone();
    let d = ev.defer_to_thread(move || {
        started_tx.send(()).unwrap();
        thread::sleep(Duration::from_millis(50));
        f.store(true, Ordering::SeqCst);
        5u8
    });
    started_rx.recv().unwrap();
    d.cancel();
    assert!(d.result().unwrap().unwrap_err().check::<Cancelled>());
    // The result arrives later and is ignored; the loop keeps working. A
    // job queued behind it answers after it (waited for, not a 100 ms guess).
    ev.run_until(ev.defer_to_thread(|| ())).unwrap();
    set_unhandled_failure_hook(previous);
    assert!(finished.load(Ordering::SeqCst), "the job ran to its end");
    assert_eq!(reports.get(), 0, "the late result was reported");
    Ok(())
}

/// On a closed loop, `defer_to_thread` gives a failed Deferred.
#[test]
fn defer_to_thread_on_a_closed_loop_fails() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.close()?;
    let f = ev.defer_to_thread(|| 1u8).result().unwrap().unwrap_err();
    assert!(f.check::<deferloop::deferred::LoopClosed>(), "{f:?}");
    Ok(())
}

/// Starts a job that runs `hold`, then says it finished.
fn start_slow_job(ev: &EventLoop, hold: impl FnOnce() + Send + 'static) -> Arc<AtomicBool> {
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let f = finished.clone();
    let _d = ev.defer_to_thread(move || {
        started_tx.send(()).unwrap();
        hold();
        f.store(true, Ordering::SeqCst);
    });
    started_rx.recv().unwrap();
    finished
}

/// Closing the loop waits for running pool jobs by default, and not when asked.
#[test]
fn closing_the_loop_waits_for_running_jobs_unless_told_not_to() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let finished = start_slow_job(&ev, || thread::sleep(Duration::from_millis(150)));
    ev.close()?;
    assert!(
        finished.load(Ordering::SeqCst),
        "close returned before the running job ended"
    );

    // This job ends only when the test lets it (or after 60 s), so a close
    // slowed by load cannot see it end.
    let ev = EventLoop::new()?;
    ev.set_thread_pool_wait_on_close(false);
    let (release, held) = mpsc::channel::<()>();
    let finished = start_slow_job(&ev, move || {
        let _ = held.recv_timeout(Duration::from_secs(60));
    });
    ev.close()?;
    assert!(
        !finished.load(Ordering::SeqCst),
        "close waited although told not to"
    );
    drop(release);
    Ok(())
}

/// A job that does not end holds `close` no longer than the close timeout:
/// it is left to finish on its thread, and the log says so. (Before, close
/// waited for it, however long.)
#[test]
fn closing_the_loop_waits_for_a_stuck_job_no_longer_than_the_close_timeout() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    ev.set_thread_pool_close_timeout(Duration::from_millis(200));
    let (release, stuck) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let _d = ev.defer_to_thread(move || {
        started_tx.send(()).unwrap();
        // Released by the test once close has returned, or after 60 s.
        let _ = stuck.recv_timeout(Duration::from_secs(60));
    });
    started.recv().unwrap();
    let t0 = Instant::now();
    ev.close()?;
    let took = t0.elapsed();
    let _ = release.send(());
    // The job would hold close 60 s: 10 s tells the 200 ms timeout from
    // that, whatever the load.
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(10),
        "close took {took:?}"
    );
    assert_eq!(logs.mine_containing("still running").len(), 1);
    Ok(())
}

/// Panics when dropped: a result the closed loop drops on the pool thread.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a result that panics when dropped");
    }
}

/// A job whose result panics as the closed loop drops it still counts as
/// ended: close returns when the job does, not at the close timeout.
#[test]
fn a_job_whose_result_panics_when_dropped_does_not_hold_close() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    // A close timeout of 60 s: 10 s tells "when the job ends" from it.
    ev.set_thread_pool_close_timeout(Duration::from_secs(60));
    let (started_tx, started) = mpsc::channel::<()>();
    let _d = ev.defer_to_thread(move || {
        started_tx.send(()).unwrap();
        thread::sleep(Duration::from_millis(200));
        PanicsOnDrop
    });
    started.recv().unwrap();
    let t0 = Instant::now();
    ev.close()?;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "close took {took:?}");
    Ok(())
}
