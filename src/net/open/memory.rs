//! In-memory connections, for testing protocols without sockets (Twisted's
//! `StringTransport`, but run by the loop).
//!
//! [`open`] gives a protocol a real [`Transport`] over an in-memory pipe and
//! hands the test the other end, a [`Peer`]. The connection is a source like
//! any other: the same dispatch, write buffer, flow control, backpressure and
//! `connection_lost` rules as TCP apply, so what a protocol does here it does
//! over a socket. The peer feeds bytes in (delivered in the loop's next turn),
//! reads what the protocol wrote, half-closes or resets, and can make the
//! "socket" stop taking writes, to drive `pause_writing`/`resume_writing`.
//!
//! # Examples
//! ```
//! use deferloop::net::{memory, Protocol, Transport};
//! use deferloop::EventLoop;
//!
//! struct Upper;
//! impl Protocol for Upper {
//!     fn data_received(&mut self, t: &Transport, data: &[u8]) {
//!         t.write(&data.to_ascii_uppercase());
//!     }
//! }
//!
//! let ev = EventLoop::new()?;
//! let (_t, peer) = memory::open(&ev, Upper)?;
//! peer.send(b"hello");
//! ev.run_once()?;
//! assert_eq!(peer.take_written(), b"HELLO");
//! # Ok::<(), deferloop::Error>(())
//! ```

use crate::net::core::conn::Conn;
use crate::net::core::io::Wire;
use crate::net::{Protocol, SockAddr, Transport};
use crate::reactor::{Ready, SourceKey, WeakLoop};
use crate::{Error, Loop};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::panic::Location;
use std::rc::Rc;

#[derive(Default)]
struct Pipe {
    /// Bytes the peer sent, not yet read by the transport.
    inbound: Vec<u8>,
    /// Bytes the transport wrote, not yet taken by the peer.
    outbound: Vec<u8>,
    peer_eof: bool,
    reset: bool,
    /// How many more bytes the "socket" takes; `None`: no limit.
    room: Option<usize>,
    /// The transport half-closed (`write_eof`).
    transport_eof: bool,
    /// The transport's side is closed.
    transport_closed: bool,
    key: Option<SourceKey>,
    /// Calls to `write` that took bytes (the system calls a socket would see).
    writes: u64,
}

/// The in-memory "socket" the connection core drives.
struct MemoryIo {
    pipe: Rc<RefCell<Pipe>>,
}

