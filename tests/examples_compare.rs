//! The side-by-side twins of examples/compare/ behave the same: each pair is
//! compiled in here and run against the same peers.

// Each fan-out twin embeds the shared fake backends.
#![allow(clippy::duplicate_mod)]

mod util;

#[path = "../examples/compare/echo_deferloop.rs"]
#[allow(dead_code)]
mod echo_deferloop;
#[path = "../examples/compare/echo_tokio.rs"]
#[allow(dead_code)]
mod echo_tokio;
#[path = "../examples/compare/fan_out_deferloop.rs"]
#[allow(dead_code)]
mod fan_out_deferloop;
#[path = "../examples/compare/fan_out_tokio.rs"]
#[allow(dead_code)]
mod fan_out_tokio;
#[path = "../examples/compare/proxy_deferloop.rs"]
#[allow(dead_code)]
mod proxy_deferloop;
#[path = "../examples/compare/proxy_tokio.rs"]
#[allow(dead_code)]
mod proxy_tokio;

#[path = "../examples/compare/http_client_deferloop.rs"]
#[allow(dead_code)]
mod http_client_deferloop;
#[path = "../examples/compare/http_client_tokio.rs"]
#[allow(dead_code)]
mod http_client_tokio;
#[path = "../examples/compare/pubsub_deferloop.rs"]
#[allow(dead_code)]
mod pubsub_deferloop;
#[path = "../examples/compare/pubsub_tokio.rs"]
#[allow(dead_code)]
mod pubsub_tokio;

#[path = "../examples/compare/transaction_deferloop.rs"]
#[allow(dead_code)]
mod transaction_deferloop;
#[path = "../examples/compare/transaction_tokio.rs"]
#[allow(dead_code)]
mod transaction_tokio;

#[path = "../examples/compare/crawler_deferloop.rs"]
#[allow(dead_code)]
mod crawler_deferloop;
#[path = "../examples/compare/crawler_tokio.rs"]
#[allow(dead_code)]
mod crawler_tokio;

#[path = "../examples/compare/backends.rs"]
#[allow(dead_code)]
mod backends;
#[path = "../examples/compare/crawl_backend.rs"]
#[allow(dead_code)]
mod crawl_backend;
#[path = "../examples/compare/http_backend.rs"]
#[allow(dead_code)]
mod http_backend;
#[path = "../examples/compare/txn_backend.rs"]
#[allow(dead_code)]
mod txn_backend;

use deferloop::deferred::{FirstError, TimedOut};
use deferloop::EventLoop;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `n` bytes through `addr`, half-closes, and returns what came back.
fn round_trip(addr: SocketAddr, n: usize) -> bool {
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        back
    });
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    reader.join().unwrap() == data
}

/// Runs a tokio twin's server on its own thread; returns its address.
fn tokio_server<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let _ = serve(l).await;
        });
    });
    rx.recv().unwrap()
}

/// Runs a deferloop twin's server on its own thread; returns its address.
fn deferloop_server(
    start: impl FnOnce(&EventLoop) -> deferloop::net::Listener + Send + 'static,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ev = EventLoop::new().unwrap();
        let l = start(&ev);
        tx.send(l.local_addr().as_inet().unwrap()).unwrap();
        ev.run().unwrap();
    });
    rx.recv().unwrap()
}

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn both_echo_twins_echo_everything() {
    let d = deferloop_server(|ev| echo_deferloop::start(ev, any()).unwrap());
    let t = tokio_server(echo_tokio::serve);
    assert!(round_trip(d, 4 << 20));
    assert!(round_trip(t, 4 << 20));
}

#[test]
fn both_proxy_twins_relay_both_ways_with_half_close() {
    let echo = deferloop_server(|ev| echo_deferloop::start(ev, any()).unwrap());
    let d = deferloop_server(move |ev| proxy_deferloop::start(ev, any(), echo).unwrap());
    let t = tokio_server(move |l| proxy_tokio::serve(l, echo));
    assert!(round_trip(d, 4 << 20));
    assert!(round_trip(t, 4 << 20));
}

