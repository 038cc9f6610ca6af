//! How each cost grows with the amount of work: per-item costs at several n,
//! beside tokio where it has the same operation, with a "flat within 1.5×"
//! verdict per row (the largest median over the smallest). `cargo bench
//! --bench scale` for figures (`-- Remote`: only the sections whose title
//! contains "Remote"); `cargo test` runs it with tiny n as a smoke.
//!
//! Sources are counted up to what the file descriptor limit allows (the soft
//! limit is raised to the hard one first); timers, Deferreds, ready callbacks
//! and Remote calls from 10,000 to 1,000,000.

mod common;

use common::{full_run, record_value, target_at_most, Better};
use deferloop::net::{Protocol, Transport};
use deferloop::{Deferred, EventLoop, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::os::unix::io::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

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
                let total = (r.run)(n);
                samples[i][j].push(total / n as f64);
            }
        }
    }
    println!("\n### {title}\n");
    println!(
        "{unit} per item, median of {} samples (min–max below it).\n",
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

fn timed(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_nanos() as f64
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
    tcp(&ev, limit);
    tcp_tokio(&rt, limit);

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
    // run. Timed in two parts, summed: the sender's n calls, on its own
    // thread, then the loop's run of them. Neither the thread's start nor
    // its end is timed, for either contender: at n = 10,000 a spawn and join
    // on a loaded machine (milliseconds of waiting for a core) outweighed
    // the calls themselves (to 2026-12-06 they were timed).
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

/// Runs `send` on a new thread and returns its nanoseconds, timed there:
/// the thread's start and end are left out.
fn sender(send: impl FnOnce() + Send + 'static) -> f64 {
    std::thread::spawn(move || timed(send)).join().unwrap()
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

struct Idle {
    made: Rc<Cell<u64>>,
    lost: Rc<Cell<u64>>,
    transports: Rc<RefCell<Vec<Transport>>>,
}

impl Protocol for Idle {
    fn connection_made(&mut self, t: &Transport) {
        self.made.set(self.made.get() + 1);
        self.transports.borrow_mut().push(t.clone());
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
        self.lost.set(self.lost.get() + 1);
    }
}

/// Runs once a turn until `done`, keeping in `longest` the longest gap
/// between two runs (the longest turn), in nanoseconds.
fn watch_turns(
    lp: &Loop,
    longest: Rc<Cell<u64>>,
    last: Rc<Cell<Option<Instant>>>,
    done: Rc<Cell<bool>>,
) {
    if done.get() {
        return;
    }
    let now = Instant::now();
    if let Some(t) = last.get() {
        longest.set(longest.get().max((now - t).as_nanos() as u64));
    }
    last.set(Some(now));
    let _ = lp.call_soon(move |lp| watch_turns(lp, longest, last, done));
}

/// Real TCP connections on 127.0.0.1, the clients in this process (2 fds
/// per connection): accept n, idle memory per connection, then the peers
/// close all at once (with the loop's longest turn), and a server-side abort
/// of all n.
/// The connection counts of both TCP tables: up to 10,000, within the fd
/// limit (2 fds per connection, both ends in this process).
fn tcp_ns(limit: u64) -> Vec<u64> {
    let most = (limit.saturating_sub(300) / 2).min(10_000);
    if full_run() {
        [1_000, 2_000, 5_000, most]
            .into_iter()
            .filter(|n| *n <= most)
            .collect()
    } else {
        vec![10, 20]
    }
}

/// Prints, for each per-connection cost, its growth from the smallest n to
/// the largest (the largest of its values over the smallest) as a target.
fn tcp_flat(who: &str, ns: &[u64], costs: &[(&str, &Vec<f64>)]) {
    for (name, m) in costs {
        let max = m.iter().cloned().fold(f64::MIN, f64::max);
        let min = m.iter().cloned().fold(f64::MAX, f64::min);
        target_at_most(
            &format!(
                "{who}: TCP {name} per connection flat within 1.5x from n = {} to n = {}",
                ns[0],
                ns[ns.len() - 1]
            ),
            max,
            min,
            1.5,
        );
    }
}

fn tcp(ev: &EventLoop, limit: u64) {
    if !selected("TCP connections on 127.0.0.1 (deferloop)") {
        return;
    }
    let ns = tcp_ns(limit);
    println!("\n### TCP connections on 127.0.0.1 (deferloop)\n");
    println!("One sample per n; the clients are blocking sockets on another thread.\n");
    println!("Idle memory: the heap bytes in use (mallinfo2), and the growth of the");
    println!("resident set (statm), per connection once all n are up; the RSS column");
    println!("is 0 where memory freed by a smaller n was reused.\n");
    println!("| n | accept ns/conn | idle heap bytes/conn | idle RSS bytes/conn | peer close ns/conn | longest turn during the peers' close µs | abort ns/conn |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut accept = Vec::new();
    let mut heaps = Vec::new();
    let mut close = Vec::new();
    let mut abort = Vec::new();
    for &n in &ns {
        for peer_closes in [true, false] {
            let made = Rc::new(Cell::new(0));
            let lost = Rc::new(Cell::new(0));
            let transports = Rc::new(RefCell::new(Vec::new()));
            let (m2, l2, t2) = (made.clone(), lost.clone(), transports.clone());
            let listener = ev
                .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Idle {
                    made: m2.clone(),
                    lost: l2.clone(),
                    transports: t2.clone(),
                })
                .unwrap();
            let addr = listener.local_addr().as_inet().unwrap();
            let rss0 = rss();
            let heap0 = heap_in_use();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let t0 = Instant::now();
            let client = std::thread::spawn(move || {
                let conns: Vec<_> = (0..n)
                    .map(|_| std::net::TcpStream::connect(addr).unwrap())
                    .collect();
                let _ = go_rx.recv();
                drop(conns);
            });
            let stop_at = |lp: &Loop, c: &Rc<Cell<u64>>| {
                let (lp2, c) = (lp.clone(), c.clone());
                let _ = lp.call_soon(move |_| {
                    fn again(lp: Loop, c: Rc<Cell<u64>>, n: u64) {
                        if c.get() >= n {
                            lp.stop();
                        } else {
                            let lp2 = lp.clone();
                            let _ = lp
                                .call_later(Duration::from_micros(200), move |_| again(lp2, c, n));
                        }
                    }
                    again(lp2, c, n)
                });
            };
            stop_at(ev, &made);
            ev.run().unwrap();
            let acc = t0.elapsed().as_nanos() as f64 / n as f64;
            let per_conn = rss().saturating_sub(rss0) as f64 / n as f64;
            let heap = heap_in_use().saturating_sub(heap0) as f64 / n as f64;
            listener.stop_listening().detach();
            if peer_closes {
                let longest = Rc::new(Cell::new(0));
                let last = Rc::new(Cell::new(None));
                let done = Rc::new(Cell::new(false));
                let (l2, la2, d2) = (longest.clone(), last.clone(), done.clone());
                ev.call_soon(move |lp| watch_turns(lp, l2, la2, d2))
                    .unwrap();
                let t1 = Instant::now();
                go_tx.send(()).unwrap();
                let lost2 = lost.clone();
                let lp = ev.to_loop();
                fn wait(lp: Loop, lost: Rc<Cell<u64>>, n: u64, t1: Instant, out: Rc<Cell<f64>>) {
                    if lost.get() >= n {
                        out.set(t1.elapsed().as_nanos() as f64);
                        lp.stop();
                    } else {
                        let lp2 = lp.clone();
                        let _ = lp.call_soon(move |_| wait(lp2, lost, n, t1, out));
                    }
                }
                let out = Rc::new(Cell::new(0.0));
                let o2 = out.clone();
                ev.call_soon(move |_| wait(lp, lost2, n, t1, o2)).unwrap();
                ev.run().unwrap();
                done.set(true);
                let per = out.get() / n as f64;
                client.join().unwrap();
                accept.push(acc);
                heaps.push(heap);
                close.push(per);
                print!(
                    "| {n} | {acc:.0} | {heap:.0} | {per_conn:.0} | {per:.0} | {:.0} |",
                    longest.get() as f64 / 1000.0
                );
                record_value(
                    "TCP accept",
                    "deferloop",
                    "ns/conn",
                    Better::Lower,
                    acc,
                    acc,
                    acc,
                );
                record_value(
                    "TCP idle heap",
                    "deferloop",
                    "bytes/conn",
                    Better::Lower,
                    heap,
                    heap,
                    heap,
                );
                record_value(
                    "TCP idle RSS",
                    "deferloop",
                    "bytes/conn",
                    Better::Lower,
                    per_conn,
                    per_conn,
                    per_conn,
                );
                record_value(
                    "TCP peer close",
                    "deferloop",
                    "ns/conn",
                    Better::Lower,
                    per,
                    per,
                    per,
                );
            } else {
                let t1 = Instant::now();
                for t in transports.borrow_mut().drain(..) {
                    t.abort();
                }
                stop_at(ev, &lost);
                ev.run().unwrap();
                let per = t1.elapsed().as_nanos() as f64 / n as f64;
                abort.push(per);
                println!(" {per:.0} |");
                record_value(
                    "TCP abort all",
                    "deferloop",
                    "ns/conn",
                    Better::Lower,
                    per,
                    per,
                    per,
                );
                go_tx.send(()).unwrap();
                client.join().unwrap();
            }
            transports.borrow_mut().clear();
        }
    }
    tcp_flat(
        "deferloop",
        &ns,
        &[
            ("accept", &accept),
            ("idle heap", &heaps),
            ("peer close", &close),
            ("abort", &abort),
        ],
    );
}

/// One row for a value measured once per n (min = median = max).
fn record_once(section: &str, who: &str, unit: &str, v: f64) {
    record_value(section, who, unit, Better::Lower, v, v, v);
}

/// The tokio side of [`tcp`], the same steps on a current-thread runtime: a
/// task per accepted connection reading into a 1 KiB buffer (tokio's
/// examples' size) until the peer closes, and an abort of every task (its
/// socket closed as it is dropped). The longest turn is the longest gap
/// between two polls of a task that yields each time it runs. Each wait is
/// bounded: a stall fails the bench rather than hanging it.
fn tcp_tokio(rt: &tokio::runtime::Runtime, limit: u64) {
    if !selected("TCP connections on 127.0.0.1 (tokio)") {
        return;
    }
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;

    /// Counts a connection's task out when it ends or is aborted.
    struct Gone(Arc<AtomicU64>);
    impl Drop for Gone {
        fn drop(&mut self) {
            self.0.fetch_add(1, Relaxed);
        }
    }
    /// Yields until `c` reaches `n`, for at most a minute.
    async fn until(c: &AtomicU64, n: u64, what: &str) {
        let t = Instant::now();
        while c.load(Relaxed) < n {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "tokio: {what} stalled"
            );
            tokio::task::yield_now().await;
        }
    }

    let ns = tcp_ns(limit);
    println!("\n### TCP connections on 127.0.0.1 (tokio)\n");
    println!("The same steps and n as the deferloop table above, on tokio's current-thread");
    println!("runtime: a task per connection, reading into a 1 KiB buffer until the peer");
    println!("closes; the abort aborts every task. The longest turn is the longest gap");
    println!("between two polls of a task that yields each time.\n");
    println!("| n | accept ns/conn | idle heap bytes/conn | idle RSS bytes/conn | peer close ns/conn | longest turn during the peers' close µs | abort ns/conn |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let (mut accept, mut heaps, mut close, mut abort) = (vec![], vec![], vec![], vec![]);
    for &n in &ns {
        for peer_closes in [true, false] {
            let made = Arc::new(AtomicU64::new(0));
            let lost = Arc::new(AtomicU64::new(0));
            // The listen backlog deferloop's listener uses (tokio's `bind`
            // takes 1,024): a backlog that overflows costs a handshake a
            // SYN-ACK retransmission, a second.
            let listener = {
                let _g = rt.enter();
                let sock = tokio::net::TcpSocket::new_v4().unwrap();
                sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
                sock.listen(deferloop::net::Limits::DEFAULT.backlog as u32)
                    .unwrap()
            };
            let addr = listener.local_addr().unwrap();
            let rss0 = rss();
            let heap0 = heap_in_use();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let t0 = Instant::now();
            let client = std::thread::spawn(move || {
                let conns: Vec<_> = (0..n)
                    .map(|_| std::net::TcpStream::connect(addr).unwrap())
                    .collect();
                let _ = go_rx.recv();
                drop(conns);
            });
            let tasks = rt.block_on(async {
                let mut tasks = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let (made, gone) = (made.clone(), Gone(lost.clone()));
                    tasks.push(tokio::spawn(async move {
                        let _gone = gone;
                        made.fetch_add(1, Relaxed);
                        let mut buf = [0u8; 1024];
                        while let Ok(1..) = s.read(&mut buf).await {}
                    }));
                }
                until(&made, n, "accept").await;
                tasks
            });
            let acc = t0.elapsed().as_nanos() as f64 / n as f64;
            let per_conn = rss().saturating_sub(rss0) as f64 / n as f64;
            let heap = heap_in_use().saturating_sub(heap0) as f64 / n as f64;
            drop(listener);
            if peer_closes {
                let longest = Arc::new(AtomicU64::new(0));
                let t1 = Instant::now();
                go_tx.send(()).unwrap();
                let per = rt.block_on(async {
                    let l2 = longest.clone();
                    let watch = tokio::spawn(async move {
                        let mut last = Instant::now();
                        loop {
                            tokio::task::yield_now().await;
                            let now = Instant::now();
                            l2.fetch_max((now - last).as_nanos() as u64, Relaxed);
                            last = now;
                        }
                    });
                    until(&lost, n, "peer close").await;
                    let per = t1.elapsed().as_nanos() as f64 / n as f64;
                    watch.abort();
                    per
                });
                client.join().unwrap();
                accept.push(acc);
                heaps.push(heap);
                close.push(per);
                print!(
                    "| {n} | {acc:.0} | {heap:.0} | {per_conn:.0} | {per:.0} | {:.0} |",
                    longest.load(Relaxed) as f64 / 1000.0
                );
                record_once("TCP accept", "tokio", "ns/conn", acc);
                record_once("TCP idle heap", "tokio", "bytes/conn", heap);
                record_once("TCP idle RSS", "tokio", "bytes/conn", per_conn);
                record_once("TCP peer close", "tokio", "ns/conn", per);
            } else {
                let t1 = Instant::now();
                for t in &tasks {
                    t.abort();
                }
                rt.block_on(until(&lost, n, "abort"));
                let per = t1.elapsed().as_nanos() as f64 / n as f64;
                abort.push(per);
                println!(" {per:.0} |");
                record_once("TCP abort all", "tokio", "ns/conn", per);
                go_tx.send(()).unwrap();
                client.join().unwrap();
            }
        }
    }
    tcp_flat(
        "tokio",
        &ns,
        &[
            ("accept", &accept),
            ("idle heap", &heaps),
            ("peer close", &close),
            ("abort", &abort),
        ],
    );
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
