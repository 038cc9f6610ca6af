//! Real TCP connections on 127.0.0.1, the clients in this process (2 fds per
//! connection, both ends here): accept n, idle memory per connection, then
//! the peers close all at once (with the loop's longest turn), and a
//! server-side abort of all n — deferloop and tokio in the same rounds
//! (A B A B …), each cell the median of its rounds with the range below it.

use crate::common::{full_run, record_value, target_at_most, Better};
use crate::{cpu_ns, heap_in_use, median, rounds, rss};
use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure, Loop};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// One contender's round at one n, in three parts that each accept n
/// connections (so a round gives three accept samples): the peers close all
/// (its CPU time), the peers close all again while a callback that runs every
/// turn measures the longest turn (its spinning would count as CPU time, so
/// it has a part of its own), and a server-side abort of all (its CPU time).
#[derive(Clone, Copy, Default)]
struct Sample {
    accept: [f64; 3],
    heap: f64,
    rss: f64,
    close: f64,
    longest_us: f64,
    abort: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Close,
    Watch,
    Abort,
}

const PARTS: [Part; 3] = [Part::Close, Part::Watch, Part::Abort];

/// The connection counts: up to 10,000, within the fd limit.
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

/// Both TCP tables, their rounds interleaved.
pub fn tcp(ev: &EventLoop, rt: &tokio::runtime::Runtime, limit: u64) {
    if !crate::selected("TCP connections on 127.0.0.1") {
        return;
    }
    let ns = tcp_ns(limit);
    let mut ours = vec![Vec::new(); ns.len()];
    let mut theirs = vec![Vec::new(); ns.len()];
    for _ in 0..rounds() {
        for (j, &n) in ns.iter().enumerate() {
            ours[j].push(deferloop_round(ev, n));
            theirs[j].push(tokio_round(rt, n));
        }
    }
    println!("\n### TCP connections on 127.0.0.1 (deferloop)\n");
    println!("The clients are blocking sockets on another thread.\n");
    println!("Idle memory: the heap bytes in use (mallinfo2), and the growth of the");
    println!("resident set (statm), per connection once all n are up; both contenders idle");
    println!("600 ms before each reading (what a burst held in flight is not counted). The RSS column is");
    println!("the first round's (later rounds reuse what the first freed), and 0 where");
    println!("memory freed by a smaller n was reused.\n");
    table("deferloop", &ns, &ours);
    println!("\n### TCP connections on 127.0.0.1 (tokio)\n");
    println!("The same steps and n as the deferloop table above, in the same rounds, on");
    println!("tokio's current-thread runtime: a task per connection, reading into a 1 KiB");
    println!("buffer until the peer closes; the abort aborts every task. The longest turn");
    println!("is the longest gap between two polls of a task that yields each time.\n");
    table("tokio", &ns, &theirs);
}

