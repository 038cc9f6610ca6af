//! Faults on the network path: a protocol that panics loses its own
//! connection (with the panic as the reason) and no other; a factory that
//! panics costs one connection, not the listener; a write to a peer that
//! vanished (reset, or half-closed then gone) loses that connection once,
//! with the socket's error, and never raises SIGPIPE.

mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, ExceptionContext, Failure, Loop, Panicked};
use std::cell::RefCell;
use std::io::Write as _;
use std::net::{Shutdown, TcpStream};
use std::rc::Rc;
use std::time::Duration;
use util::net::{assert_lifecycle, lost_count, Ev, Rec};
use util::run_until;

const T: Duration = Duration::from_secs(20);

/// Echoes, but panics on "boom".
struct Fragile {
    rec: Rec,
}

impl Protocol for Fragile {
    fn connection_made(&mut self, t: &Transport) {
        self.rec.connection_made(t);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.rec.data_received(t, data);
        if data == b"boom" {
            panic!("fragile protocol");
        }
        t.write(data);
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        self.rec.connection_lost(t, reason);
    }
}

fn handler_log(ev: &EventLoop) -> Rc<RefCell<Vec<String>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    ev.set_exception_handler(move |_: &Loop, cx: &ExceptionContext<'_>| {
        l2.borrow_mut().push(cx.message.to_owned());
    });
    log
}

#[test]
fn a_panicking_protocol_aborts_its_connection_only() {
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            let (rec, seen) = Rec::new();
            s2.borrow_mut().push(seen);
            Fragile { rec }
        })
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (r1, c1) = Rec::new();
    let (r2, c2) = Rec::new();
    let t1 = ev.run_until(ev.connect_tcp(addr, r1).connected()).unwrap();
    let t2 = ev.run_until(ev.connect_tcp(addr, r2).connected()).unwrap();
    t1.write(b"boom");
    t2.write(b"fine");
    run_until(&ev, T, || {
        lost_count(&c1) == 1 && c2.borrow().bytes == b"fine" && servers.borrow().len() == 2
    });
    let broken = servers.borrow()[0].clone();
    run_until(&ev, T, || lost_count(&broken) == 1);
    assert_lifecycle(&broken);
    let reason = broken.borrow().reason.clone().unwrap();
    assert!(reason.is_panic());
    assert_eq!(
        reason.downcast_ref::<Panicked>().unwrap().message,
        "fragile protocol"
    );
    assert_eq!(*reported.borrow(), ["Exception in protocol callback"]);
    // The other connection is untouched and still works.
    t2.write(b"again");
    run_until(&ev, T, || c2.borrow().bytes == b"fineagain");
    assert_eq!(lost_count(&servers.borrow()[1]), 0);
    assert_eq!(lost_count(&c2), 0);
}

#[test]
fn a_panicking_factory_costs_one_connection_not_the_listener() {
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let mut n = 0;
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            n += 1;
            if n == 1 {
                panic!("factory");
            }
            Rec::echo().0
        })
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let (r1, c1) = Rec::new();
    let _t1 = ev.run_until(ev.connect_tcp(addr, r1).connected()).unwrap();
    run_until(&ev, T, || lost_count(&c1) == 1);
    assert_eq!(*reported.borrow(), ["Exception in protocol factory"]);
    let (r2, c2) = Rec::new();
    let t2 = ev.run_until(ev.connect_tcp(addr, r2).connected()).unwrap();
    t2.write(b"served");
    run_until(&ev, T, || c2.borrow().bytes == b"served");
    assert!(l.is_listening());
}

