//! What carries a connection's bytes: the [`Wire`] trait (a socket, a pipe,
//! memory, or TLS over another wire) and its two kernel implementations, TCP
//! and Unix sockets. Everything else about
//! a connection (buffering, flow control, the protocol's calls) is written once,
//! in `conn.rs`; the in-memory transport and a child's pipes (`net/open/`)
//! implement the same trait.

use crate::net::SockAddr;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::unix::io::{AsRawFd, RawFd};

/// How much of a multi-part write is copied into one `write` (see
/// [`write_vectored`]).
const COALESCE: usize = 4096;

/// What a layer says of its input after a read ([`Wire::input`]).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Input {
    /// It holds input of its own after a short read (TLS: the peer's
    /// close_notify, or an error, met after some data): read again without
    /// waiting for the socket's next edge.
    pub(crate) held: bool,
    /// The read stopped on a budget of the layer's own (TLS: the default
    /// [`Limits::read_budget`](crate::net::Limits::read_budget) of records
    /// that carried little plaintext) with the socket maybe still
    /// readable: read again next turn, as when the core's own budget runs
    /// out. Said once.
    pub(crate) spent: bool,
    /// Writes it refused for a reason other than a full socket (a
    /// handshake, now done) may go on. Said once.
    pub(crate) writable: bool,
}

/// What output of its own a layer holds ([`Wire::output`]).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Output {
    /// Output not yet on the socket (TLS: records, close_notify): the core
    /// sends it with [`Wire::flush_output`] when the socket is writable.
    pub(crate) pending: bool,
    /// Bytes the layer wrote to the socket so far, in all; `None` for a
    /// plain stream, whose socket takes straight from the core's buffer.
    /// Where the write timeout's check looks for progress: a layer's buffer
    /// shrinking says only that the layer took the bytes, not the socket.
    pub(crate) sent: Option<u64>,
    /// A handshake holds writes back (not the peer): the write timeout
    /// leaves that wait to the handshake's own deadline.
    pub(crate) handshaking: bool,
}

/// What carries a connection's bytes, connected or connecting, as the
/// connection core uses it.
/// Every method is non-blocking: `WouldBlock` means "not now".
pub(crate) trait Wire: 'static {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// Reads at most `max` bytes into `buf`'s spare capacity, appending them
    /// (a protocol's own buffer, see `Protocol::get_buffer`). `None`: this
    /// stream cannot (a layer, memory); the core reads into its own buffer
    /// and copies.
    fn read_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Option<io::Result<usize>> {
        let _ = (buf, max);
        None
    }
    fn write(&mut self, data: &[u8]) -> io::Result<usize>;
    /// Writes a prefix of `parts`; see [`write_vectored`].
    fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        write_vectored(self, parts)
    }
    fn shutdown_write(&mut self) -> io::Result<()>;
    /// The outcome of a connect in progress: `Ok(true)` connected,
    /// `Ok(false)` not yet, `Err` failed.
    fn connect_result(&mut self) -> io::Result<bool> {
        Ok(true)
    }
    /// A pending socket error (`SO_ERROR`), such as a reset that arrived
    /// while the connection was not being read.
    fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        Ok(None)
    }
    fn peer_addr(&self) -> io::Result<SockAddr>;
    fn local_addr(&self) -> io::Result<SockAddr>;
    /// Registers the descriptor, if any, for reading and writing.
    fn register(&mut self, r: &mio::Registry, token: mio::Token) -> io::Result<()>;
    fn deregister(&mut self, r: &mio::Registry);
    fn fd(&self) -> Option<RawFd> {
        None
    }
    fn name(&self) -> &'static str;
    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        let _ = on;
        Err(io::ErrorKind::Unsupported.into())
    }
    fn nodelay(&self) -> io::Result<bool> {
        Err(io::ErrorKind::Unsupported.into())
    }

    // A stream layered over another (TLS, `net/tls`) answers one question
    // per direction: after a read, what it says of its input; and what
    // output of its own it holds, which `flush_output` sends. A plain
    // socket holds nothing of its own: each default says so.

    /// What the layer says after a read; see [`Input`].
    fn input(&mut self) -> Input {
        Input::default()
    }
    /// What output of its own the layer holds; see [`Output`].
    fn output(&self) -> Output {
        Output::default()
    }
    /// Writes the layer's own output, and with `closing` its last words
    /// first (TLS: close_notify, before a graceful close closes the
    /// socket): `Ok(true)` once none is left, `Ok(false)` if the socket is
    /// full (a writable edge will follow).
    fn flush_output(&mut self, closing: bool) -> io::Result<bool> {
        let _ = closing;
        Ok(true)
    }
    /// The layer itself, for the module that made it (`net/tls` asks its
    /// session through it); `None` for a plain stream. The core never looks.
    fn layer(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Writes a prefix of `parts` to the socket `s`: one `sendmsg` with
/// `MSG_NOSIGNAL` where the system has that flag. (`writev` takes no flags,
/// so it cannot say `MSG_NOSIGNAL` as std's `write` on a socket does: a
/// write to a peer that vanished would raise SIGPIPE and kill a process that
/// does not ignore it; tests/net_faults.rs runs that case with SIGPIPE at
/// its default action.) Elsewhere, [`write_vectored`]'s copy.
fn socket_write_vectored<S: Wire + AsRawFd + ?Sized>(
    s: &mut S,
    parts: &[IoSlice<'_>],
) -> io::Result<usize> {
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    ))]
    if parts.len() > 1 {
        /// At most this many parts go to one `sendmsg` (far below any
        /// `IOV_MAX`; rustls hands over at most 64 records at a time).
        const MAX_PARTS: usize = 64;
        let parts = &parts[..parts.len().min(MAX_PARTS)];
        // SAFETY: an all-zero `msghdr` is a valid one: no address, no
        // control data, no parts.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // `IoSlice` is ABI-compatible with `iovec` on Unix (std's
        // documentation), and `sendmsg` only reads the parts.
        msg.msg_iov = parts.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = parts.len() as _;
        // SAFETY: `s` owns the open socket `fd`; `msg` points at `parts`,
        // borrowed for the whole call.
        let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        return if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        };
    }
    write_vectored(s, parts)
}

