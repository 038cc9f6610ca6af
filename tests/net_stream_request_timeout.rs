//! Request and response over a line protocol: connect, write, read a line,
//! with a time limit; a cancelled (or timed-out) request closes its
//! connection.

use deferloop::deferred::TimedOut;
use deferloop::net::Stream;
use deferloop::{Deferred, EventLoop, Failure, Loop};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

fn ask(lp: &Loop, addr: SocketAddr, within: Duration) -> Deferred<String> {
    let s = Stream::connect(lp, addr);
    s.write(b"ping\n");
    s.read_line()
        .add_timeout(within, lp)
        .add_both(move |r: Result<String, Failure>| {
            s.abort();
            r
        })
}

/// A server that answers `answer` (or nothing) to one line, then reports
/// whether the client closed the connection.
fn server(answer: Option<&'static str>) -> (SocketAddr, std::thread::JoinHandle<bool>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "ping\n");
        if let Some(a) = answer {
            c.write_all(a.as_bytes()).unwrap();
        }
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = [0u8; 16];
        // End of file or a reset: closed. A timeout (5 s) is not.
        match r.read(&mut rest) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    });
    (addr, t)
}

#[test]
fn a_request_gets_its_line() {
    let ev = EventLoop::new().unwrap();
    let (addr, closed) = server(Some("pong\r\n"));
    let got = ev.run_until(ask(&ev, addr, Duration::from_secs(5)));
    assert_eq!(got.unwrap(), "pong");
    let _ = ev.call_later(Duration::from_millis(2), |_| {});
    ev.run_once().unwrap();
    assert!(closed.join().unwrap());
}

#[test]
fn a_request_that_times_out_fails_and_closes_its_connection() {
    let ev = EventLoop::new().unwrap();
    let (addr, closed) = server(None);
    let f = ev
        .run_until(ask(&ev, addr, Duration::from_millis(100)))
        .unwrap_err();
    assert!(f.check::<TimedOut>(), "{f}");
    let _ = ev.call_later(Duration::from_millis(2), |_| {});
    ev.run_once().unwrap();
    assert!(
        closed.join().unwrap(),
        "the server saw the connection close"
    );
    assert_eq!(ev.io_source_count(), 0);
}

#[test]
fn cancelling_connected_abandons_a_connect_in_progress() {
    let ev = EventLoop::new().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = Stream::connect(&ev, l.local_addr().unwrap());
    let read = s.read_line();
    let up = s.connected();
    assert!(s.is_connecting());
    up.cancel(); // what a connect timeout does
    assert!(ev.run_until(up).is_err());
    assert!(
        ev.run_until(read).is_err(),
        "reads fail once the connect is abandoned"
    );
    assert_eq!(ev.io_source_count(), 0);
}
