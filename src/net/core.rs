//! What every connection shares, stream or datagram: its phase, the one
//! convention for calling a protocol (contained, reported, the connection
//! closed with the panic), and the read buffer.

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
/// ([`READ_BUDGET`](super::READ_BUDGET)), so a message of up to 256 KiB takes
/// one `recv` (asyncio reads 256 KiB too). One per thread, reused.
pub(crate) const READ_BUFFER_SIZE: usize = 256 * 1024;

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Takes the thread's read buffer for the length of one dispatch (allocated on
/// first use); [`put_read_buf`] gives it back.
pub(crate) fn take_read_buf() -> Vec<u8> {
    let b = READ_BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
    if b.len() == READ_BUFFER_SIZE {
        b
    } else {
        vec![0; READ_BUFFER_SIZE]
    }
}

pub(crate) fn put_read_buf(b: Vec<u8>) {
    READ_BUF.with(|slot| *slot.borrow_mut() = b);
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