/// Prints one contender's table (medians, then ranges), records every cell,
/// and prints each per-connection cost's growth from the smallest n to the
/// largest (the largest median over the smallest) as a target.
fn table(who: &str, ns: &[u64], samples: &[Vec<Sample>]) {
    /// Which samples a column reads, and whether it is a per-connection
    /// cost that should stay flat as n grows.
    #[derive(PartialEq)]
    enum Kind {
        Cost,
        /// Only the first round's (later rounds reuse what it freed).
        FirstRound,
        /// A latency, not a cost per connection.
        Latency,
    }
    type Column = (&'static str, &'static str, Kind, fn(&Sample) -> Vec<f64>);
    let columns: [Column; 6] = [
        ("TCP accept", "CPU ns/conn", Kind::Cost, |s| {
            s.accept.to_vec()
        }),
        ("TCP idle heap", "bytes/conn", Kind::Cost, |s| vec![s.heap]),
        ("TCP idle RSS", "bytes/conn", Kind::FirstRound, |s| {
            vec![s.rss]
        }),
        ("TCP peer close", "CPU ns/conn", Kind::Cost, |s| {
            vec![s.close]
        }),
        (
            "TCP longest turn in the peers' close",
            "µs",
            Kind::Latency,
            |s| vec![s.longest_us],
        ),
        ("TCP abort all", "CPU ns/conn", Kind::Cost, |s| {
            vec![s.abort]
        }),
    ];
    println!(
        "CPU time of the process (both ends' threads) per connection, and the wall-clock longest turn;\nmedian of {} rounds per n (accept: of the three parts of each round); the range under it.\n",
        rounds()
    );
    println!("| n | accept CPU ns/conn | idle heap bytes/conn | idle RSS bytes/conn | peer close CPU ns/conn | longest turn during the peers' close µs | abort CPU ns/conn |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut medians = vec![Vec::new(); columns.len()];
    for (j, &n) in ns.iter().enumerate() {
        let mut cells = Vec::new();
        let mut ranges = Vec::new();
        for (c, (section, unit, kind, get)) in columns.iter().enumerate() {
            let mut values: Vec<f64> = if *kind == Kind::FirstRound {
                get(&samples[j][0])
            } else {
                samples[j].iter().flat_map(get).collect()
            };
            let (m, lo, hi) = median(&mut values);
            record_value(section, who, unit, Better::Lower, m, lo, hi);
            cells.push(format!("{m:.0}"));
            ranges.push(format!("{lo:.0}–{hi:.0}"));
            medians[c].push(m);
        }
        println!("| {n} | {} |", cells.join(" | "));
        println!("| (range) | {} |", ranges.join(" | "));
    }
    println!();
    for (c, (section, _, kind, _)) in columns.iter().enumerate() {
        if *kind != Kind::Cost {
            continue;
        }
        let m = &medians[c];
        let max = m.iter().cloned().fold(f64::MIN, f64::max);
        let min = m.iter().cloned().fold(f64::MAX, f64::min);
        let name = section.trim_start_matches("TCP ").trim_end_matches(" all");
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

/// How long both contenders idle before the baseline of their memory is
/// read, and again once all n are up, before it is measured: idle memory is
/// what stays, not what a burst (the last part's, or this accept) left in
/// flight. deferloop's ready queue keeps a burst's room for a few 100 ms
/// (`DECAY`) and looks once a turn, so its loop ticks meanwhile; without
/// the wait, whether that room was still held made a sample differ by
/// about 0.5 MB, whatever n.
fn settle_time() -> Duration {
    Duration::from_millis(if full_run() { 600 } else { 10 })
}

/// Runs `ev` idle for [`settle_time`], a turn at least every 20 ms.
fn settle(ev: &EventLoop) {
    let end = Instant::now() + settle_time();
    while Instant::now() < end {
        ev.run_once_timeout(Duration::from_millis(20)).unwrap();
    }
}

/// Runs `rt` idle for [`settle_time`].
fn settle_tokio(rt: &tokio::runtime::Runtime) {
    rt.block_on(async { tokio::time::sleep(settle_time()).await });
}

/// A connection that reads and drops what comes, counts itself in and out,
/// and stops the loop when the count it is waiting for reaches `n`, so the
/// loop sleeps while it waits (no polling for the count).
struct Idle {
    n: u64,
    made: Rc<Cell<u64>>,
    lost: Rc<Cell<u64>>,
    transports: Rc<RefCell<Vec<Transport>>>,
}

fn count_in(c: &Cell<u64>, n: u64, t: &Transport) {
    c.set(c.get() + 1);
    if c.get() == n {
        t.event_loop().expect("loop").stop();
    }
}

impl Protocol for Idle {
    fn connection_made(&mut self, t: &Transport) {
        self.transports.borrow_mut().push(t.clone());
        count_in(&self.made, self.n, t);
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    fn connection_lost(&mut self, t: &Transport, _: Option<Failure>) {
        count_in(&self.lost, self.n, t);
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

/// n clients connecting from another thread, closing when told.
fn clients(
    addr: std::net::SocketAddr,
    n: u64,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let conns: Vec<_> = (0..n)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let _ = go_rx.recv();
        drop(conns);
    });
    (go_tx, client)
}

fn deferloop_round(ev: &EventLoop, n: u64) -> Sample {
    let mut s = Sample::default();
    for (i, part) in PARTS.into_iter().enumerate() {
        let made = Rc::new(Cell::new(0));
        let lost = Rc::new(Cell::new(0));
        let transports = Rc::new(RefCell::new(Vec::new()));
        let (m2, l2, t2) = (made.clone(), lost.clone(), transports.clone());
        let listener = ev
            .listen_tcp("127.0.0.1:0".parse().unwrap(), move || Idle {
                n,
                made: m2.clone(),
                lost: l2.clone(),
                transports: t2.clone(),
            })
            .unwrap();
        let addr = listener.local_addr().as_inet().unwrap();
        if part == Part::Close {
            settle(ev); // what the last part's burst held is not counted
        }
        let rss0 = rss();
        let heap0 = heap_in_use();
        let c0 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
        let (go_tx, client) = clients(addr, n);
        ev.run().unwrap(); // until all n are made
        s.accept[i] = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c0) / n as f64;
        listener.stop_listening().detach();
        match part {
            Part::Close => {
                settle(ev);
                s.rss = rss().saturating_sub(rss0) as f64 / n as f64;
                s.heap = heap_in_use().saturating_sub(heap0) as f64 / n as f64;
                let c1 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
                go_tx.send(()).unwrap();
                ev.run().unwrap(); // until all n are lost
                s.close = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c1) / n as f64;
            }
            Part::Watch => {
                let longest = Rc::new(Cell::new(0));
                let last = Rc::new(Cell::new(None));
                let done = Rc::new(Cell::new(false));
                let (l2, la2, d2) = (longest.clone(), last.clone(), done.clone());
                ev.call_soon(move |lp| watch_turns(lp, l2, la2, d2))
                    .unwrap();
                go_tx.send(()).unwrap();
                ev.run().unwrap();
                done.set(true);
                s.longest_us = longest.get() as f64 / 1000.0;
            }
            Part::Abort => {
                let c1 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
                for t in transports.borrow_mut().drain(..) {
                    t.abort();
                }
                ev.run().unwrap();
                s.abort = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c1) / n as f64;
                go_tx.send(()).unwrap();
            }
        }
        assert_eq!(lost.get(), n);
        client.join().unwrap();
        transports.borrow_mut().clear();
    }
    s
}

/// The tokio side of a round, the same parts on a current-thread runtime: a
/// task per accepted connection reading into a 1 KiB buffer (tokio's
/// examples' size) until the peer closes, and an abort of every task (its
/// socket closed as it is dropped). Counts are awaited through a `Notify`,
/// so the runtime sleeps while it waits, as the loop does. The longest turn
/// is the longest gap between two polls of a task that yields each time it
/// runs. Each wait is bounded: a stall fails the bench rather than hanging it.
fn tokio_round(rt: &tokio::runtime::Runtime, n: u64) -> Sample {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    use tokio::sync::Notify;

    /// A count that wakes its waiter when it reaches `n`.
    struct Count {
        n: u64,
        c: AtomicU64,
        reached: Notify,
    }
    impl Count {
        fn new(n: u64) -> Arc<Count> {
            Arc::new(Count {
                n,
                c: AtomicU64::new(0),
                reached: Notify::new(),
            })
        }
        fn add(&self) {
            if self.c.fetch_add(1, Relaxed) + 1 == self.n {
                self.reached.notify_one();
            }
        }
        async fn until(&self, what: &str) {
            let wait = async {
                while self.c.load(Relaxed) < self.n {
                    self.reached.notified().await;
                }
            };
            tokio::time::timeout(Duration::from_secs(60), wait)
                .await
                .unwrap_or_else(|_| panic!("tokio: {what} stalled"));
        }
    }
    /// Counts a connection's task out when it ends or is aborted.
    struct Gone(Arc<Count>);
    impl Drop for Gone {
        fn drop(&mut self) {
            self.0.add();
        }
    }

    let mut s = Sample::default();
    for (i, part) in PARTS.into_iter().enumerate() {
        let made = Count::new(n);
        let lost = Count::new(n);
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
        if part == Part::Close {
            settle_tokio(rt);
        }
        let rss0 = rss();
        let heap0 = heap_in_use();
        let c0 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
        let (go_tx, client) = clients(addr, n);
        let tasks = rt.block_on(async {
            let mut tasks = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (mut s, _) = listener.accept().await.unwrap();
                let (made, gone) = (made.clone(), Gone(lost.clone()));
                tasks.push(tokio::spawn(async move {
                    let _gone = gone;
                    made.add();
                    let mut buf = [0u8; 1024];
                    while let Ok(1..) = s.read(&mut buf).await {}
                }));
            }
            made.until("accept").await;
            tasks
        });
        s.accept[i] = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c0) / n as f64;
        drop(listener);
        match part {
            Part::Close => {
                settle_tokio(rt);
                s.rss = rss().saturating_sub(rss0) as f64 / n as f64;
                s.heap = heap_in_use().saturating_sub(heap0) as f64 / n as f64;
                let c1 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
                go_tx.send(()).unwrap();
                rt.block_on(lost.until("peer close"));
                s.close = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c1) / n as f64;
            }
            Part::Watch => {
                let longest = Arc::new(AtomicU64::new(0));
                go_tx.send(()).unwrap();
                rt.block_on(async {
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
                    lost.until("peer close").await;
                    watch.abort();
                });
                s.longest_us = longest.load(Relaxed) as f64 / 1000.0;
            }
            Part::Abort => {
                let c1 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
                for t in &tasks {
                    t.abort();
                }
                rt.block_on(lost.until("abort"));
                s.abort = (cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - c1) / n as f64;
                go_tx.send(()).unwrap();
            }
        }
        client.join().unwrap();
    }
    s
}