#[test]
fn a_panicking_connection_lost_is_reported_and_the_connection_still_goes() {
    struct BadLost;
    impl Protocol for BadLost {
        fn data_received(&mut self, t: &Transport, _: &[u8]) {
            t.close();
        }
        fn connection_lost(&mut self, _: &Transport, _: Option<Failure>) {
            panic!("in connection_lost");
        }
    }
    let ev = EventLoop::new().unwrap();
    let reported = handler_log(&ev);
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || BadLost)
        .unwrap();
    let (r, c) = Rec::new();
    let t = ev
        .run_until(
            ev.connect_tcp(l.local_addr().as_inet().unwrap(), r)
                .connected(),
        )
        .unwrap();
    t.write(b"x");
    run_until(&ev, T, || lost_count(&c) == 1);
    run_until(&ev, T, || ev.io_source_count() == 1);
    assert_eq!(
        *reported.borrow(),
        ["Exception in protocol callback (connection_lost)"]
    );
}

/// Sets up one server connection (a `Rec` that keeps a half-closed
/// connection open) and a plain peer socket; returns both.
fn one_connection(ev: &EventLoop) -> (TcpStream, util::net::Shared) {
    let (rec, seen) = Rec::new();
    let mut slot = Some(Rec {
        keep_open: true,
        ..rec
    });
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || slot.take().unwrap())
        .unwrap();
    let peer = TcpStream::connect(l.local_addr().as_inet().unwrap()).unwrap();
    run_until(ev, T, || seen.borrow().transport.is_some());
    drop(l); // the listener goes on listening until the loop closes
    (peer, seen)
}

/// The io error a transport's `connection_lost` was given.
fn lost_with_io_error(seen: &util::net::Shared) -> std::io::ErrorKind {
    assert_lifecycle(seen);
    let s = seen.borrow();
    let reason = s
        .reason
        .as_ref()
        .expect("a vanished peer is not a clean close");
    reason
        .downcast_ref::<std::io::Error>()
        .unwrap_or_else(|| panic!("not an io error: {reason}"))
        .kind()
}

/// How a test writes to the vanished peer.
#[derive(Clone, Copy, Debug)]
enum Write {
    Plain,
    /// Two parts: one `writev`-style call (what `LengthPrefixed::send` does).
    Vectored,
}

fn write_to(t: &Transport, how: Write) {
    match how {
        Write::Plain => t.write(b"reply"),
        Write::Vectored => t.write_vectored(&[b"head", b"body"]),
    }
}

/// The peer resets, or half-closes and then vanishes, while the loop is not
/// looking; the next write finds out. The connection is lost exactly once,
/// with the socket's error, and the writes after it are ignored.
fn write_after_peer_vanished(how: Write, half_closed_first: bool) -> std::io::ErrorKind {
    let ev = EventLoop::new().unwrap();
    let (mut peer, seen) = one_connection(&ev);
    if half_closed_first {
        // The peer says it is done sending (the server is in CLOSE_WAIT)...
        peer.write_all(b"request").unwrap();
        peer.shutdown(Shutdown::Write).unwrap();
        run_until(&ev, T, || seen.borrow().events.contains(&Ev::Eof));
        // ...then goes away; its kernel answers our next data with a reset,
        // which turns the write after it into EPIPE.
        drop(peer);
        let t = seen.borrow().transport.clone().unwrap();
        write_to(&t, how);
        std::thread::sleep(Duration::from_millis(50));
        write_to(&t, how);
    } else {
        util::net::reset(peer);
        std::thread::sleep(Duration::from_millis(50));
        let t = seen.borrow().transport.clone().unwrap();
        write_to(&t, how);
    }
    run_until(&ev, T, || lost_count(&seen) == 1);
    let t = seen.borrow().transport.clone().unwrap();
    write_to(&t, how);
    assert!(t.is_closing());
    ev.call_later(Duration::from_millis(20), |lp| lp.stop())
        .unwrap();
    ev.run().unwrap();
    assert_eq!(ev.io_source_count(), 1, "only the listener is left");
    lost_with_io_error(&seen)
}