impl Wire for MemoryIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut p = self.pipe.borrow_mut();
        if p.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if p.inbound.is_empty() {
            return if p.peer_eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(p.inbound.len());
        buf[..n].copy_from_slice(&p.inbound[..n]);
        p.inbound.drain(..n);
        Ok(n)
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut p = self.pipe.borrow_mut();
        if p.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        let n = p.room.map_or(data.len(), |room| room.min(data.len()));
        if n == 0 && !data.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(room) = &mut p.room {
            *room -= n;
        }
        p.outbound.extend_from_slice(&data[..n]);
        p.writes += 1;
        Ok(n)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.pipe.borrow_mut().transport_eof = true;
        Ok(())
    }

    fn peer_addr(&self) -> io::Result<SockAddr> {
        Ok(SockAddr::Unix(None))
    }

    fn local_addr(&self) -> io::Result<SockAddr> {
        Ok(SockAddr::Unix(None))
    }

    fn register(&mut self, _: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.pipe.borrow_mut().key = Some(SourceKey::from_token(token));
        Ok(())
    }

    fn deregister(&mut self, _: &mio::Registry) {
        let mut p = self.pipe.borrow_mut();
        p.transport_closed = true;
        p.key = None;
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

/// Opens an in-memory connection for `protocol`: `connection_made` runs at
/// once, as for an accepted connection. Returns its transport and the peer.
///
/// # Errors
/// [`Error::Closed`] on a closed loop.
#[track_caller]
pub fn open<P: Protocol>(lp: &Loop, protocol: P) -> Result<(Transport, Peer), Error> {
    let pipe = Rc::new(RefCell::new(Pipe::default()));
    let io = Box::new(MemoryIo { pipe: pipe.clone() });
    let conn = Conn::open(lp, io, Box::new(protocol), None, Location::caller())?;
    conn.start(lp);
    let peer = Peer {
        pipe,
        lp: lp.downgrade(),
    };
    // Writable from the start.
    peer.wake(Ready::WRITABLE);
    Ok((conn.transport(), peer))
}

/// The test's end of an in-memory connection.
pub struct Peer {
    pipe: Rc<RefCell<Pipe>>,
    lp: WeakLoop,
}

impl Peer {
    fn wake(&self, ready: Ready) {
        let key = self.pipe.borrow().key;
        if let (Some(key), Some(lp)) = (key, self.lp.upgrade()) {
            lp.wake_source(key, ready);
        }
    }

    /// Sends `data` to the protocol: `data_received` follows in the loop's
    /// next turn. Returns `false` (and drops `data`) if the connection is
    /// closed or the peer already sent its EOF or reset it.
    pub fn send(&self, data: &[u8]) -> bool {
        {
            let mut p = self.pipe.borrow_mut();
            if p.transport_closed || p.peer_eof || p.reset {
                return false;
            }
            p.inbound.extend_from_slice(data);
        }
        self.wake(Ready::READABLE);
        true
    }

    /// Half-closes from the peer's side: the protocol reads what was sent,
    /// then gets `eof_received`.
    pub fn send_eof(&self) {
        self.pipe.borrow_mut().peer_eof = true;
        self.wake(Ready::READABLE | Ready::READ_CLOSED);
    }

    /// Resets the connection from the peer's side: the next read or write
    /// fails with `ConnectionReset`, which aborts the connection with it.
    pub fn reset(&self) {
        {
            let mut p = self.pipe.borrow_mut();
            p.reset = true;
            p.inbound.clear();
        }
        self.wake(Ready::READABLE | Ready::WRITABLE | Ready::READ_CLOSED);
    }

    /// Takes what the protocol wrote so far.
    pub fn take_written(&self) -> Vec<u8> {
        std::mem::take(&mut self.pipe.borrow_mut().outbound)
    }

    /// Limits how many more bytes the "socket" takes before it says
    /// `WouldBlock` (`None`: no limit, the default). Raising it makes the
    /// socket writable again, as a peer that reads would.
    pub fn set_room(&self, room: Option<usize>) {
        self.pipe.borrow_mut().room = room;
        if room != Some(0) {
            self.wake(Ready::WRITABLE);
        }
    }

    /// Like [`set_room`](Self::set_room), without the writable edge: what a
    /// TCP socket does when its peer takes less than about a third of the
    /// send buffer (the kernel signals writable only past that). The
    /// transport finds the room when it next tries to write.
    pub fn set_room_quietly(&self, room: Option<usize>) {
        self.pipe.borrow_mut().room = room;
    }

    /// How many bytes the peer sent that the transport has not read yet: what
    /// a socket would hold in its receive buffer while reading is paused.
    pub fn unread(&self) -> usize {
        self.pipe.borrow().inbound.len()
    }

    /// How many writes reached the "socket": what would be system calls.
    pub fn write_calls(&self) -> u64 {
        self.pipe.borrow().writes
    }

    /// Whether the transport half-closed its writing side (`write_eof`).
    pub fn got_eof(&self) -> bool {
        self.pipe.borrow().transport_eof
    }

    /// Whether the transport's side is closed (close, abort, or loss).
    pub fn is_closed(&self) -> bool {
        self.pipe.borrow().transport_closed
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.pipe.borrow();
        f.debug_struct("Peer")
            .field("unread_by_protocol", &p.inbound.len())
            .field("unread_by_peer", &p.outbound.len())
            .field("closed", &p.transport_closed)
            .finish()
    }
}
