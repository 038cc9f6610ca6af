//! Cross-thread calls: waking a sleeping loop, ordering, coalesced wake-ups.

use deferloop::{Error, EventLoop};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A loop asleep in poll with no timers is woken by another thread. The
/// thread waits 100 ms first so that the loop is most likely asleep (if it
/// is not yet, the call is simply found at its next poll: the test cannot
/// fail for that). With no timer the loop has nothing else to wake it, so a
/// lost wake-up sleeps for good: the bound of 10 s (not the 50 ms it was,
/// which a loaded machine can miss in scheduling alone) still tells a
/// wake-up from none.
#[test]
fn a_sleeping_loop_is_woken_by_another_thread() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100)); // the loop is asleep by then
        tx.send(Instant::now()).unwrap();
        remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
    });
    ev.run()?;
    let woke = Instant::now();
    let sent = rx.recv().unwrap();
    t.join().unwrap();
    assert!(
        woke - sent < Duration::from_secs(10),
        "woke {:?} after the call",
        woke - sent
    );
    Ok(())
}

/// 4 threads × 100,000 calls: every call runs exactly once, in per-thread order.
#[test]
fn calls_from_four_threads_run_once_each_in_per_thread_order() -> Result<(), Error> {
    const N: u32 = 100_000;
    let ev = EventLoop::new()?;
    let seen: Rc<RefCell<Vec<Vec<u32>>>> = Rc::new(RefCell::new(vec![Vec::new(); 4]));
    let done = Rc::new(RefCell::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let remote = ev.remote();
            thread::spawn(move || {
                for i in 0..N {
                    remote
                        .call_soon_threadsafe(move |lp| {
                            SEEN.with(|s| s.borrow_mut().push((t, i)));
                            if i == N - 1 {
                                SEEN.with(|s| s.borrow_mut().push((t, u32::MAX)));
                                let _ = lp;
                            }
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    thread_local! {
        static SEEN: RefCell<Vec<(usize, u32)>> = const { RefCell::new(Vec::new()) };
    }
    let (s, d) = (seen.clone(), done.clone());
    fn poll(lp: &deferloop::Loop, s: Rc<RefCell<Vec<Vec<u32>>>>, d: Rc<RefCell<i32>>) {
        SEEN.with(|v| {
            for (t, i) in v.borrow_mut().drain(..) {
                if i == u32::MAX {
                    *d.borrow_mut() += 1;
                } else {
                    s.borrow_mut()[t].push(i);
                }
            }
        });
        if *d.borrow() == 4 {
            lp.stop();
        } else {
            lp.call_later(Duration::from_millis(1), move |lp| poll(lp, s, d))
                .unwrap();
        }
    }
    ev.call_soon(move |lp| poll(lp, s, d))?;
    ev.run()?;
    for t in threads {
        t.join().unwrap();
    }
    for per_thread in seen.borrow().iter() {
        assert_eq!(per_thread.len(), N as usize);
        assert!(
            per_thread.iter().copied().eq(0..N),
            "out of order or duplicated"
        );
    }
    Ok(())
}

/// A burst of calls made while a wake is pending costs one wake-up syscall.
#[test]
fn a_burst_of_calls_costs_one_wake_up() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let r = remote.clone();
    thread::spawn(move || {
        for _ in 0..10_000 {
            r.call_soon_threadsafe(|_| {}).unwrap();
        }
    })
    .join()
    .unwrap();
    assert_eq!(remote.wake_stats(), (10_000, 1));
    remote.call_soon_threadsafe(|lp| lp.stop()).unwrap();
    ev.run()?;
    // Drained: the next call wakes again.
    remote.call_soon_threadsafe(|_| {}).unwrap();
    assert_eq!(remote.wake_stats(), (10_002, 2));
    Ok(())
}

/// A `Remote` used after its loop is dropped returns an error.
#[test]
fn remote_after_the_loop_is_dropped_is_an_error() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    drop(ev);
    let r = thread::spawn(move || remote.call_soon_threadsafe(|_| {}))
        .join()
        .unwrap();
    assert!(matches!(r, Err(Error::Closed)));
    Ok(())
}

/// Four threads call in (plain calls and blocking calls) while the loop
/// runs, stops, and is dropped under them. Every call is either refused
/// with `Closed` or accepted; every accepted closure either runs on the loop
/// or is dropped by the close — exactly one of the two; once refused, every
/// later call is refused; and a blocking call gets its value or `Closed`,
/// `Stopped` or `NotRunning` — never `TimedOut`.
#[test]
fn calls_racing_the_loop_drop_run_or_are_dropped_once_then_fail() -> Result<(), Error> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;

    #[derive(Default)]
    struct Counts {
        accepted: AtomicU64,
        refused: AtomicU64,
        ran: AtomicU64,
        dropped: AtomicU64,
    }
    /// Counts itself as run or dropped when it goes.
    struct Guard(Arc<Counts>, bool);
    impl Drop for Guard {
        fn drop(&mut self) {
            let c = if self.1 { &self.0.ran } else { &self.0.dropped };
            c.fetch_add(1, SeqCst);
        }
    }

    let ev = EventLoop::new()?;
    let counts = Arc::new(Counts::default());
    let started = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (remote, counts, started) = (ev.remote(), counts.clone(), started.clone());
            thread::spawn(move || {
                while !started.load(SeqCst) {
                    thread::yield_now();
                }
                let mut refused_once = false;
                for i in 0u64.. {
                    let r = if t == 3 && i % 64 == 0 {
                        // A blocking call: a value, or an error saying why not;
                        // never `TimedOut` (the loop answers or stops long before).
                        let r = remote.call_blocking(Duration::from_secs(60), |_| {
                            deferloop::deferred::succeed(7u8)
                        });
                        match r {
                            Ok(v) => assert_eq!(v, 7),
                            Err(e) => assert!(
                                matches!(e, Error::Closed | Error::Stopped | Error::NotRunning),
                                "{e}"
                            ),
                        }
                        continue;
                    } else {
                        let g = Guard(counts.clone(), false);
                        remote.call_soon_threadsafe(move |_| {
                            let mut g = g; // the whole guard, not a copy of its flag
                            g.1 = true;
                        })
                    };
                    match r {
                        Ok(()) => {
                            assert!(!refused_once, "accepted after a refusal");
                            counts.accepted.fetch_add(1, SeqCst);
                        }
                        Err(Error::Closed) => {
                            counts.refused.fetch_add(1, SeqCst);
                            if refused_once {
                                assert!(remote.is_closed());
                                return;
                            }
                            refused_once = true;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    started.store(true, SeqCst);
    // Run while the threads call, until 1,000 calls ran (counted, not timed:
    // on a loaded machine the threads may take long to start).
    fn stop_after_1000(lp: &deferloop::Loop, counts: Arc<Counts>) {
        if counts.ran.load(SeqCst) >= 1000 {
            lp.stop();
        } else {
            lp.call_later(Duration::from_millis(1), move |lp| {
                stop_after_1000(lp, counts)
            })
            .unwrap();
        }
    }
    let c = counts.clone();
    ev.call_soon(move |lp| stop_after_1000(lp, c))?;
    ev.run()?;
    // Stopped: calls pile up unrun until the drop closes the loop. Wait until
    // 100 more were accepted (at most 4 of them can have run in the last turn).
    let at_stop = counts.accepted.load(SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while counts.accepted.load(SeqCst) < at_stop + 100 {
        assert!(Instant::now() < deadline, "the threads stopped calling");
        thread::yield_now();
    }
    drop(ev);
    for t in threads {
        t.join().unwrap();
    }
    let c = &counts;
    let (accepted, ran, dropped) = (
        c.accepted.load(SeqCst),
        c.ran.load(SeqCst),
        c.dropped.load(SeqCst),
    );
    // A refused closure is dropped by the refusing call.
    let refused = c.refused.load(SeqCst);
    assert_eq!(
        ran + dropped,
        accepted + refused,
        "{ran} ran, {dropped} dropped"
    );
    assert!(ran > 0 && dropped > 0, "{ran} ran, {dropped} dropped");
    assert_eq!(refused, 8, "each thread stops at its second refusal");
    Ok(())
}

/// A batch of remote calls runs in one task: a panicking call is reported
/// with its location, and the calls after it (in its block and the next,
/// also after a block's last call panicked) still run, in order, each once
/// and each counted as a callback. The same
/// in debug mode, where each call is a task of its own (timed).
#[test]
fn a_panicking_call_is_reported_and_the_rest_of_its_batch_runs() -> Result<(), Error> {
    for debug in [false, true] {
        panicking_calls_in_a_batch(debug)?;
    }
    Ok(())
}

fn panicking_calls_in_a_batch(debug: bool) -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_debug(debug);
    let remote = ev.remote();
    let reports = Rc::new(RefCell::new(Vec::new()));
    let r = reports.clone();
    ev.set_exception_handler(move |_, cx| {
        r.borrow_mut().push(cx.location.unwrap().line());
    });
    let (tx, rx) = mpsc::channel();
    let line = line!() + 6;
    thread::spawn(move || {
        for i in 0..200u32 {
            let tx = tx.clone();
            if i % 50 == 0 || i == 62 || i == 63 {
                remote
                    .call_soon_threadsafe(move |_| {
                        drop(tx);
                        panic!("call {i}")
                    })
                    .unwrap();
            } else {
                remote
                    .call_soon_threadsafe(move |_| tx.send(i).unwrap())
                    .unwrap();
            }
        }
    })
    .join()
    .unwrap();
    let before = ev.stats().callbacks_run;
    ev.run_once()?;
    let ran: Vec<u32> = rx.try_iter().collect();
    let expected: Vec<u32> = (0..200)
        .filter(|i| i % 50 != 0 && *i != 62 && *i != 63)
        .collect();
    assert_eq!(ran, expected);
    assert_eq!(*reports.borrow(), vec![line; 6]);
    assert_eq!(ev.stats().callbacks_run - before, 200);
    Ok(())
}

/// A remote call that queues another waits for the next turn (a turn runs
/// only the calls queued when it took them in), as a callback's call_soon does.
#[test]
fn a_call_queued_by_a_remote_call_runs_in_the_next_turn() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let (tx, rx) = mpsc::channel::<u64>();
    let r = remote.clone();
    remote.call_soon_threadsafe(move |lp| {
        tx.send(lp.turn_count()).unwrap();
        r.call_soon_threadsafe(move |lp| tx.send(lp.turn_count()).unwrap())
            .unwrap();
    })?;
    ev.run_once()?;
    let first: Vec<u64> = rx.try_iter().collect();
    assert_eq!(first.len(), 1, "the second call waits");
    ev.run_once()?;
    let second: Vec<u64> = rx.try_iter().collect();
    assert_eq!(second, vec![first[0] + 1]);
    Ok(())
}
