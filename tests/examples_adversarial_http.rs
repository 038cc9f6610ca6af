//! The HTTP example against malformed and hostile requests, in process:
//! malformed requests answered as RFC 9112 says and closed, what the RFC
//! allows accepted, the head and body limits however the bytes arrive,
//! slowloris cut off by the head timeout, pipelined requests answered in
//! order. Loopback only; every read and write is bounded in time. The tests
//! that need a process of their own are in examples_adversarial.rs.

#[path = "../examples/http_hello/main.rs"]
#[allow(dead_code)]
mod http_hello;
#[path = "util/serve.rs"]
mod serve_util;

use serve_util::{any, connect, serve};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn http_server(head_timeout: Duration) -> SocketAddr {
    serve(move |ev| http_hello::start_with(ev, any(), head_timeout).unwrap())
}

/// Sends `pieces` (10 ms apart, so they arrive as separate reads), then
/// reads until the server closes. Panics if it does not within `T`.
fn exchange(addr: SocketAddr, pieces: &[&[u8]]) -> String {
    let mut s = connect(addr);
    for (i, p) in pieces.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The server may answer and stop reading before the last piece.
        if s.write_all(p).is_err() {
            break;
        }
    }
    let mut back = Vec::new();
    s.read_to_end(&mut back)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&back).into_owned()
}

/// `req` answered with exactly one response, `status`, and the close.
fn assert_refused(addr: SocketAddr, req: &[u8], status: &str) {
    let reply = exchange(addr, &[req]);
    let what = String::from_utf8_lossy(req);
    assert!(
        reply.starts_with(&format!("HTTP/1.1 {status}\r\n")),
        "{what:?}: {reply:?}"
    );
    assert!(
        reply.contains("\r\nConnection: close\r\n"),
        "{what:?}: {reply:?}"
    );
    assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{what:?}: {reply:?}");
}