#[test]
fn both_fan_out_twins_agree_and_the_callbacks_close_their_losers() {
    let [(first, t1), (second, t2)] = backends::scenarios();

    let ev = EventLoop::new().unwrap();
    let win = ev
        .run_until(fan_out_deferloop::fan_out(&ev, &first, t1))
        .unwrap();
    assert_eq!(win, (1, "blue".to_owned()));
    // The slow loser's connection is aborted, not left to time out.
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);
    let f = ev
        .run_until(fan_out_deferloop::fan_out(&ev, &second, t2))
        .unwrap_err();
    assert!(f.check::<TimedOut>(), "{f}");
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let win = rt.block_on(fan_out_tokio::fan_out(&first, t1)).unwrap();
    assert_eq!(win, (1, "blue".to_owned()));
    let e = rt
        .block_on(fan_out_tokio::fan_out(&second, t2))
        .unwrap_err();
    assert!(e.starts_with("timed out"), "{e}");
}

/// Checks what one HTTP-client twin fetched from a fresh fake server.
fn check_http_client(
    fetch: impl FnOnce(SocketAddr, Vec<String>, usize) -> Vec<Result<String, String>>,
) {
    let expect = http_backend::paths();
    let paths: Vec<String> = expect.iter().map(|(p, _)| p.clone()).collect();
    let (addr, stats) = http_backend::spawn();
    let got: Vec<Option<String>> = fetch(addr, paths, 3).into_iter().map(Result::ok).collect();
    let want: Vec<Option<String>> = expect.into_iter().map(|(_, b)| b).collect();
    assert_eq!(got, want);
    let seen = |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
    // 12 good, flaky 3 times, slow twice, gone and missing 3 times each.
    assert_eq!(seen(&stats.requests), 23);
    assert!(seen(&stats.max_in_flight) <= 3, "{stats:?}");
    // Kept alive: 3 connections, plus one after each of the 9 failures.
    assert!(seen(&stats.connections) <= 12, "{stats:?}");
}

#[test]
fn both_http_client_twins_fetch_the_same_over_kept_alive_connections() {
    check_http_client(|addr, paths, n| {
        let ev = EventLoop::new().unwrap();
        let d = http_client_deferloop::fetch_all(&ev, addr, paths, n);
        let got = ev.run_until(d).unwrap();
        // Every connection is closed once the work is done.
        util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);
        got
    });
    check_http_client(|addr, paths, n| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(http_client_tokio::fetch_all(addr, paths, n))
    });
}

/// A line client of the pub/sub twins.
struct Client(BufReader<TcpStream>);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        Client(BufReader::new(TcpStream::connect(addr).unwrap()))
    }
    fn send(&mut self, line: &str) {
        self.0.get_mut().write_all(line.as_bytes()).unwrap();
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l
    }
    fn subscribe(addr: SocketAddr) -> Client {
        let mut c = Client::connect(addr);
        c.send("SUB news\n");
        assert_eq!(c.line(), "OK\n");
        c
    }
}

/// A fast subscriber gets every message; one that never reads is dropped
/// once it is past the limit, and the server goes on.
fn check_pubsub(addr: SocketAddr) {
    let mut fast = Client::subscribe(addr);
    let mut slow = Client::subscribe(addr);
    let mut publisher = Client::connect(addr);
    let body = "x".repeat(1000);
    let batch = format!("PUB news {body}\n").repeat(100);
    let (mut got, batches) = (0, 200); // 20 MB: past any kernel buffers
    for b in 0..batches {
        publisher.send(&batch);
        publisher.send(&format!("PUB news sync{b}\n"));
        loop {
            let l = fast.line();
            if l == format!("news sync{b}\n") {
                break;
            }
            assert_eq!(l.len(), 1006, "{l:?}");
            got += 1;
        }
    }
    assert_eq!(got, 100 * batches);
    // The slow one was dropped: its stream ends (after what was buffered).
    slow.0
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    match slow.0.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        rest.len() < 100 * batches * 1006,
        "the slow one got {}",
        rest.len()
    );
    // The server goes on: a new subscriber gets the next message too.
    let mut late = Client::subscribe(addr);
    publisher.send("PUB news last\n");
    assert_eq!(late.line(), "news last\n");
    assert_eq!(fast.line(), "news last\n");
}

