//! The connection core: one stream connection, whatever carries its bytes.
//!
//! Owns a connection's state (`state.rs`: `ConnState`, whether a read may be
//! made now), its source type (`conn.rs`: `Conn`, the write path,
//! connecting), its dispatch (`dispatch.rs`: connect completion,
//! flush, flow-control notes, reads, `connection_lost`), its deadlines
//! (`deadlines.rs`), its write buffer and flow control (`buffer.rs`) and the
//! socket I/O under it (`io.rs`: the [`Wire`](io::Wire) trait, TCP and
//! Unix sockets). Exposes the handles users hold: `Transport`
//! (`transport.rs`), `Connection`, `ProtocolRef`, `ProtocolFactory`
//! (`connection.rs`); and to the rest of `net/` (connecting, listeners,
//! TLS) a few named operations (`ops.rs`): the state's fields are private
//! to this folder.
//!
//! This file holds what every connection shares, stream or datagram: its
//! phase, the one convention for calling a protocol (contained, reported, the
//! connection closed with the panic), the read buffer, and `WeakConn`, the
//! one weak handle under every transport; and `enter`, how a stream joins
//! the loop.

pub(super) mod buffer;
pub(super) mod conn;
pub(super) mod connection;
mod deadlines;
mod dispatch;
pub(super) mod io;
mod ops;
pub(crate) mod ss;
mod state;
pub(super) mod transport;

use crate::reactor::{ExceptionContext, Source, SourceKey, WeakLoop};
use crate::{Error, Failure, Loop};
use std::cell::RefCell;
use std::os::unix::io::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::{Rc, Weak};

/// Where a connection is in its life. `connection_lost` is owed from the
/// moment `connection_made` ran until the phase is `Lost`.
pub(crate) enum Phase {
    /// A connect in progress (streams only).
    Connecting,
    Open,
    /// `close()` was called: no more reading; flush, then close, then give
    /// `connection_lost` this reason.
    Closing(Option<Failure>),
    /// The socket is closed; `connection_lost(reason)` is still owed.
    Closed(Option<Failure>),
    /// Nothing more to deliver; the source leaves the registry.
    Lost,
}

impl Phase {
    pub(crate) fn is_open(&self) -> bool {
        matches!(self, Phase::Open | Phase::Closing(_))
    }
}

/// How a stream connection (`Conn`) enters the loop (a UDP socket is an
/// `EventSource`, `net/udp/socket.rs`): `make` gets a fresh key and the
/// selector, registers its descriptor under the key and builds the source,
/// returning the descriptor to claim (a second `add_reader` on it is then
/// refused); the source goes in the registry. What follows differs by kind
/// (`connection_made` at once, or after a connect).
pub(crate) fn enter<C: Source + 'static>(
    lp: &Loop,
    at: &'static Location<'static>,
    make: impl FnOnce(SourceKey, &mio::Registry) -> std::io::Result<(C, Option<RawFd>)>,
) -> Result<Rc<C>, Error> {
    let mut made = None;
    let key = lp.insert_source(at, |key, r| {
        let (source, fd) = make(key, r)?;
        let source = Rc::new(source);
        made = Some((source.clone(), fd));
        Ok(source as Rc<dyn Source>)
    })?;
    let (source, fd) = made.expect("built");
    if let Some(fd) = fd {
        lp.claim_fd(fd, key);
    }
    Ok(source)
}

/// Runs one protocol method, containing a panic: the panic is reported to the
/// exception handler with `message` and comes back as a failure, for the
/// caller to close the connection with.
pub(crate) fn contain(
    lp: &Loop,
    at: &'static Location<'static>,
    message: &str,
    f: impl FnOnce(),
) -> Option<Failure> {
    let payload = catch_unwind(AssertUnwindSafe(f)).err()?;
    let failure = Failure::from_panic(payload, at);
    lp.call_exception_handler(&ExceptionContext {
        message,
        failure: Some(&failure),
        location: Some(at),
    });
    Some(failure)
}

/// The size of the read buffer every connection on a thread reads into: as
/// large as a connection's read budget per dispatch
/// ([`Limits::read_budget`](crate::net::Limits::read_budget)), so a message of up to 256 KiB takes
/// one `recv` (asyncio reads 256 KiB too). One per thread, reused.
pub(crate) const READ_BUFFER_SIZE: usize = 256 * 1024;

const PAGE: usize = 4096;

/// One page of the read buffer: the buffer is page-aligned, as the kernel's
/// own socket pages are. A `Vec` of 256 KiB is a fresh `mmap` 16 bytes into a
/// page, and the kernel's copies to and from such a buffer measured up to
/// twice as slow for messages of whole pages (BENCHMARKS.md, "Read buffer
/// alignment").
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// The thread's read buffer: [`READ_BUFFER_SIZE`] page-aligned bytes.
pub(crate) struct ReadBuf(Box<[Page]>);

impl ReadBuf {
    fn new() -> ReadBuf {
        ReadBuf(vec![Page([0; PAGE]); READ_BUFFER_SIZE / PAGE].into_boxed_slice())
    }
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `Page` is `repr(C)` around a byte array whose size equals
        // its alignment, so the pages are `len * PAGE` contiguous, initialised
        // bytes with no padding, borrowed for as long as `self` is.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * PAGE) }
    }
}