#[test]
fn http_malformed_requests_are_refused_and_closed() {
    let addr = http_server(http_hello::HEAD_TIMEOUT);
    let h = |head: &str| format!("GET / HTTP/1.1\r\nHost: x\r\n{head}\r\n");
    let cases: Vec<(String, &str)> = vec![
        // Framing that could smuggle: the second request must never be answered.
        (
            h("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")
                + "0\r\n\r\nGET /evil HTTP/1.1\r\nHost: x\r\n\r\n",
            "400 Bad Request",
        ),
        (
            h("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") + "0\r\n\r\n",
            "400 Bad Request",
        ),
        (h("Content-Length: +5\r\n") + "hello", "400 Bad Request"),
        (h("Content-Length: -1\r\n"), "400 Bad Request"),
        (h("Content-Length: 5x\r\n") + "hello", "400 Bad Request"),
        (h("Content-Length: five\r\n"), "400 Bad Request"),
        (h("Content-Length: 0x5\r\n") + "hello", "400 Bad Request"),
        (h("Content-Length: 5, 5\r\n") + "hello", "400 Bad Request"),
        (h("Content-Length: \r\n"), "400 Bad Request"),
        (
            h("Content-Length: 5\r\nContent-Length: 6\r\n") + "hello!",
            "400 Bad Request",
        ),
        // Identical repeats are refused too (as nginx does).
        (
            h("Content-Length: 5\r\nContent-Length: 5\r\n") + "hello",
            "400 Bad Request",
        ),
        ("GET / HTTP/1.1\r\n\r\n".into(), "400 Bad Request"),
        (h("Host: y\r\n"), "400 Bad Request"),
        (
            "GET / HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n".into(),
            "400 Bad Request",
        ),
        (
            h("Host: x/y\r\n").replace("Host: x\r\n", ""),
            "400 Bad Request",
        ),
        (
            "GET / HTTP/2.0\r\nHost: x\r\n\r\n".into(),
            "505 HTTP Version Not Supported",
        ),
        (
            "GET / HTTP/1.2\r\nHost: x\r\n\r\n".into(),
            "505 HTTP Version Not Supported",
        ),
        (
            "GET / HTTP/0.9\r\nHost: x\r\n\r\n".into(),
            "505 HTTP Version Not Supported",
        ),
        (
            "GET / HTTX/1.1\r\nHost: x\r\n\r\n".into(),
            "400 Bad Request",
        ),
        (
            "GET / HTTP/1.1x\r\nHost: x\r\n\r\n".into(),
            "400 Bad Request",
        ),
        (h("X-A: a\0b\r\n"), "400 Bad Request"),
        (h("X-A: a\x01b\r\n"), "400 Bad Request"),
        (h("X-A: a\x1b[31mb\r\n"), "400 Bad Request"),
        (h("X-A: a\x7fb\r\n"), "400 Bad Request"),
        (h("X-A: a\rb\r\n"), "400 Bad Request"),
        (h("X-A: a\r\n folded\r\n"), "400 Bad Request"),
        (h("X-A : a\r\n"), "400 Bad Request"),
        (
            "GET  / HTTP/1.1\r\nHost: x\r\n\r\n".into(),
            "400 Bad Request",
        ),
        (
            "G\0T / HTTP/1.1\r\nHost: x\r\n\r\n".into(),
            "400 Bad Request",
        ),
        // Chunked is framed, but this server does not decode it.
        (
            h("Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n",
            "501 Not Implemented",
        ),
        (h("Transfer-Encoding: gzip\r\n"), "400 Bad Request"),
        (h("Transfer-Encoding: chunked, gzip\r\n"), "400 Bad Request"),
        (
            "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            "400 Bad Request",
        ),
    ];
    for (req, status) in &cases {
        assert_refused(addr, req.as_bytes(), status);
    }
}

#[test]
fn http_accepts_what_rfc_9112_allows() {
    let addr = http_server(http_hello::HEAD_TIMEOUT);
    let ok = |req: &str| {
        let reply = exchange(addr, &[req.as_bytes()]);
        assert!(
            reply.starts_with("HTTP/1.1 200 OK\r\n"),
            "{req:?}: {reply:?}"
        );
        reply
    };
    // HTTP/1.0 needs no Host, and closes by default.
    assert!(ok("GET / HTTP/1.0\r\n\r\n").ends_with("Connection: close\r\n\r\nHello, world!"));
    ok("\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ok("GET / HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n");
    ok("GET / HTTP/1.1\r\nHost: x\r\nX-A: caf\u{e9} \t tab\r\nConnection: close\r\n\r\n");
    ok("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 005\r\nConnection: close\r\n\r\nhello");
    // HEAD: the same head, no body.
    let head = ok("HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(
        head.ends_with("Content-Length: 13\r\nConnection: close\r\n\r\n"),
        "{head:?}"
    );
}

/// A head of `len` bytes exactly (with its blank line) and `body` announced.
fn request_of(len: usize, body: usize) -> Vec<u8> {
    let start = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {body}\r\nX-Pad: ");
    let end = "\r\nConnection: close\r\n\r\n";
    let mut r = start.clone().into_bytes();
    r.resize(len - end.len(), b'a');
    r.extend_from_slice(end.as_bytes());
    r.resize(len + body, b'b');
    r
}

#[test]
fn http_head_and_body_limits_hold_however_the_bytes_arrive() {
    let addr = http_server(http_hello::HEAD_TIMEOUT);
    let (head, body) = (
        http_hello::request::MAX_HEAD,
        http_hello::request::MAX_BODY as usize,
    );
    let cases = [
        (request_of(head, 0), "200 OK"),
        (
            request_of(head + 1, 0),
            "431 Request Header Fields Too Large",
        ),
        (
            request_of(4 * head, 0),
            "431 Request Header Fields Too Large",
        ),
        (request_of(500, body), "200 OK"),
        (request_of(500, body + 1), "413 Content Too Large"),
        (request_of(500, 10 * body), "413 Content Too Large"),
    ];
    for (req, status) in &cases {
        let line = format!("HTTP/1.1 {status}\r\n");
        // One write; two halves; and pieces of 1000 bytes.
        let half = req.len() / 2;
        let thousands: Vec<&[u8]> = req.chunks(1000).collect();
        for pieces in [&[&req[..]][..], &[&req[..half], &req[half..]], &thousands] {
            let reply = exchange(addr, pieces);
            assert!(
                reply.starts_with(&line),
                "{} in {}: {reply:?}",
                req.len(),
                pieces.len()
            );
            assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{reply:?}");
        }
    }
    // Too many header lines, each short.
    let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "X: y\r\n".repeat(80));
    assert_refused(addr, many.as_bytes(), "431 Request Header Fields Too Large");
}

#[test]
fn http_slowloris_is_cut_off_by_the_head_timeout() {
    let timeout = Duration::from_millis(300);
    let addr = http_server(timeout);
    let mut s = connect(addr);
    let mut w = s.try_clone().unwrap();
    // One byte every 100 ms of a head that never ends, for up to 23 s. A
    // timeout each byte restarted would not fire while the bytes come: the
    // server must close while the writer still writes (an order, where a
    // bound of seconds on the time taken was a window a loaded machine
    // could miss).
    let writer = std::thread::spawn(move || {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "
            .iter()
            .chain([b'a'; 200].iter());
        for b in head {
            if w.write_all(&[*b]).is_err() {
                return true; // cut off
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    let mut back = String::new();
    s.read_to_string(&mut back).expect("the server closes");
    assert!(
        back.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{back:?}"
    );
    drop(s);
    assert!(
        writer.join().unwrap(),
        "closed while the head was still coming, not after it stopped"
    );

    // An idle connection is closed silently, by the head timeout (a server
    // that never closed it would fail `exchange`'s own 10 s read timeout).
    let t0 = Instant::now();
    let back = exchange(addr, &[]);
    assert_eq!(back, "");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn http_pipelined_requests_are_answered_in_order() {
    let addr = http_server(http_hello::HEAD_TIMEOUT);
    let get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let head = "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n";
    // A body that looks like a request is a body, not a request.
    let post = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{head}",
        head.len()
    );
    let last = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let all = [get, head, &post, head, get, last].concat();
    // In one write, and byte by byte in 97-byte pieces.
    let pieces: Vec<&[u8]> = all.as_bytes().chunks(97).collect();
    for p in [vec![all.as_bytes()], pieces] {
        let reply = exchange(addr, &p);
        let answers: Vec<&str> = reply.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
        let with_body: Vec<bool> = answers
            .iter()
            .map(|a| a.ends_with("Hello, world!"))
            .collect();
        assert_eq!(
            with_body,
            [true, false, true, false, true, true],
            "{reply:?}"
        );
        assert!(answers[5].contains("Connection: close"), "{reply:?}");
    }
}
