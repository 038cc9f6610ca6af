//! Memory after a burst, read from /proc/self/statm before, at the end of
//! the burst, and after the loop has turned while idle (turns, not a
//! wall-clock wait): 1,000 TCP connections that each echo 1 MB, and a
//! burst held in the loop's own write buffers (the in-memory transport).
#![cfg(target_os = "linux")]

mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::EventLoop;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const CONNS: usize = 1000;
const EACH: usize = 1 << 20;
/// The resident set the process may hold once idle after the burst.
const BOUND_KIB: u64 = 32 << 10;

struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page / 1024
}

/// Every connection sends 1 MB and reads it back, all at once, in rounds
/// on one thread (so the clients' own memory is a few buffers).
fn clients(addr: std::net::SocketAddr, done: Arc<AtomicBool>) -> Vec<TcpStream> {
    let conns: Vec<TcpStream> = (0..CONNS)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let chunk = vec![7u8; 64 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    let mut sent = vec![0usize; CONNS];
    let mut got = vec![0usize; CONNS];
    while got.iter().any(|g| *g < EACH) {
        for (i, mut s) in conns.iter().enumerate() {
            while sent[i] < EACH {
                let n = chunk.len().min(EACH - sent[i]);
                match s.write(&chunk[..n]) {
                    Ok(k) => sent[i] += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            loop {
                match s.read(&mut buf) {
                    Ok(0) => panic!("the server closed"),
                    Ok(k) => got[i] += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    done.store(true, Ordering::Release);
    conns
}

/// The tests measure the whole process: one at a time.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// One turn that never blocks for long: a timer bounds the wait.
fn turn(ev: &EventLoop) {
    let _ = ev.call_later(Duration::from_millis(5), |_| {});
    ev.run_once().unwrap();
}

#[test]
fn rss_after_a_1_mb_echo_burst_of_1000_connections_then_idle() {
    let _alone = alone();
    util::raise_fd_limit(4096);
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || Echo)
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    // A first connection warms the thread's buffers up.
    turn(&ev);
    let before = rss_kib();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let client = std::thread::spawn(move || clients(addr, d));
    while !done.load(Ordering::Acquire) {
        turn(&ev);
    }
    let conns = client.join().unwrap();
    let burst = rss_kib();
    // Idle: the loop turns with nothing to do (each turn waits at most 5 ms
    // for a timer); the connections are quiet.
    for _ in 0..200 {
        turn(&ev);
    }
    let idle = rss_kib();
    println!("RSS {before} KiB before, {burst} KiB after the burst, {idle} KiB idle after it");
    assert!(idle <= BOUND_KIB, "RSS {before} -> {burst} -> {idle} KiB");
    drop(conns);
}

/// The loop's own buffers after a burst, with the in-memory transport (so
/// nothing but the library's memory is measured): 1,000 connections each
/// buffer 1 MB their peer does not take yet, then the peers take it all and
/// the connections go quiet. The write buffers are freed; glibc's malloc
/// kept their pages resident (its mmap threshold rises past the first
/// large frees, so later buffers come from the heap), until the loop
/// trimmed the heap on its next wait after a burst's frees.
#[test]
fn the_loop_gives_a_burst_s_freed_write_buffers_back() {
    use deferloop::net::memory;
    let _alone = alone();
    struct Quiet;
    impl Protocol for Quiet {
        fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    }
    let ev = EventLoop::new().unwrap();
    turn(&ev);
    let before = rss_kib();
    let data = vec![7u8; EACH];
    let conns: Vec<_> = (0..CONNS / 4)
        .map(|_| memory::open(&ev, Quiet).unwrap())
        .collect();
    // Two bursts: past the first one's frees glibc's mmap threshold has
    // risen, and the second one's buffers come from the heap.
    let mut held = 0;
    for _ in 0..2 {
        for (t, peer) in &conns {
            peer.set_room(Some(0));
            t.write(&data);
        }
        turn(&ev);
        held = held.max(rss_kib());
        for (_, peer) in &conns {
            peer.set_room(None);
        }
        // The peers take everything; the connections go quiet.
        for _ in 0..20 {
            turn(&ev);
            for (_, peer) in &conns {
                drop(peer.take_written());
            }
        }
    }
    let idle = rss_kib();
    println!(
        "RSS {before} KiB before, {held} KiB with 250 MB buffered, {idle} KiB once taken and quiet"
    );
    assert!(held > before + (200 << 10), "the buffers were not held");
    assert!(idle <= BOUND_KIB, "RSS {before} -> {held} -> {idle} KiB");
    drop(conns);
}