impl std::ops::DerefMut for ReadBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably for as long as `self` is.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * PAGE) }
    }
}

thread_local! {
    static READ_BUF: RefCell<Option<ReadBuf>> = const { RefCell::new(None) };
}

/// Takes the thread's read buffer for the length of one dispatch (allocated on
/// first use); [`put_read_buf`] gives it back.
pub(crate) fn take_read_buf() -> ReadBuf {
    READ_BUF
        .with(|b| b.borrow_mut().take())
        .unwrap_or_else(ReadBuf::new)
}

pub(crate) fn put_read_buf(b: ReadBuf) {
    READ_BUF.with(|slot| *slot.borrow_mut() = Some(b));
}

/// A connection's source, as its weak handle reaches it: the loop it
/// belongs to (held weakly) and its state (borrowed only while no user code
/// runs). `Conn` (a stream) and `Dgram` (a UDP socket) are.
pub(crate) trait Reachable: 'static {
    type State;
    fn state(&self) -> &RefCell<Self::State>;
    fn weak_loop(&self) -> &WeakLoop;
}

/// The one weak handle under [`Transport`](crate::net::Transport),
/// [`DatagramTransport`](crate::net::DatagramTransport) and
/// [`ProtocolRef`](crate::net::ProtocolRef): it keeps neither the connection
/// nor the loop alive, does nothing once they are gone, and two are equal
/// (and hash alike) when they name the same connection.
pub(crate) struct WeakConn<C>(Weak<C>);

impl<C> WeakConn<C> {
    pub(crate) fn new(conn: &Rc<C>) -> Self {
        WeakConn(Rc::downgrade(conn))
    }

    /// A handle to no connection (one that failed before it existed).
    pub(crate) fn dangling() -> Self {
        WeakConn(Weak::new())
    }

    pub(crate) fn upgrade(&self) -> Option<Rc<C>> {
        self.0.upgrade()
    }

    pub(crate) fn strong_count(&self) -> usize {
        self.0.strong_count()
    }
}

impl<C: Reachable> WeakConn<C> {
    /// The connection and its loop, while both exist.
    pub(crate) fn live(&self) -> Option<(Rc<C>, Loop)> {
        let conn = self.0.upgrade()?;
        let lp = conn.weak_loop().upgrade()?;
        Some((conn, lp))
    }

    /// The connection's loop, while both exist.
    pub(crate) fn event_loop(&self) -> Option<Loop> {
        self.live().map(|(_, lp)| lp)
    }

    /// Runs `f` on the connection's state, while the connection exists.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut C::State) -> R) -> Option<R> {
        let conn = self.0.upgrade()?;
        let mut st = conn.state().borrow_mut();
        Some(f(&mut st))
    }
}

impl<C> From<Weak<C>> for WeakConn<C> {
    fn from(w: Weak<C>) -> Self {
        WeakConn(w)
    }
}

impl<C> Clone for WeakConn<C> {
    fn clone(&self) -> Self {
        WeakConn(self.0.clone())
    }
}

impl<C> PartialEq for WeakConn<C> {
    fn eq(&self, other: &Self) -> bool {
        Weak::ptr_eq(&self.0, &other.0)
    }
}

impl<C> Eq for WeakConn<C> {}

impl<C> std::hash::Hash for WeakConn<C> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        Weak::as_ptr(&self.0).hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_buffer_is_page_aligned_zeroed_and_reused() {
        let mut b = take_read_buf();
        assert_eq!(b.len(), READ_BUFFER_SIZE);
        assert_eq!(b.as_ptr() as usize % PAGE, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[READ_BUFFER_SIZE - 1] = 7;
        let at = b.as_ptr();
        put_read_buf(b);
        let b = take_read_buf();
        assert_eq!((b.as_ptr(), b[READ_BUFFER_SIZE - 1]), (at, 7));
        put_read_buf(b);
    }

    struct Cell(RefCell<u32>, WeakLoop);

    impl Reachable for Cell {
        type State = u32;
        fn state(&self) -> &RefCell<u32> {
            &self.0
        }
        fn weak_loop(&self) -> &WeakLoop {
            &self.1
        }
    }

    #[test]
    fn a_weak_handle_names_its_connection_and_does_nothing_once_it_is_gone() {
        let a = Rc::new(Cell(RefCell::new(1), WeakLoop::default()));
        let b = Rc::new(Cell(RefCell::new(2), WeakLoop::default()));
        let (ha, hb) = (WeakConn::new(&a), WeakConn::new(&b));
        assert!(ha == ha.clone() && ha != hb);
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        assert_eq!(s.hash_one(&ha), s.hash_one(WeakConn::new(&a)));
        assert_ne!(s.hash_one(&ha), s.hash_one(&hb));
        assert_eq!(ha.with(|n| *n += 10), Some(()));
        assert_eq!(*a.0.borrow(), 11);
        // No loop: the connection is there, but not live.
        assert!(ha.live().is_none());
        drop(a);
        assert_eq!(ha.with(|n| *n), None);
        assert_eq!(ha.strong_count(), 0);
        assert!(WeakConn::<Cell>::dangling().upgrade().is_none());
    }
}