#[test]
fn both_pubsub_twins_deliver_to_the_fast_and_drop_the_slow() {
    let d = deferloop_server(|ev| pubsub_deferloop::start(ev, any()).unwrap());
    check_pubsub(d);
    let t = tokio_server(pubsub_tokio::serve);
    check_pubsub(t);
}

/// A transaction twin: the attempts it took, or its failure's text.
type Transact = fn(SocketAddr, &str) -> Result<u32, String>;

fn transact_deferloop(addr: SocketAddr, token: &str) -> Result<u32, String> {
    let ev = EventLoop::new().unwrap();
    let d = transaction_deferloop::transact(&ev, addr, token, txn_backend::writes());
    let r = ev.run_until(d);
    // Its connections are closed, and no timer is left behind.
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);
    assert_eq!(ev.timer_count(), 0);
    r.map_err(|f| {
        let e = f.downcast_ref::<transaction_deferloop::StepFailed>();
        e.expect("a step's failure").to_string()
    })
}

fn transact_tokio(addr: SocketAddr, token: &str) -> Result<u32, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(transaction_tokio::transact(
        addr,
        token,
        txn_backend::writes(),
    ));
    r.map_err(|e| e.to_string())
}

/// Runs both transaction twins, each against a fresh server following
/// `script`: they end alike, the server reads the same lines from both, and
/// each closes its connections. Returns the outcome and the lines.
fn check_transaction(
    script: txn_backend::Script,
    token: &str,
) -> (Result<u32, String>, Vec<String>) {
    let mut runs = Vec::new();
    for twin in [transact_deferloop as Transact, transact_tokio] {
        let (addr, seen) = txn_backend::spawn(script);
        // The timeouts' wording differs by library ("Deferred timed out
        // after 200ms" against "timed out after 200ms"); the rest is equal.
        let r = twin(addr, token).map_err(|e| e.replace("Deferred timed out", "timed out"));
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while seen.open.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "a connection left open"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        runs.push((r, seen.lines.lock().unwrap().clone()));
    }
    assert_eq!(runs[0], runs[1], "the twins differ");
    runs.pop().unwrap()
}

fn txn_script() -> txn_backend::Script {
    txn_backend::Script {
        token: "secret",
        conflicts: 0,
        hang_on: None,
    }
}

#[test]
fn both_transaction_twins_commit_every_write_in_order() {
    let (r, lines) = check_transaction(txn_script(), "secret");
    assert_eq!(r, Ok(1));
    let want = [
        "AUTH secret",
        "BEGIN",
        "SET k0 v0",
        "SET k1 v1",
        "SET k2 v2",
        "SET k3 v3",
        "COMMIT",
    ];
    let want: Vec<String> = want.iter().map(|l| format!("0 {l}")).collect();
    assert_eq!(lines, want);
}

#[test]
fn both_transaction_twins_retry_the_whole_transaction_after_a_conflict() {
    let script = txn_backend::Script {
        conflicts: 1,
        ..txn_script()
    };
    let (r, lines) = check_transaction(script, "secret");
    assert_eq!(r, Ok(2));
    // Two whole transactions, each on its own connection.
    assert_eq!(lines.len(), 14, "{lines:?}");
    assert_eq!(lines[7], "1 AUTH secret");
    assert_eq!(lines[13], "1 COMMIT");
    // Conflicts every time: three attempts, then the conflict is the failure.
    let script = txn_backend::Script {
        conflicts: 5,
        ..txn_script()
    };
    let (r, lines) = check_transaction(script, "secret");
    assert_eq!(r, Err("commit: CONFLICT".into()));
    assert_eq!(lines.len(), 21, "{lines:?}");
}

#[test]
fn both_transaction_twins_abort_at_a_step_that_never_answers_and_name_it() {
    let script = txn_backend::Script {
        hang_on: Some("SET"),
        ..txn_script()
    };
    let (r, lines) = check_transaction(script, "secret");
    assert_eq!(r, Err("write 0: timed out after 200ms".into()));
    // Aborted, not retried: the first write was the last line sent.
    assert_eq!(lines, ["0 AUTH secret", "0 BEGIN", "0 SET k0 v0"]);
}