/// Writes a prefix of `parts`, as `writev` would, but through `write`: for
/// a stream with no vectored write of its own (the in-memory one), and
/// sockets on systems without `MSG_NOSIGNAL` (see [`socket_write_vectored`]).
/// The parts are copied into one buffer, up to 4 KiB, and sent with one
/// `write`: still one call for a header and a body; a first part at least
/// that large is written alone, uncopied.
pub(crate) fn write_vectored<S: Wire + ?Sized>(
    s: &mut S,
    parts: &[IoSlice<'_>],
) -> io::Result<usize> {
    let first = parts.first().map_or(&[][..], |p| &p[..]);
    if parts.len() == 1 || first.len() >= COALESCE {
        return s.write(first);
    }
    let mut buf = [0u8; COALESCE];
    let mut n = 0;
    for p in parts {
        let k = p.len().min(COALESCE - n);
        buf[n..n + k].copy_from_slice(&p[..k]);
        n += k;
        if n == COALESCE {
            break;
        }
    }
    s.write(&buf[..n])
}

/// Reads at most `max` bytes from the socket `fd` into `buf`'s spare
/// capacity, appending them: `read(2)` into memory not yet initialised, so
/// nothing is zeroed or copied first.
fn read_spare(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    let max = max.min(spare.len());
    // SAFETY: `spare` is `max` or more bytes of `buf`'s allocation, owned and
    // not otherwise borrowed; `read` only writes them (an uninitialised byte
    // is never read through a reference), and writes at most `max`.
    let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), max) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: `read` initialised the first `n <= max` spare bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// What a kernel stream socket needs beyond `Read + Write`.
macro_rules! kernel_stream {
    ($ty:ty, $name:expr, $addr:expr) => {
        impl Wire for $ty {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                Read::read(self, buf)
            }
            fn read_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Option<io::Result<usize>> {
                Some(read_spare(self.as_raw_fd(), buf, max))
            }
            fn write(&mut self, data: &[u8]) -> io::Result<usize> {
                Write::write(self, data)
            }
            fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
                socket_write_vectored(self, parts)
            }
            fn shutdown_write(&mut self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
            fn take_error(&mut self) -> io::Result<Option<io::Error>> {
                <$ty>::take_error(self)
            }
            fn connect_result(&mut self) -> io::Result<bool> {
                if let Some(e) = <$ty>::take_error(self)? {
                    return Err(e);
                }
                match self.peer_addr() {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                    Err(e) => Err(e),
                }
            }
            fn peer_addr(&self) -> io::Result<SockAddr> {
                <$ty>::peer_addr(self).map($addr)
            }
            fn local_addr(&self) -> io::Result<SockAddr> {
                <$ty>::local_addr(self).map($addr)
            }
            fn register(&mut self, r: &mio::Registry, token: mio::Token) -> io::Result<()> {
                r.register(
                    self,
                    token,
                    mio::Interest::READABLE | mio::Interest::WRITABLE,
                )
            }
            fn deregister(&mut self, r: &mio::Registry) {
                let _ = r.deregister(self);
            }
            fn fd(&self) -> Option<RawFd> {
                Some(self.as_raw_fd())
            }
            fn name(&self) -> &'static str {
                $name
            }
        }
    };
}

kernel_stream!(mio::net::TcpStream, "tcp", SockAddr::Inet);
kernel_stream!(mio::net::UnixStream, "unix", SockAddr::from_unix);

/// TCP's own options. (A macro cannot add methods to only one of two types,
/// and a second trait would be heavier than this.)
pub(crate) struct Tcp(pub(crate) mio::net::TcpStream);

impl Wire for Tcp {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Wire::read(&mut self.0, buf)
    }
    fn read_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Option<io::Result<usize>> {
        Wire::read_into(&mut self.0, buf, max)
    }
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        Wire::write(&mut self.0, data)
    }
    fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        Wire::write_vectored(&mut self.0, parts)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.0.shutdown_write()
    }
    fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        Wire::take_error(&mut self.0)
    }
    fn connect_result(&mut self) -> io::Result<bool> {
        let up = self.0.connect_result()?;
        if up {
            let _ = self.0.set_nodelay(true);
        }
        Ok(up)
    }
    fn peer_addr(&self) -> io::Result<SockAddr> {
        Wire::peer_addr(&self.0)
    }
    fn local_addr(&self) -> io::Result<SockAddr> {
        Wire::local_addr(&self.0)
    }
    fn register(&mut self, r: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.0.register(r, token)
    }
    fn deregister(&mut self, r: &mio::Registry) {
        Wire::deregister(&mut self.0, r)
    }
    fn fd(&self) -> Option<RawFd> {
        Some(self.0.as_raw_fd())
    }
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.0.set_nodelay(on)
    }
    fn nodelay(&self) -> io::Result<bool> {
        self.0.nodelay()
    }
}
