//! The embedding examples, run: deferloop inside tokio (examples/embed_tokio.rs)
//! and deferloop hosting another loop (examples/embed_host.rs), each serving
//! on one thread and stopped from another through a `Remote`.

#[path = "../examples/embed_host.rs"]
#[allow(dead_code)]
mod embed_host;
#[path = "../examples/embed_tokio.rs"]
#[allow(dead_code)]
mod embed_tokio;

use deferloop::Remote;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

type Served = JoinHandle<Result<(), String>>;

/// Starts `serve` on a thread of its own; returns it with what `bound` got.
fn start(
    serve: impl FnOnce(&dyn Fn(Remote, SocketAddr, SocketAddr)) -> Result<(), Box<dyn std::error::Error>>
        + Send
        + 'static,
) -> (Served, Remote, SocketAddr, SocketAddr) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        serve(&move |r, a, b| tx.send((r, a, b)).unwrap()).map_err(|e| e.to_string())
    });
    let (r, a, b) = rx.recv_timeout(Duration::from_secs(10)).expect("bound");
    (t, r, a, b)
}

fn echoes(addr: SocketAddr, n: usize) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msg: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let mut w = s.try_clone().unwrap();
    let m = msg.clone();
    let writer = std::thread::spawn(move || w.write_all(&m).unwrap());
    let mut back = vec![0; n];
    s.read_exact(&mut back).unwrap();
    writer.join().unwrap();
    assert!(back == msg, "echo differs");
}

fn stop_and_join(t: Served, remote: &Remote) {
    remote.stop().unwrap();
    let t0 = Instant::now();
    while !t.is_finished() {
        assert!(t0.elapsed() < Duration::from_secs(10), "did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
    t.join().unwrap().unwrap();
}

#[test]
fn deferloop_and_tokio_echo_servers_share_one_thread() {
    let (t, remote, ours, theirs) = start(|bound| embed_tokio::serve(any(), any(), bound));
    // Both at once, with enough bytes that both sides wait on their sockets.
    let a = std::thread::spawn(move || echoes(ours, 2_000_000));
    let b = std::thread::spawn(move || echoes(theirs, 2_000_000));
    a.join().unwrap();
    b.join().unwrap();
    // Remote calls from a third thread reach the loop through its fd.
    let (tx, rx) = mpsc::channel();
    remote
        .call_soon_threadsafe(move |lp| tx.send(lp.turn_count()).unwrap())
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap() > 0);
    let n = remote
        .call_blocking(Duration::from_secs(5), |lp| {
            deferloop::succeed(lp.io_source_count())
        })
        .unwrap();
    assert!(n >= 1, "the listener at least");
    stop_and_join(t, &remote);
}

#[test]
fn a_deferloop_hosts_another_loop_through_its_fd() {
    let (t, remote, echo, counter) = start(|bound| embed_host::serve(any(), any(), bound));
    echoes(echo, 500_000);
    let s = TcpStream::connect(counter).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut lines = BufReader::new(s.try_clone().unwrap());
    let mut ask = |w: &mut &TcpStream| -> (u64, u64) {
        w.write_all(b"x\n").unwrap();
        let mut l = String::new();
        lines.read_line(&mut l).unwrap();
        let mut it = l.split_whitespace().map(|x| x.parse::<u64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let (l1, t1) = ask(&mut &s);
    // Asked again every 100 ms until three ticks have passed, for up to 10 s
    // (one look after 300 ms could come before a loaded guest had ticked).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut asked = 1;
    let (l2, t2) = loop {
        std::thread::sleep(Duration::from_millis(100));
        asked += 1;
        let (l, t) = ask(&mut &s);
        if t >= t1 + 3 || std::time::Instant::now() > deadline {
            break (l, t);
        }
    };
    assert_eq!((l1, l2), (1, asked), "the guest's connection is served");
    assert!(
        t2 >= t1 + 3,
        "the guest's 50 ms timer fires through the host's timers: {t1} then {t2}"
    );
    // Stopping the guest (from this thread) ends the hosting and the host.
    stop_and_join(t, &remote);
}
