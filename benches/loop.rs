//! Loop micro-benchmarks beside the same work on tokio's current-thread runtime.
//! `cargo bench --bench loop` for figures; `cargo test` runs one tiny sample.

mod common;

use common::{compare, coro, target, target_ns, Contender};
use deferloop::{EventLoop, Loop};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn main() {
    let ev = EventLoop::new().unwrap();
    let rt = tokio_rt();

    // (a) call_soon + run, versus spawning (and running) an empty tokio task;
    // and one step of a coroutine, on deferloop's loop and on tokio's.
    let count = Rc::new(Cell::new(0u64));
    let m = compare(
        "call_soon + run (deferloop) vs spawn of an empty task (tokio)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop call_soon",
                run: Box::new(|n| {
                    for _ in 0..n {
                        let c = count.clone();
                        ev.call_soon(move |_| c.set(c.get() + 1)).unwrap();
                    }
                    ev.call_soon(|lp| lp.stop()).unwrap();
                    ev.run().unwrap();
                }),
            },
            Contender {
                name: "tokio spawn_local",
                run: Box::new(|n| {
                    let local = tokio::task::LocalSet::new();
                    let c = count.clone();
                    local.block_on(&rt, async move {
                        for _ in 0..n {
                            let c = c.clone();
                            drop(tokio::task::spawn_local(async move { c.set(c.get() + 1) }));
                        }
                        tokio::task::yield_now().await;
                    });
                    rt.block_on(local);
                }),
            },
            // One op = one step of a coroutine that yields: its wake-up goes
            // through call_soon (common/coro.rs), as an asyncio Task's does.
            // 1,000 tasks share the n steps, so a turn runs many steps.
            Contender {
                name: "deferloop coroutine step",
                run: Box::new(|n| {
                    let (tasks, steps) = split(n);
                    let left = Rc::new(Cell::new(tasks));
                    for _ in 0..tasks {
                        let (c, left) = (count.clone(), left.clone());
                        coro::spawn(&ev, async move {
                            for _ in 0..steps {
                                coro::yield_now().await;
                                c.set(c.get() + 1);
                            }
                            left.set(left.get() - 1);
                            if left.get() == 0 {
                                Loop::current().unwrap().stop();
                            }
                        });
                    }
                    ev.run().unwrap();
                }),
            },
            Contender {
                name: "tokio task step (yield_now)",
                run: Box::new(|n| {
                    let (tasks, steps) = split(n);
                    let local = tokio::task::LocalSet::new();
                    for _ in 0..tasks {
                        let c = count.clone();
                        local.spawn_local(async move {
                            for _ in 0..steps {
                                tokio::task::yield_now().await;
                                c.set(c.get() + 1);
                            }
                        });
                    }
                    rt.block_on(local);
                }),
            },
        ],
    );
    println!(
        "\n- Style, on the same loop: a coroutine step costs {:.2}× a callback.",
        m[2] / m[0]
    );

    target(
        "call_soon+run at least 10x cheaper than a tokio spawn",
        m[0],
        m[1],
        10.0,
    );

    // (b) call_later + cancel, versus creating and dropping a registered tokio sleep.
    compare(
        "call_later + cancel (deferloop) vs sleep registered + dropped (tokio)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop call_later+cancel",
                run: Box::new(|n| {
                    for i in 0..n {
                        let h = ev
                            .call_later(Duration::from_secs(60 + i % 100), |_| {})
                            .unwrap();
                        h.cancel();
                    }
                }),
            },
            Contender {
                name: "tokio sleep+drop",
                run: Box::new(|n| {
                    rt.block_on(async {
                        for i in 0..n {
                            let s = tokio::time::sleep(Duration::from_secs(60 + i % 100));
                            let mut s = std::pin::pin!(s);
                            // Poll once so the timer is registered, then drop it.
                            let _ = futures_poll_once(s.as_mut()).await;
                        }
                    });
                }),
            },
        ],
    );

    // (b2) set n timers, then cancel them all: the heap holds n timers, so this
    // measures its sift and slot costs, which (b) (at most one timer) does not.
    // Both sides keep their n handles in a Vec reused across samples. A tokio
    // sleep is !Unpin: the Vec is reserved for all n up front, so it never
    // reallocates and each sleep is polled where it stays (no Box per sleep,
    // which would add an allocation to tokio's side).
    let mut handles = Vec::new();
    let mut sleeps = Vec::new();
    let m = compare(
        "set N timers, then cancel them all (deferloop) vs N sleeps registered, then dropped (tokio)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop call_later*N, cancel*N",
                run: Box::new(|n| {
                    handles.reserve(n as usize);
                    for i in 0..n {
                        let h = ev
                            .call_later(Duration::from_secs(60 + i % 100), |_| {})
                            .unwrap();
                        handles.push(h);
                    }
                    for h in handles.drain(..) {
                        h.cancel();
                    }
                }),
            },
            Contender {
                name: "tokio sleep*N, drop*N",
                run: Box::new(|n| {
                    sleeps.reserve(n as usize);
                    rt.block_on(async {
                        for i in 0..n {
                            sleeps.push(tokio::time::sleep(Duration::from_secs(60 + i % 100)));
                            let s = sleeps.last_mut().unwrap();
                            // SAFETY: `sleeps` was reserved for n entries and
                            // gets at most n before `clear`, so it never
                            // reallocates: this sleep is not moved again until
                            // `clear` drops it in place.
                            let s = unsafe { std::pin::Pin::new_unchecked(s) };
                            // Poll once so the timer is registered.
                            let _ = futures_poll_once(s).await;
                        }
                        sleeps.clear();
                    });
                }),
            },
        ],
    );

    // (b3) moving a pending timer (an idle timeout re-armed at each read):
    // Handle::reset versus Sleep::reset, one timer each, re-filed n times.
    compare(
        "reset a pending timer (deferloop Handle::reset) vs Sleep::reset (tokio)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop Handle::reset",
                run: Box::new(|n| {
                    let h = ev.call_later(Duration::from_secs(60), |_| {}).unwrap();
                    for i in 0..n {
                        h.reset(Duration::from_secs(60 + i % 100)).unwrap();
                    }
                    h.cancel();
                }),
            },
            Contender {
                name: "tokio Sleep::reset",
                run: Box::new(|n| {
                    rt.block_on(async {
                        let s = tokio::time::sleep(Duration::from_secs(60));
                        let mut s = std::pin::pin!(s);
                        let _ = futures_poll_once(s.as_mut()).await;
                        for i in 0..n {
                            let at =
                                tokio::time::Instant::now() + Duration::from_secs(60 + i % 100);
                            s.as_mut().reset(at);
                        }
                    });
                }),
            },
        ],
    );

    // The targets at N = 1,000,000 (the operations per sample).
    target_ns(
        "N = 1,000,000 timers set then cancelled at most 100 ns per timer",
        m[0],
        100.0,
    );
    target(
        "N = 1,000,000 timers set then cancelled at least 2.5x cheaper than tokio",
        m[0],
        m[1],
        2.5,
    );

    // (c) threadsafe calls from another thread, versus a tokio unbounded mpsc.
    let m = compare(
        "threadsafe call (deferloop Remote) vs unbounded mpsc send+recv (tokio)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop call_soon_threadsafe",
                run: Box::new(|n| {
                    let remote = ev.remote();
                    let t = std::thread::spawn(move || {
                        for i in 0..n {
                            remote
                                .call_soon_threadsafe(move |lp| {
                                    if i == n - 1 {
                                        lp.stop();
                                    }
                                })
                                .unwrap();
                        }
                    });
                    ev.run().unwrap();
                    t.join().unwrap();
                }),
            },
            Contender {
                name: "tokio mpsc unbounded",
                run: Box::new(|n| {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
                    let t = std::thread::spawn(move || {
                        for i in 0..n {
                            tx.send(i).unwrap();
                        }
                    });
                    rt.block_on(async {
                        let mut got = 0;
                        while rx.recv().await.is_some() {
                            got += 1;
                        }
                        assert_eq!(got, n);
                    });
                    t.join().unwrap();
                }),
            },
        ],
    );
    target(
        "threadsafe call at least 1.5x cheaper than tokio mpsc send+recv",
        m[0],
        m[1],
        1.5,
    );
    assert!(count.get() > 0 || common::filter().is_some());
}

/// `n` steps as (tasks, steps per task): up to 1,000 tasks.
fn split(n: u64) -> (u64, u64) {
    let tasks = n.clamp(1, 1000);
    (tasks, n / tasks)
}

/// Polls a future once and returns whether it was ready (no `futures` crate).
async fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
    struct Once<'a, F>(Option<std::pin::Pin<&'a mut F>>);
    impl<F: std::future::Future> std::future::Future for Once<'_, F> {
        type Output = bool;
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<bool> {
            let f = self.0.as_mut().unwrap();
            std::task::Poll::Ready(f.as_mut().poll(cx).is_ready())
        }
    }
    Once(Some(f)).await
}
