//! The network examples, run: each example file is compiled in here as a module
//! and its `start` is driven by real clients on loopback.

// The proxy example embeds the echo example as its default target.
#![allow(clippy::duplicate_mod)]

mod util;

#[path = "../examples/chat.rs"]
#[allow(dead_code)]
mod chat;
#[path = "../examples/echo_server.rs"]
#[allow(dead_code)]
mod echo_server;
#[path = "../examples/http_hello/main.rs"]
#[allow(dead_code)]
mod http_hello;
#[path = "../examples/proxy.rs"]
#[allow(dead_code)]
mod proxy;

use deferloop::EventLoop;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// On a client thread: sends `data` to `addr`, half-closes, and returns
/// everything read back until the server closes (reading while writing, so
/// neither side's buffers fill up).
fn send_all_and_read_back(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        back
    });
    s.write_all(data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    reader.join().unwrap()
}

/// Runs `ev` until `client` (a thread) has finished.
fn drive<T: Send + 'static>(ev: &EventLoop, client: JoinHandle<T>) -> T {
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let remote = ev.remote();
    let waiter = std::thread::spawn(move || {
        let r = client.join();
        d2.store(true, Ordering::SeqCst);
        let _ = remote.call_soon_threadsafe(|_| {});
        r
    });
    util::run_until(ev, Duration::from_secs(30), || done.load(Ordering::SeqCst));
    waiter.join().unwrap().unwrap()
}

#[test]
fn echo_server_echoes_every_byte_until_the_peer_closes() {
    let ev = EventLoop::new().unwrap();
    let addr = echo_server::start(&ev, any())
        .unwrap()
        .local_addr()
        .as_inet()
        .unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let expect = data.clone();
    let back = drive(
        &ev,
        std::thread::spawn(move || send_all_and_read_back(addr, &data)),
    );
    assert!(
        back == expect,
        "echoed {} of {} bytes",
        back.len(),
        expect.len()
    );
}

#[test]
fn chat_names_broadcasts_and_renames() {
    let ev = EventLoop::new().unwrap();
    let addr = chat::start(&ev, any())
        .unwrap()
        .local_addr()
        .as_inet()
        .unwrap();
    let transcript = drive(
        &ev,
        std::thread::spawn(move || {
            let line = |r: &mut BufReader<TcpStream>| {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                l
            };
            let mut a = TcpStream::connect(addr).unwrap();
            let mut ar = BufReader::new(a.try_clone().unwrap());
            assert_eq!(line(&mut ar), "Welcome! Your nickname?\n");
            a.write_all(b"ann\n").unwrap();
            assert_eq!(line(&mut ar), "Hello, ann!\n");
            let mut b = TcpStream::connect(addr).unwrap();
            let mut br = BufReader::new(b.try_clone().unwrap());
            line(&mut br);
            b.write_all(b"ann\r\n").unwrap();
            assert_eq!(line(&mut br), "That nickname is taken. Another?\n");
            b.write_all(b"bob\n").unwrap();
            assert_eq!(line(&mut br), "Hello, bob!\n");
            assert_eq!(line(&mut ar), "* bob joined\n");
            b.write_all(b"hi all\n/nick robert\n").unwrap();
            let mut seen = vec![line(&mut ar), line(&mut ar)];
            b.write_all(b"/quit\n").unwrap();
            seen.push(line(&mut ar));
            seen
        }),
    );
    assert_eq!(
        transcript,
        ["<bob> hi all\n", "* bob is now robert\n", "* robert left\n"]
    );
}

#[test]
fn chat_drops_a_client_that_does_not_read() {
    let ev = EventLoop::new().unwrap();
    let addr = chat::start(&ev, any())
        .unwrap()
        .local_addr()
        .as_inet()
        .unwrap();
    let dropped = drive(
        &ev,
        std::thread::spawn(move || {
            let mut slow = TcpStream::connect(addr).unwrap();
            slow.write_all(b"slow\n").unwrap();
            let mut fast = TcpStream::connect(addr).unwrap();
            let mut fr = BufReader::new(fast.try_clone().unwrap());
            let mut l = String::new();
            fr.read_line(&mut l).unwrap();
            fast.write_all(b"fast\n").unwrap();
            // 50 MiB of chat that `slow` never reads.
            let line = format!("{}\n", "x".repeat(1000));
            for _ in 0..50_000 {
                if fast.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
            // `slow` was dropped: reading it ends (after its backlog) with EOF or a reset.
            slow.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut sink = vec![0; 1 << 16];
            let mut total = 0;
            loop {
                match slow.read(&mut sink) {
                    Ok(0) => return Some(total),
                    Ok(n) => total += n,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                        return Some(total)
                    }
                    Err(_) => return None,
                }
            }
        }),
    );
    let total = dropped.expect("the slow client was disconnected");
    assert!(
        total < 20 << 20,
        "it received {total} bytes, not the 50 MiB"
    );
}

#[test]
fn proxy_relays_both_ways_with_half_close() {
    let ev = EventLoop::new().unwrap();
    let echo = echo_server::start(&ev, any()).unwrap();
    let proxy = proxy::start(&ev, any(), echo.local_addr().as_inet().unwrap()).unwrap();
    let addr = proxy.local_addr().as_inet().unwrap();
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 241) as u8).collect();
    let expect = data.clone();
    let back = drive(
        &ev,
        std::thread::spawn(move || send_all_and_read_back(addr, &data)),
    );
    assert!(
        back == expect,
        "relayed {} of {} bytes",
        back.len(),
        expect.len()
    );
}

#[test]
fn proxy_pauses_the_client_while_the_target_does_not_read() {
    let ev = EventLoop::new().unwrap();
    // A target that accepts and never reads (a std listener nobody serves).
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = proxy::start(&ev, any(), target.local_addr().unwrap()).unwrap();
    let addr = proxy.local_addr().as_inet().unwrap();
    let sent = drive(
        &ev,
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let chunk = vec![0u8; 1 << 16];
            let mut sent = 0usize;
            while s.write_all(&chunk).is_ok() && sent < 256 << 20 {
                sent += chunk.len();
            }
            sent
        }),
    );
    // Kernel buffers on both legs plus the proxy's own high-water mark and
    // one read budget: a few MiB at most, never the 256 MiB offered.
    assert!(sent < 64 << 20, "the client got {sent} bytes in");
    drop(target);
}

#[test]
fn http_hello_keeps_alive_pipelines_and_closes_on_request() {
    let ev = EventLoop::new().unwrap();
    let addr = http_hello::start(&ev, any())
        .unwrap()
        .local_addr()
        .as_inet()
        .unwrap();
    let reply = drive(
        &ev,
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
            // Two pipelined requests in one write, a third split in two, then close.
            s.write_all(format!("{get}{get}").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"st: x\r\nConnection: close\r\n\r\n").unwrap();
            let mut all = String::new();
            s.read_to_string(&mut all).unwrap();
            all
        }),
    );
    assert_eq!(reply.matches("HTTP/1.1 200 OK").count(), 3, "{reply}");
    assert_eq!(reply.matches("Hello, world!").count(), 3);
    assert_eq!(reply.matches("Connection: keep-alive").count(), 2);
    assert!(
        reply.ends_with("Connection: close\r\n\r\nHello, world!"),
        "{reply}"
    );
}