#[test]
fn both_transaction_twins_name_the_step_a_wrong_token_fails() {
    let (r, lines) = check_transaction(txn_script(), "wrong");
    assert_eq!(r, Err("auth: ERR bad token".into()));
    assert_eq!(lines, ["0 AUTH wrong"]);
}

/// What a crawler twin ends with: the pages, or why it gave up (`timed
/// out` or the fatal page's error).
type Pages = Result<Vec<Result<String, String>>, String>;

/// A crawler twin.
type Crawl = fn(SocketAddr, Vec<String>, usize, Duration) -> Pages;

fn crawl_deferloop(
    addr: SocketAddr,
    paths: Vec<String>,
    limit: usize,
    deadline: Duration,
) -> Pages {
    let ev = EventLoop::new().unwrap();
    let r = ev.run_until(crawler_deferloop::crawl(&ev, addr, paths, limit, deadline));
    // Every connection is closed and the deadline's timer is gone.
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);
    assert_eq!(ev.timer_count(), 0);
    r.map_err(|f| match f.downcast_ref::<FirstError>() {
        Some(first) => first.failure.to_string(),
        None if f.check::<TimedOut>() => "timed out".into(),
        None => panic!("{f}"),
    })
}

fn crawl_tokio(addr: SocketAddr, paths: Vec<String>, limit: usize, deadline: Duration) -> Pages {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(crawler_tokio::crawl(addr, paths, limit, deadline));
    r.map_err(|e| {
        if e.starts_with("timed out") {
            "timed out".into()
        } else {
            e
        }
    })
}

/// Runs both crawler twins against fresh servers: they end alike, the
/// server is asked the same paths, at most `limit` at once, and every
/// connection is closed soon after the crawl ends — long before a slow
/// page would have answered. Returns the outcome and the paths asked for,
/// sorted.
fn check_crawl(paths: &[&str], limit: usize, deadline: Duration) -> (Pages, Vec<String>) {
    let mut runs = Vec::new();
    for twin in [crawl_deferloop as Crawl, crawl_tokio] {
        let (addr, seen) = crawl_backend::spawn();
        let t0 = std::time::Instant::now();
        let paths = paths.iter().map(|p| p.to_string()).collect();
        let r = twin(addr, paths, limit, deadline);
        let load = |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
        while load(&seen.open) > 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "a connection left open: {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(load(&seen.max_in_flight) <= limit, "{seen:?}");
        let mut asked = seen.paths.lock().unwrap().clone();
        asked.sort(); // they arrive in any order, up to `limit` at once
        runs.push((r, asked));
    }
    assert_eq!(runs[0], runs[1], "the twins differ");
    runs.pop().unwrap()
}

#[test]
fn both_crawler_twins_fetch_every_page_in_order_k_at_a_time() {
    let paths = [
        "/page/0", "/page/1", "/nowhere", "/page/3", "/page/4", "/page/5", "/page/6",
    ];
    let (r, asked) = check_crawl(&paths, 3, Duration::from_secs(5));
    let mut want: Vec<Result<String, String>> = (0..7).map(|i| Ok(i.to_string())).collect();
    want[2] = Err("/nowhere: missing".into());
    assert_eq!(r, Ok(want));
    assert_eq!(asked.len(), 7);
}

#[test]
fn both_crawler_twins_cancel_what_is_in_flight_at_the_first_fatal_page() {
    // Two slow pages are in flight when the fatal one comes back.
    let paths = [
        "/slow/a", "/slow/b", "/page/0", "/fatal", "/page/1", "/page/2",
    ];
    let (r, asked) = check_crawl(&paths, 3, Duration::from_secs(5));
    assert_eq!(r, Err("/fatal: disk on fire".into()));
    // Nothing was started after it.
    assert_eq!(asked, ["/fatal", "/page/0", "/slow/a", "/slow/b"]);
}

#[test]
fn both_crawler_twins_give_up_at_the_deadline_and_close_what_is_in_flight() {
    let paths = ["/slow/a", "/slow/b", "/slow/c"];
    let (r, asked) = check_crawl(&paths, 2, Duration::from_millis(300));
    assert_eq!(r, Err("timed out".into()));
    assert_eq!(asked.len(), 2);
}
