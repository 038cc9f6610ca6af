//! How each cost grows with the amount of work: per-item costs at several n,
//! beside tokio where it has the same operation, with a "flat within 1.5×"
//! verdict per row (the largest median over the smallest). `cargo bench
//! --bench scale` for figures (`-- Remote`: only the sections whose title
//! contains "Remote"); `cargo test` runs it with tiny n as a smoke.
//!
//! Sources are counted up to what the file descriptor limit allows (the soft
//! limit is raised to the hard one first); timers, Deferreds, ready callbacks
//! and Remote calls from 10,000 to 1,000,000.

#[path = "../common/mod.rs"]
mod common;
mod tcp;

use common::{full_run, record_value, target_at_most, Better};
use deferloop::{Deferred, EventLoop, Failure};
use std::cell::Cell;
use std::os::unix::io::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Raises the soft fd limit to the hard one; returns the limit in force.
fn raise_fd_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
    }
    l.rlim_cur
}

/// Resident memory in bytes (`/proc/self/statm`'s second field).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// Bytes the allocator has handed out and not had back (glibc's
/// `mallinfo2`): unlike RSS, not hidden by memory freed earlier and reused.
fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 has no preconditions; it returns a plain struct.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

fn median(s: &mut [f64]) -> (f64, f64, f64) {
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (s[s.len() / 2], s[0], s[s.len() - 1])
}

/// Samples per cell: 5 in a full run, 1 in the smoke.
fn rounds() -> usize {
    if full_run() {
        5
    } else {
        1
    }
}

/// One row: a name and, per n, the per-item cost of `run(n)` (which returns
/// its own measured nanoseconds for the n items).
struct Row<'a> {
    name: &'a str,
    run: Box<dyn FnMut(u64) -> f64 + 'a>,
}

