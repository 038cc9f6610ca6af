//! Calling into the loop from another thread and blocking for the result.

use deferloop::{succeed, Deferred, Error, EventLoop, Failure};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Eight threads block on loop calls at once; each gets its own value.
#[test]
fn eight_threads_block_on_loop_calls_at_once() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel();
    ev.call_soon(move |_| {
        for i in 0..8u64 {
            let (remote, tx) = (remote.clone(), tx.clone());
            thread::spawn(move || {
                let r = remote.call_blocking(Duration::from_secs(10), move |lp| {
                    // A Deferred fired later by a timer, not at once.
                    let (d, r) = Deferred::new();
                    lp.call_later(Duration::from_millis(5), move |_| {
                        r.callback(i * 3).unwrap();
                    })
                    .unwrap();
                    d
                });
                tx.send((i, r)).unwrap();
            });
        }
    })?;
    let remote = ev.remote();
    let collector = thread::spawn(move || {
        let mut got: Vec<_> = (0..8).map(|_| rx.recv().unwrap()).collect();
        remote.stop().unwrap();
        got.sort_by_key(|(i, _)| *i);
        got
    });
    ev.run()?;
    for (i, r) in collector.join().unwrap() {
        assert_eq!(r.unwrap(), i * 3);
    }
    Ok(())
}

/// A failure comes back as itself; a timeout gives `TimedOut` without hanging.
#[test]
fn failures_and_timeouts_come_back_as_errors() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel();
    ev.call_soon(move |_| {
        thread::spawn(move || {
            let failed = remote.call_blocking(Duration::from_secs(5), |_| {
                deferloop::fail::<u8>(Failure::msg("remote-boom"))
            });
            let t0 = Instant::now();
            let timed_out =
                remote.call_blocking(Duration::from_millis(50), |lp: &deferloop::Loop| {
                    // Pending for longer than the wait (dropping the Resolver
                    // would fail it with `Abandoned` at once).
                    let (d, r) = Deferred::<u8>::new();
                    lp.call_later(Duration::from_secs(60), move |_| drop(r))
                        .unwrap();
                    d
                });
            let waited = t0.elapsed();
            let ok = remote.call_blocking(Duration::from_secs(5), |_| succeed(9u8));
            tx.send((failed, timed_out, waited, ok)).unwrap();
            remote.stop().unwrap();
        });
    })?;
    ev.run()?;
    let (failed, timed_out, waited, ok) = rx.recv().unwrap();
    match failed {
        Err(Error::Failed(r)) => assert!(r.to_string().contains("remote-boom"), "{r:?}"),
        other => panic!("expected Failed, got {other:?}"),
    }
    assert!(matches!(timed_out, Err(Error::TimedOut)));
    // The Deferred would stay pending 60 s: 10 s tells the 50 ms wait from
    // that, whatever the load.
    assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(10));
    assert_eq!(ok.unwrap(), 9);
    Ok(())
}

/// A closed loop, or one that is not running, is a clear error, never a hang.
#[test]
fn a_closed_or_idle_loop_is_an_error_not_a_hang() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let r = remote.clone();
    let idle = thread::spawn(move || r.call_blocking(Duration::from_secs(30), |_| succeed(1u8)))
        .join()
        .unwrap();
    assert!(matches!(idle, Err(Error::NotRunning)));
    drop(ev);
    let closed =
        thread::spawn(move || remote.call_blocking(Duration::from_secs(30), |_| succeed(1u8)))
            .join()
            .unwrap();
    assert!(matches!(closed, Err(Error::Closed)));
    Ok(())
}

/// A loop that stops while a call waits wakes the caller with `Stopped`.
#[test]
fn a_loop_stopping_under_a_waiting_call_wakes_it() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel();
    ev.call_soon(move |_| {
        thread::spawn(move || {
            let t0 = Instant::now();
            let r = remote.call_blocking(Duration::from_secs(30), |lp| {
                lp.stop();
                // Never fires while the loop runs (its Resolver waits in a timer).
                let (d, r) = Deferred::<u8>::new();
                lp.call_later(Duration::from_secs(60), move |_| drop(r))
                    .unwrap();
                d
            });
            tx.send((r, t0.elapsed())).unwrap();
        });
    })?;
    ev.run()?;
    let (r, waited) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("caller was woken");
    assert!(matches!(r, Err(Error::Stopped)), "{r:?}");
    assert!(waited < Duration::from_secs(10));
    Ok(())
}

/// A blocking call made on the loop's own thread (from its callback) fails at
/// once, before queueing anything, instead of waiting out its timeout: the
/// loop cannot run the call while its thread waits.
#[test]
fn a_blocking_call_on_the_loop_s_own_thread_fails_at_once() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel();
    ev.call_soon(move |lp| {
        // With no check this would block the loop for the whole timeout and
        // then give `TimedOut`.
        let r = remote.call_blocking(Duration::from_secs(20), |_| succeed(1u8));
        tx.send(r).unwrap();
        lp.stop();
    })?;
    ev.run()?;
    match rx.recv().unwrap() {
        Err(Error::InvalidInput(m)) => assert!(m.contains("own thread"), "{m}"),
        other => panic!("expected the own-thread error, got {other:?}"),
    }
    Ok(())
}

/// Two loops whose callbacks block on each other: the call that would close
/// the cycle fails at once, so both loops go on; without the check both
/// threads would wait out their timeouts.
#[test]
fn a_cycle_of_blocking_calls_between_loops_fails_at_once() {
    let (remote_tx, remote_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // Loop B runs on its own thread until told to stop.
    let b_thread = thread::spawn(move || {
        let ev = EventLoop::new().unwrap();
        // Handed over once B runs: a blocking call needs a running loop.
        let handed = ev.remote();
        ev.call_soon(move |_| remote_tx.send(handed).unwrap())
            .unwrap();
        let remote = ev.remote();
        thread::spawn(move || {
            let _ = stop_rx.recv();
            let _ = remote.stop();
        });
        ev.run().unwrap();
    });
    let b = remote_rx.recv().unwrap();
    let ev = EventLoop::new().unwrap();
    let a = ev.remote();
    let (tx, rx) = mpsc::channel();
    ev.call_soon(move |lp| {
        // A's callback blocks on B; B's call blocks on A: a cycle.
        let inner = b.call_blocking(Duration::from_secs(20), move |_| {
            let r = a.call_blocking(Duration::from_secs(20), |_| succeed(7u8));
            succeed(r)
        });
        tx.send(inner).unwrap();
        lp.stop();
    })
    .unwrap();
    ev.run().unwrap();
    let inner = rx.recv().unwrap().expect("B answered A's call");
    match inner {
        Err(Error::InvalidInput(m)) => assert!(m.contains("deadlock"), "{m}"),
        other => panic!("expected the cycle error, got {other:?}"),
    }
    stop_tx.send(()).unwrap();
    b_thread.join().unwrap();
}
