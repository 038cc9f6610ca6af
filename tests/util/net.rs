//! Helpers for the networking tests: a protocol that records what happens to
//! it, with a few behaviours switched on by its fields.

use deferloop::net::{Protocol, Transport};
use deferloop::Failure;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::net::TcpStream;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::rc::Rc;

/// What a [`Rec`] protocol saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Made,
    Data(usize),
    Eof,
    PauseWriting,
    ResumeWriting,
    /// `connection_lost`, with the reason's text.
    Lost(Option<String>),
}

/// Shared state of one recorded connection.
#[derive(Default)]
pub struct Seen {
    pub events: Vec<Ev>,
    pub bytes: Vec<u8>,
    pub transport: Option<Transport>,
    pub reason: Option<Failure>,
}

pub type Shared = Rc<RefCell<Seen>>;

/// A protocol that records; `echo` writes back what it reads; `keep_open`
/// answers `eof_received` with true.
#[derive(Default)]
pub struct Rec {
    pub seen: Shared,
    pub echo: bool,
    pub keep_open: bool,
}

impl Rec {
    pub fn new() -> (Rec, Shared) {
        let r = Rec::default();
        let s = r.seen.clone();
        (r, s)
    }

    pub fn echo() -> (Rec, Shared) {
        let (mut r, s) = Rec::new();
        r.echo = true;
        (r, s)
    }
}

impl Protocol for Rec {
    fn connection_made(&mut self, t: &Transport) {
        let mut s = self.seen.borrow_mut();
        s.events.push(Ev::Made);
        s.transport = Some(t.clone());
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.seen.borrow_mut().events.push(Ev::Data(data.len()));
        self.seen.borrow_mut().bytes.extend_from_slice(data);
        if self.echo {
            t.write(data);
        }
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        self.seen.borrow_mut().events.push(Ev::Eof);
        self.keep_open
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        let mut s = self.seen.borrow_mut();
        s.events
            .push(Ev::Lost(reason.as_ref().map(|f| f.to_string())));
        s.reason = reason;
    }
    fn pause_writing(&mut self, _: &Transport) {
        self.seen.borrow_mut().events.push(Ev::PauseWriting);
    }
    fn resume_writing(&mut self, _: &Transport) {
        self.seen.borrow_mut().events.push(Ev::ResumeWriting);
    }
}

/// How many `connection_lost` calls `seen` recorded.
pub fn lost_count(seen: &Shared) -> usize {
    seen.borrow()
        .events
        .iter()
        .filter(|e| matches!(e, Ev::Lost(_)))
        .count()
}

/// Asserts the call order rule: `Made` first, exactly one `Lost`, last.
pub fn assert_lifecycle(seen: &Shared) {
    let s = seen.borrow();
    assert_eq!(s.events.first(), Some(&Ev::Made), "{:?}", s.events);
    assert_eq!(
        lost_count(seen),
        1,
        "connection_lost exactly once: {:?}",
        s.events
    );
    assert!(
        matches!(s.events.last(), Some(Ev::Lost(_))),
        "{:?}",
        s.events
    );
}

/// Closes `s` with a reset instead of a FIN: SO_LINGER with a zero timeout.
pub fn reset(s: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid fd and a pointer to a local `linger` of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    drop(s);
}

/// A listener whose accept queue is full (backlog 0, one connection queued):
/// the kernel drops further SYNs, so a connect to it never completes.
/// Returns it, the connection that fills it, and its address.
pub fn full_listener() -> (std::net::TcpListener, std::net::TcpStream, SocketAddr) {
    // SAFETY: plain socket calls on a fresh fd that the TcpListener then owns.
    let listener = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let r = libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0);
        assert_eq!(libc::listen(fd, 0), 0);
        std::net::TcpListener::from_raw_fd(fd)
    };
    let addr = listener.local_addr().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap(); // takes the one slot
    (listener, filler, addr)
}

/// Sets the socket send buffer of `t`'s connection to `bytes` (the kernel
/// doubles it): so that a reply fills it and waits for writable edges.
pub fn set_send_buffer(t: &Transport, bytes: libc::c_int) {
    // SAFETY: a setsockopt on the connection's own open socket, with a
    // pointer to a local c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            t.raw_fd().unwrap(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// A recorded connection in memory, on a loop with manual time: for the
/// deadline tests, which move the clock instead of sleeping.
pub struct ManualConn {
    pub clock: deferloop::ManualClock,
    pub ev: deferloop::EventLoop,
    pub t: Transport,
    pub peer: deferloop::net::memory::Peer,
    pub seen: Shared,
}

impl ManualConn {
    /// Opens it and runs one turn (`connection_made`, the first writable edge).
    pub fn open() -> ManualConn {
        let clock = deferloop::ManualClock::new();
        let ev = deferloop::EventLoop::with_manual_clock(clock.clone()).unwrap();
        let (rec, seen) = Rec::new();
        let (t, peer) = deferloop::net::memory::open(&ev, rec).unwrap();
        let c = ManualConn {
            clock,
            ev,
            t,
            peer,
            seen,
        };
        c.turn();
        c
    }

    /// One turn, which does not block (a callback is queued).
    pub fn turn(&self) {
        self.ev.call_soon(|_| {}).unwrap();
        self.ev.run_once().unwrap();
    }

    /// Moves the clock on by `d`, then two turns: the timers due, then what
    /// they asked for.
    pub fn after(&self, d: std::time::Duration) {
        self.clock.advance(d);
        self.turn();
        self.turn();
    }

    pub fn lost(&self) -> usize {
        lost_count(&self.seen)
    }

    /// Asserts one `connection_lost`, with a `TimedOut` error whose text
    /// names `which` deadline, and the connection closed.
    pub fn assert_timed_out(&self, which: &str) {
        assert_eq!(self.lost(), 1);
        let s = self.seen.borrow();
        let e = s.reason.as_ref().unwrap().downcast_ref::<std::io::Error>();
        let e = e.expect("an io::Error");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains(which), "{e}");
        assert!(self.peer.is_closed());
    }
}
