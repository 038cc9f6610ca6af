//! A relay whose one side resets fails with the reset and closes the other
//! side; a relay whose sides both finish passes each half-close on.

use deferloop::net::{copy, relay, Stream};
use deferloop::EventLoop;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// One turn that never blocks for long: a timer bounds the wait.
fn turn(ev: &EventLoop) {
    let _ = ev.call_later(std::time::Duration::from_millis(2), |_| {});
    ev.run_once().unwrap();
}

/// A pair of connected streams over 127.0.0.1: ours, and the std peer.
fn tcp_pair(ev: &EventLoop) -> (Stream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = Stream::connect(ev, l.local_addr().unwrap());
    let (peer, _) = l.accept().unwrap();
    ev.run_until(s.connected()).unwrap();
    (s, peer)
}

fn reset(s: TcpStream) {
    // SO_LINGER 0: close sends a reset.
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&s);
    let linger = [1i32, 0i32];
    // SAFETY: fd is open; the option value is a struct linger of two ints.
    let rc = unsafe {
        libc_setsockopt(
            fd,
            1,  /* SOL_SOCKET */
            13, /* SO_LINGER */
            linger.as_ptr().cast(),
            8,
        )
    };
    assert_eq!(rc, 0);
    drop(s);
}

extern "C" {
    #[link_name = "setsockopt"]
    fn libc_setsockopt(fd: i32, level: i32, name: i32, val: *const u8, len: u32) -> i32;
}

#[test]
fn a_relay_whose_one_side_resets_fails_and_closes_the_other() {
    let ev = EventLoop::new().unwrap();
    let (a, mut a_peer) = tcp_pair(&ev);
    let (b, b_peer) = tcp_pair(&ev);
    let d = relay(&a, &b);
    reset(b_peer);
    let f = ev.run_until(d).unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().expect("an io error");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    // The other side is closed: its peer reads end of file.
    a_peer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let drive = std::thread::spawn(move || a_peer.read_to_end(&mut rest).map(|_| rest));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !drive.is_finished() && std::time::Instant::now() < deadline {
        turn(&ev);
    }
    assert!(drive.join().unwrap().unwrap().is_empty());
}

#[test]
fn a_relay_passes_bytes_and_half_closes_both_ways() {
    let ev = EventLoop::new().unwrap();
    let (a, mut a_peer) = tcp_pair(&ev);
    let (b, mut b_peer) = tcp_pair(&ev);
    let d = relay(&a, &b);
    let t = std::thread::spawn(move || {
        a_peer.write_all(&vec![1; 1 << 20]).unwrap();
        a_peer.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        a_peer.read_to_end(&mut got).unwrap();
        got.len()
    });
    let u = std::thread::spawn(move || {
        let mut got = Vec::new();
        b_peer.read_to_end(&mut got).unwrap(); // ends: a's half-close passed on
        b_peer.write_all(b"and back").unwrap();
        b_peer.shutdown(Shutdown::Write).unwrap();
        got.len()
    });
    assert_eq!(ev.run_until(d).unwrap(), (1 << 20, 8));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !(t.is_finished() && u.is_finished()) && std::time::Instant::now() < deadline {
        turn(&ev);
    }
    assert_eq!((t.join().unwrap(), u.join().unwrap()), (8, 1 << 20));
}

#[test]
fn a_relay_to_a_refused_connect_fails_and_closes_the_client() {
    let ev = EventLoop::new().unwrap();
    let (a, _a_peer) = tcp_pair(&ev);
    let refused: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let b = Stream::connect(&ev, refused);
    let f = ev
        .run_until(relay(&a, &b))
        .unwrap_err()
        .into_failure()
        .unwrap();
    assert!(
        f.to_string().contains("refused") || f.check::<std::io::Error>(),
        "{f}"
    );
    turn(&ev);
    assert!(a.is_closing());
}

#[test]
fn a_stream_copied_into_itself_echoes_until_end_of_file() {
    let ev = EventLoop::new().unwrap();
    let (s, mut peer) = tcp_pair(&ev);
    let d = copy(&s, &s);
    let t = std::thread::spawn(move || {
        peer.write_all(&vec![9; 3 << 20]).unwrap();
        peer.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got.len()
    });
    assert_eq!(ev.run_until(d).unwrap(), 3 << 20);
    s.close();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !t.is_finished() && std::time::Instant::now() < deadline {
        turn(&ev);
    }
    assert_eq!(t.join().unwrap(), 3 << 20);
}

/// A second `copy` from the same stream replaces the first: the first fails
/// with `Abandoned` then and there, and its callbacks may use the stream.
#[test]
fn a_copy_replaced_by_another_fails_abandoned_and_may_use_its_source() {
    let ev = EventLoop::new().unwrap();
    let (a, _pa) = Stream::open_memory(&ev).unwrap();
    let (b, _pb) = Stream::open_memory(&ev).unwrap();
    let (c, _pc) = Stream::open_memory(&ev).unwrap();
    let seen = std::rc::Rc::new(std::cell::Cell::new(None));
    let (a2, s2) = (a.clone(), seen.clone());
    let first = copy(&a, &b).add_both(move |r: Result<u64, deferloop::Failure>| {
        let abandoned = r.as_ref().is_err_and(|f| f.check::<deferloop::Abandoned>());
        s2.set(Some((abandoned, a2.buffered())));
        Ok::<_, deferloop::Failure>(())
    });
    turn(&ev);
    let _second = copy(&a, &c);
    assert_eq!(seen.get(), Some((true, 0)));
    assert!(first.result().unwrap().is_ok());
}
