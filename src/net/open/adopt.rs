//! Sockets made elsewhere, taken over by a loop: a listening socket bound with
//! `SO_REUSEPORT` (one per loop, the kernel spreading connections over them),
//! any `std` listener, and a connection accepted on another thread and handed
//! over (the portable way to spread connections: src/cores/).
//! Tests: tests/cores.rs, tests/net_adopt.rs.

use crate::net::core::connection::ProtocolFactory;
use crate::net::core::io::{Tcp, Wire};
use crate::net::open::listener::{self, ListenSock, Listener};
use crate::net::{core::conn::Conn, Protocol, SockAddr, Transport};
use crate::{Error, Loop};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;
use std::panic::Location;

impl Loop {
    /// Listens on a socket bound elsewhere (made non-blocking here); as
    /// [`listen_tcp`](Self::listen_tcp) otherwise. With [`bind_reuseport`],
    /// each of several loops listens on its own socket on the same port.
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] if the socket is not a listening
    /// TCP socket the selector takes.
    #[track_caller]
    pub fn listen_tcp_std<P: Protocol, A>(
        &self,
        listener: TcpListener,
        mut factory: impl ProtocolFactory<P, A>,
    ) -> Result<Listener, Error> {
        let factory: listener::Factory = Box::new(move |peer| Box::new(factory.build(peer)));
        self.listen_tcp_boxed(listener, factory, Location::caller())
    }

    pub(crate) fn listen_tcp_boxed(
        &self,
        listener: TcpListener,
        factory: listener::Factory,
        at: &'static Location<'static>,
    ) -> Result<Listener, Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        listener.set_nonblocking(true)?;
        let local = SockAddr::Inet(listener.local_addr()?);
        let sock = mio::net::TcpListener::from_std(listener);
        listener::listen(self, ListenSock::Tcp(sock), factory, local, None, at)
    }

    /// Takes over a connected TCP stream (accepted on another thread, say):
    /// it gets `TCP_NODELAY` and `protocol`, whose `connection_made` is
    /// called as for an accepted connection. Returns its transport.
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] if the stream cannot be made
    /// non-blocking or registered.
    #[track_caller]
    pub fn adopt_tcp<P: Protocol>(
        &self,
        stream: TcpStream,
        protocol: P,
    ) -> Result<Transport, Error> {
        self.adopt_boxed(stream, Box::new(protocol), Location::caller())
    }

    pub(crate) fn adopt_boxed(
        &self,
        stream: TcpStream,
        protocol: Box<dyn Protocol>,
        at: &'static Location<'static>,
    ) -> Result<Transport, Error> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        stream.set_nonblocking(true)?;
        let _ = stream.set_nodelay(true);
        let io = Box::new(Tcp(mio::net::TcpStream::from_std(stream))) as Box<dyn Wire>;
        let conn = Conn::open(self, io, protocol, None, at)?;
        conn.start(self);
        Ok(conn.transport())
    }
}

/// Binds a listening TCP socket on `addr` with `SO_REUSEADDR` and
/// `SO_REUSEPORT`, so that other sockets can bind the same address: on Linux
/// the kernel then spreads new connections over them (by a hash of the
/// peer's address and port). Port 0 picks a free port; bind the others to the
/// port the first got.
///
/// On the BSDs and macOS the option lets sockets share the port but does not
/// spread connections: hand accepted ones over instead (see `cores`).
///
/// # Errors
/// The OS error of `socket`, `setsockopt`, `bind` or `listen` (`AddrInUse`
/// if a socket without `SO_REUSEPORT`, or another user's, holds `addr`).
pub fn bind_reuseport(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let fd = cloexec_socket(domain)?;
    // SAFETY: `fd` was just returned by `socket` and is owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    for opt in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
        let on: libc::c_int = 1;
        // SAFETY: the option value is a live `c_int` and its size is given.
        check(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })?;
    }
    // SAFETY: `sockaddr_storage` is plain data, for which zeroes are valid;
    // `write_sockaddr` fills a prefix of it and returns that prefix's length.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = write_sockaddr(addr, &mut storage);
    // SAFETY: `storage` holds a valid address of `len` bytes for `domain`.
    check(unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) })?;
    // SAFETY: `fd` is a bound stream socket.
    check(unsafe { libc::listen(fd, 1024) })?;
    let l = TcpListener::from(sock);
    debug_assert_eq!(l.as_raw_fd(), fd);
    Ok(l)
}

/// A new stream socket, close-on-exec from its creation: set by `fcntl`
/// afterwards, a `fork` + `exec` on another thread in between would leak it
/// into the child (keeping the port bound there). macOS has no
/// `SOCK_CLOEXEC`: there the flag can only be set after.
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
fn cloexec_socket(domain: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: plain system call; its result is checked before use.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

#[cfg(any(target_os = "macos", target_os = "ios"))]
fn cloexec_socket(domain: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: plain system call; its result is checked before use.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is an open descriptor; FD_CLOEXEC only affects `exec`.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: `fd` is ours and not used after.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `addr` into `storage` as a `sockaddr_in`/`sockaddr_in6`.
fn write_sockaddr(addr: SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: `sockaddr_storage` is at least as large and as aligned
            // as `sockaddr_in` (that is its purpose); all zeroes is valid.
            let sin = unsafe {
                &mut *(storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            set_len(sin, size_of::<libc::sockaddr_in>());
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let sin6 = unsafe {
                &mut *(storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            set_len(sin6, size_of::<libc::sockaddr_in6>());
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The BSDs' `sin_len`/`sin6_len` field; Linux has none.
trait SetLen {
    fn set_len(&mut self, n: usize);
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
mod bsd_len {
    impl super::SetLen for libc::sockaddr_in {
        fn set_len(&mut self, n: usize) {
            self.sin_len = n as u8;
        }
    }
    impl super::SetLen for libc::sockaddr_in6 {
        fn set_len(&mut self, n: usize) {
            self.sin6_len = n as u8;
        }
    }
}

#[cfg(not(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
mod no_len {
    impl super::SetLen for libc::sockaddr_in {
        fn set_len(&mut self, _: usize) {}
    }
    impl super::SetLen for libc::sockaddr_in6 {
        fn set_len(&mut self, _: usize) {}
    }
}

fn set_len(sa: &mut impl SetLen, n: usize) {
    sa.set_len(n);
}
