//! The connection core: one stream connection, whatever carries its bytes.
//!
//! Owns a connection's state and its source type (`conn.rs`: `Conn`, the
//! write path, connecting), its dispatch (`dispatch.rs`: connect completion,
//! flush, flow-control notes, reads, `connection_lost`), its deadlines
//! (`deadlines.rs`), its write buffer and flow control (`buffer.rs`) and the
//! socket I/O under it (`io.rs`: the [`Wire`](io::StreamIo) trait, TCP and
//! Unix sockets). Exposes the handles users hold: `Transport`
//! (`transport.rs`), `Connection`, `ProtocolRef`, `ProtocolFactory`
//! (`connection.rs`).
//!
//! This file holds what every connection shares, stream or datagram: its
//! phase, the one convention for calling a protocol (contained, reported, the
//! connection closed with the panic), and the read buffer.

pub(super) mod buffer;
pub(super) mod conn;
pub(super) mod connection;
mod deadlines;
mod dispatch;
pub(super) mod io;
pub(super) mod transport;

use crate::reactor::ExceptionContext;
use crate::{Failure, Loop};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

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

/// Equality and hashing of a transport handle: the same connection.
macro_rules! handle_identity {
    ($handle:ty) => {
        impl PartialEq for $handle {
            fn eq(&self, other: &Self) -> bool {
                std::rc::Weak::ptr_eq(&self.conn, &other.conn)
            }
        }

        impl Eq for $handle {}

        impl std::hash::Hash for $handle {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                std::rc::Weak::as_ptr(&self.conn).hash(h);
            }
        }
    };
}
pub(crate) use handle_identity;

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
}