#[test]
fn a_write_to_a_vanished_peer_loses_the_connection_once_with_the_error() {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
    for how in [Write::Plain, Write::Vectored] {
        let kind = write_after_peer_vanished(how, false);
        assert!(
            matches!(kind, ConnectionReset | BrokenPipe),
            "{how:?}: {kind:?}"
        );
        let kind = write_after_peer_vanished(how, true);
        assert!(
            matches!(kind, ConnectionReset | BrokenPipe),
            "{how:?}: {kind:?}"
        );
    }
}

/// What the child process of the SIGPIPE test runs: the same faults, with
/// SIGPIPE at its default action (as in a program that does not ignore it,
/// unlike Rust's own `main`), over TCP and over a Unix socket.
fn vanished_peers_with_default_sigpipe() {
    // SAFETY: restoring a signal's default action; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    for how in [Write::Plain, Write::Vectored] {
        write_after_peer_vanished(how, true);
        println!("tcp {how:?}: connection lost, process alive");
        let ev = EventLoop::new().unwrap();
        let path = std::env::temp_dir().join(format!(
            "deferloop-sigpipe-{}-{how:?}.sock",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let (rec, seen) = Rec::new();
        let mut slot = Some(rec);
        let _l = ev.listen_unix(&path, move || slot.take().unwrap()).unwrap();
        let peer = std::os::unix::net::UnixStream::connect(&path).unwrap();
        run_until(&ev, T, || seen.borrow().transport.is_some());
        drop(peer); // a Unix socket has no reset: the next write is EPIPE
        let t = seen.borrow().transport.clone().unwrap();
        write_to(&t, how);
        run_until(&ev, T, || lost_count(&seen) == 1);
        assert_eq!(lost_with_io_error(&seen), std::io::ErrorKind::BrokenPipe);
        let _ = std::fs::remove_file(&path);
        println!("unix {how:?}: connection lost, process alive");
    }
}

/// A program embedding the loop need not ignore SIGPIPE: a write to a peer
/// that vanished is an error on that connection, never a signal that kills
/// the process. Run in a child process, which SIGPIPE would kill.
#[test]
fn a_write_to_a_vanished_peer_never_raises_sigpipe() {
    const CHILD: &str = "DEFERLOOP_TEST_SIGPIPE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        vanished_peers_with_default_sigpipe();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_write_to_a_vanished_peer_never_raises_sigpipe",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {:?} (signal {:?}):\n{stdout}\n{}",
        out.status,
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("connection lost, process alive").count(), 4);
}

/// A reset that arrives while the connection is not being read (its reading
/// paused) is noticed at once: the connection is lost with the reset, not
/// held until reading resumes (which, for a proxy waiting on the other side,
/// may be never).
#[test]
fn a_reset_while_reading_is_paused_loses_the_connection() {
    let ev = EventLoop::new().unwrap();
    let (peer, seen) = one_connection(&ev);
    let t = seen.borrow().transport.clone().unwrap();
    t.pause_reading();
    util::net::reset(peer);
    run_until(&ev, T, || lost_count(&seen) == 1);
    assert_eq!(
        lost_with_io_error(&seen),
        std::io::ErrorKind::ConnectionReset
    );
}

/// A client whose `connection_made` panics.
struct PanicsWhenMade;
impl Protocol for PanicsWhenMade {
    fn connection_made(&mut self, _: &Transport) {
        panic!("made-kaput");
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

/// The connect's Deferred fails with the panic of `connection_made`, not
/// with a bare "gone": the caller learns why.
#[test]
fn a_connect_whose_connection_made_panics_fails_with_the_panic() {
    let ev = EventLoop::new().unwrap();
    ev.set_exception_handler(|_, _| {});
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || Rec::new().0)
        .unwrap();
    let c = ev.connect_tcp(l.local_addr().as_inet().unwrap(), PanicsWhenMade);
    let f = ev
        .run_until(c.connected())
        .unwrap_err()
        .into_failure()
        .unwrap();
    assert!(f.check::<Panicked>(), "{f}");
    assert!(f.to_string().contains("made-kaput"), "{f}");
}