/// Measures every row at every n (rows interleaved within a round), prints
/// the table (median per item, and the range), and a flat-within-1.5× line
/// for each row.
fn table(title: &str, unit: &str, ns: &[u64], rows: &mut [Row<'_>]) -> Vec<Vec<f64>> {
    if !selected(title) {
        return Vec::new();
    }
    let ns: Vec<u64> = if full_run() {
        ns.to_vec()
    } else {
        vec![10, 20]
    };
    let mut samples = vec![vec![Vec::new(); ns.len()]; rows.len()];
    for _ in 0..rounds() {
        for (j, &n) in ns.iter().enumerate() {
            for (i, r) in rows.iter_mut().enumerate() {
                // Each sample starts with the allocator holding no freed
                // memory, as a rested process does: otherwise a sample after
                // a larger one pays for the allocator's tidying of what that
                // one freed (up to 15x at the smallest n), or finds its pages
                // already touched where a larger n's are not.
                // SAFETY: malloc_trim has no preconditions.
                unsafe { libc::malloc_trim(0) };
                let total = (r.run)(n);
                samples[i][j].push(total / n as f64);
            }
        }
    }
    println!("\n### {title}\n");
    println!(
        "{unit} per item (the process's CPU time), median of {} samples (min–max below it).\n",
        rounds()
    );
    let head: Vec<String> = ns.iter().map(|n| format!("n = {n}")).collect();
    println!("| contender | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(ns.len()));
    let mut medians = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let mut cells = Vec::new();
        let mut ranges = Vec::new();
        let mut m_row = Vec::new();
        for (j, &n) in ns.iter().enumerate() {
            let (m, lo, hi) = median(&mut samples[i][j]);
            record_value(
                &format!("{title} (n = {n})"),
                r.name,
                unit,
                Better::Lower,
                m,
                lo,
                hi,
            );
            cells.push(format!("{m:.1}"));
            ranges.push(format!("{lo:.1}–{hi:.1}"));
            m_row.push(m);
        }
        println!("| {} | {} |", r.name, cells.join(" | "));
        println!("| (range) | {} |", ranges.join(" | "));
        medians.push(m_row);
    }
    for (i, r) in rows.iter().enumerate() {
        let m = &medians[i];
        let max = m.iter().cloned().fold(f64::MIN, f64::max);
        let min = m.iter().cloned().fold(f64::MAX, f64::min);
        target_at_most(
            &format!(
                "{}: {title} flat within 1.5x from n = {} to n = {}",
                r.name,
                ns[0],
                ns[ns.len() - 1]
            ),
            max,
            min,
            1.5,
        );
    }
    medians
}

/// Whether a section runs: all do, unless a filter is given after `--`
/// (`cargo bench --bench scale -- Remote`), which its title must contain.
fn selected(title: &str) -> bool {
    common::filter().is_none_or(|f| title.contains(&f))
}

/// A CPU-time clock's reading (`CLOCK_PROCESS_CPUTIME_ID`: every thread of
/// the process, user and system), in nanoseconds. The costs below are CPU
/// time, not wall-clock time: on a shared machine the wall clock also counts
/// the turns other programs take on these cores, which swamps how a cost
/// grows with n.
pub fn cpu_ns(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// The CPU time `f` took (see [`cpu_ns`]).
fn timed(f: impl FnOnce()) -> f64 {
    let t0 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    f();
    cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - t0
}

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// `n` duplicates of the read end of one empty pipe: n file descriptors the
/// loop can watch, none ever readable.
fn dup_fds(read_end: RawFd, n: u64) -> Vec<RawFd> {
    (0..n)
        .map(|_| {
            // SAFETY: `read_end` is an open fd; the duplicate is closed by `close_fds`.
            let fd = unsafe { libc::dup(read_end) };
            assert!(fd >= 0, "dup: {}", std::io::Error::last_os_error());
            fd
        })
        .collect()
}

fn close_fds(fds: Vec<RawFd>) {
    for fd in fds {
        // SAFETY: each fd came from `dup_fds` and is closed once.
        unsafe { libc::close(fd) };
    }
}

fn main() {
    let limit = raise_fd_limit();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("count") {
        return count(&args[2], args[3].parse().expect("n"));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nfd limit {limit}; load average at the start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let big: &[u64] = &[10_000, 100_000, 1_000_000];
    let ev = EventLoop::new().unwrap();
    let rt = tokio_rt();
    // First, while the allocator holds no memory freed by the other tables.
    tcp::tcp(&ev, &rt, limit);

    // Sources: n file descriptors watched, then all removed.
    let most = (limit.saturating_sub(200)).min(20_000);
    let src_ns: Vec<u64> = [1_000, 5_000, 10_000, most]
        .into_iter()
        .filter(|n| *n <= most)
        .collect();
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two fds.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let removal = |title: &str, of_remove: bool| {
        let ev = &ev;
        let rt = &rt;
        table(
            title,
            "ns",
            &src_ns,
            &mut [
                Row {
                    name: "deferloop add_reader / remove_reader",
                    run: Box::new(move |n| {
                        let fds = dup_fds(pipe[0], n);
                        let add = timed(|| {
                            for &fd in &fds {
                                ev.add_reader(fd, |_| {}).unwrap();
                            }
                        });
                        let remove = timed(|| {
                            for &fd in &fds {
                                assert!(ev.remove_reader(fd));
                            }
                        });
                        close_fds(fds);
                        if of_remove {
                            remove
                        } else {
                            add
                        }
                    }),
                },
                Row {
                    name: "tokio AsyncFd::new / drop",
                    run: Box::new(move |n| {
                        let _g = rt.enter();
                        let fds = dup_fds(pipe[0], n);
                        let mut held = Vec::with_capacity(fds.len());
                        let add = timed(|| {
                            for &fd in &fds {
                                // SAFETY: `fd` stays open until `close_fds`,
                                // after the AsyncFd is dropped.
                                let a = unsafe {
                                    tokio::io::unix::AsyncFd::register_with_interest(
                                        Fd(fd),
                                        tokio::io::Interest::READABLE,
                                    )
                                };
                                held.push(a.expect("register"));
                            }
                        });
                        let remove = timed(|| drop(held));
                        close_fds(fds);
                        if of_remove {
                            remove
                        } else {
                            add
                        }
                    }),
                },
            ],
        )
    };
    removal(
        "watch a file descriptor (add_reader vs AsyncFd::new)",
        false,
    );
    removal(
        "remove a watched file descriptor, all n one after another",
        true,
    );

    // Ready callbacks: n queued, then one run.
    table(
        "ready callbacks: n call_soon then run (vs n spawn_local then run)",
        "ns",
        big,
        &mut [
            Row {
                name: "deferloop call_soon",
                run: Box::new(|n| {
                    timed(|| {
                        for _ in 0..n {
                            ev.call_soon(|_| {}).unwrap();
                        }
                        ev.call_soon(|lp| lp.stop()).unwrap();
                        ev.run().unwrap();
                    })
                }),
            },
            Row {
                name: "tokio spawn_local",
                run: Box::new(|n| {
                    timed(|| {
                        let local = tokio::task::LocalSet::new();
                        local.block_on(&rt, async {
                            for _ in 0..n {
                                drop(tokio::task::spawn_local(async {}));
                            }
                        });
                        rt.block_on(local);
                    })
                }),
            },
        ],
    );

    // Timers: n set, then all cancelled; and n set due at once, all fired.
    let mut handles = Vec::new();
    let mut sleeps = Vec::new();
    table(
        "timers: n set, then all cancelled (vs n sleeps registered, then dropped)",
        "ns",
        big,
        &mut [
            Row {
                name: "deferloop call_later + cancel",
                run: Box::new(|n| {
                    timed(|| {
                        handles.reserve(n as usize);
                        for i in 0..n {
                            let d = Duration::from_secs(60 + i % 1000);
                            handles.push(ev.call_later(d, |_| {}).unwrap());
                        }
                        for h in handles.drain(..) {
                            h.cancel();
                        }
                    })
                }),
            },
            Row {
                name: "tokio sleep + drop",
                run: Box::new(|n| {
                    timed(|| {
                        sleeps.reserve(n as usize);
                        rt.block_on(async {
                            for i in 0..n {
                                let d = Duration::from_secs(60 + i % 1000);
                                sleeps.push(tokio::time::sleep(d));
                                let s = sleeps.last_mut().unwrap();
                                // SAFETY: `sleeps` was reserved for n and
                                // gets n before `clear`: never moved again
                                // until `clear` drops it in place.
                                let s = unsafe { std::pin::Pin::new_unchecked(s) };
                                poll_once(s).await;
                            }
                            sleeps.clear();
                        });
                    })
                }),
            },
        ],
    );
    let fired = Rc::new(Cell::new(0u64));
    table(
        "timers: n set due at once, then all fired",
        "ns",
        big,
        &mut [Row {
            name: "deferloop call_later + fire",
            run: Box::new(|n| {
                fired.set(0);
                // A new loop per sample: the loop gives a burst's room back
                // over the next turns, so on a shared one a sample after a
                // larger n would pay for shrinking that n's buffers.
                let ev = EventLoop::new().unwrap();
                timed(|| {
                    for i in 0..n {
                        let f = fired.clone();
                        ev.call_later(Duration::from_nanos(i % 1000), move |lp| {
                            f.set(f.get() + 1);
                            if f.get() == n {
                                lp.stop();
                            }
                        })
                        .unwrap();
                    }
                    ev.run().unwrap();
                })
            }),
        }],
    );

    // Deferreds: n pending (each with a callback), then all fired.
    let mut pending = Vec::new();
    let mut chans = Vec::new();
    table(
        "Deferreds: n pending with a callback, then all fired (vs n oneshots)",
        "ns",
        big,
        &mut [
            Row {
                name: "deferloop Deferred",
                run: Box::new(|n| {
                    timed(|| {
                        pending.reserve(n as usize);
                        for _ in 0..n {
                            let (d, r) = Deferred::<u64>::new();
                            let d = d.add_callback(|x| Ok::<_, Failure>(x + 1));
                            pending.push((d, r));
                        }
                        for (d, r) in pending.drain(..) {
                            r.callback(1).unwrap();
                            assert_eq!(d.result().unwrap().unwrap(), 2);
                        }
                    })
                }),
            },
            Row {
                name: "tokio oneshot",
                run: Box::new(|n| {
                    timed(|| {
                        chans.reserve(n as usize);
                        for _ in 0..n {
                            chans.push(tokio::sync::oneshot::channel::<u64>());
                        }
                        for (tx, mut rx) in chans.drain(..) {
                            tx.send(1).unwrap();
                            assert_eq!(rx.try_recv().unwrap() + 1, 2);
                        }
                    })
                }),
            },
        ],
    );

    // Remote calls: n queued from another thread while the loop waits, then
    // run. Timed in two parts, summed: the sender's n calls (its thread's
    // CPU time), then the loop's run of them. Neither the thread's start nor
    // its end is timed, for either contender: at n = 10,000 a spawn and join
    // outweighed the calls themselves (to 2026-12-06 they were timed).
    table(
        "Remote calls: n queued from another thread, then run (vs unbounded mpsc)",
        "ns",
        big,
        &mut [
            Row {
                name: "deferloop call_soon_threadsafe",
                run: Box::new(|n| {
                    let remote = ev.remote();
                    let send = sender(move || {
                        for i in 0..n {
                            remote
                                .call_soon_threadsafe(move |lp| {
                                    if i == n - 1 {
                                        lp.stop();
                                    }
                                })
                                .unwrap();
                        }
                        drop(remote);
                    });
                    send + timed(|| ev.run().unwrap())
                }),
            },
            Row {
                name: "tokio mpsc unbounded",
                run: Box::new(|n| {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
                    let send = sender(move || {
                        for i in 0..n {
                            tx.send(i).unwrap();
                        }
                        drop(tx);
                    });
                    send + timed(|| {
                        rt.block_on(async {
                            let mut got = 0;
                            while rx.recv().await.is_some() {
                                got += 1;
                            }
                            assert_eq!(got, n);
                        })
                    })
                }),
            },
        ],
    );
}

/// Runs `send` on a new thread and returns its CPU time there, in
/// nanoseconds: the thread's start and end are left out.
fn sender(send: impl FnOnce() + Send + 'static) -> f64 {
    std::thread::spawn(move || {
        let t0 = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
        send();
        cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) - t0
    })
    .join()
    .unwrap()
}

/// For callgrind: `count chain N` runs N 10-step chains (benches/deferred.rs's
/// first table), to be profiled with callgrind_annotate.
fn chains(n: u64) {
    let mut sum = 0;
    for i in 0..n {
        let (d, r) = Deferred::<u64>::new();
        let mut d = d;
        for _ in 0..10 {
            d = d.add_callback(|x| Ok::<_, Failure>(x + 1));
        }
        r.callback(i).unwrap();
        sum += d.result().unwrap().unwrap();
    }
    assert!(sum > 0);
}

/// For callgrind: `count call_soon N` queues N callbacks with call_soon and
/// runs them (benches/loop.rs's first row).
fn call_soons(ev: &EventLoop, n: u64) {
    let count = Rc::new(Cell::new(0u64));
    for _ in 0..n {
        let c = count.clone();
        ev.call_soon(move |_| c.set(c.get() + 1)).unwrap();
    }
    ev.call_soon(|lp| lp.stop()).unwrap();
    ev.run().unwrap();
    assert_eq!(count.get(), n);
}

/// For callgrind (scripts/scale_instructions.sh): `count add N` watches N
/// file descriptors; `count remove N` watches them and then removes them
/// all, so the difference of the two counts is the cost of N removals;
/// `count chain N`: see [`chains`]; `count call_soon N`: see [`call_soons`];
/// `count chain_ps N` and `count call_soon_ps N`: the same with `ps`'s
/// registry on.
fn count(what: &str, n: u64) {
    let (what, ps) = match what.strip_suffix("_ps") {
        Some(w) => (w, true),
        None => (what, false),
    };
    if what == "chain" || what == "call_soon" {
        let ev = EventLoop::new().unwrap();
        if ps {
            deferloop::ps::enable(&ev.to_loop());
        }
        return if what == "chain" {
            chains(n)
        } else {
            call_soons(&ev, n)
        };
    }
    let ev = EventLoop::new().unwrap();
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two fds.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let fds = dup_fds(pipe[0], n);
    for &fd in &fds {
        ev.add_reader(fd, |_| {}).unwrap();
    }
    if what == "remove" {
        for &fd in &fds {
            assert!(ev.remove_reader(fd));
        }
    }
    std::mem::forget(ev);
    std::mem::forget(fds);
}

async fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) {
    struct Once<'a, F>(Option<std::pin::Pin<&'a mut F>>);
    impl<F: std::future::Future> std::future::Future for Once<'_, F> {
        type Output = ();
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<()> {
            if let Some(f) = self.0.take() {
                let _ = f.poll(cx);
            }
            std::task::Poll::Ready(())
        }
    }
    Once(Some(f)).await
}
