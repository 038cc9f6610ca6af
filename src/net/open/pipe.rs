//! A child process's pipes as streams: [`PipeIo`], a [`Wire`] over one
//! end of a non-blocking pipe, so a child's stdin gets the same write buffer
//! and flow control as a socket, and its stdout/stderr the same reads.
//! Owns `PipeIo` and `open`. Used by `crate::process`; tests: tests/process_*.rs.
//!
//! A write to a pipe whose reader is gone raises `SIGPIPE` in the writer —
//! fatal where it is left at `SIG_DFL` (a C host embedding the library), and
//! a pipe has no `MSG_NOSIGNAL`. So each write blocks `SIGPIPE` on this
//! thread, and if the write raised one (`EPIPE`), takes it with
//! `sigtimedwait` before unblocking: the signal a write raises is sent to
//! the writing thread, so the one taken is ours, whatever the disposition,
//! and the child still gets a real pipe (`/dev/stdin` opens, unlike a
//! socket's). One already pending before the write is left alone.

use crate::net::core::conn::Conn;
use crate::net::core::io::Wire;
use crate::net::{Protocol, SockAddr, Transport};
use crate::{Error, Loop};
use mio::unix::pipe::{Receiver, Sender};
use std::io::{self, Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::panic::Location;

/// One end of a pipe.
pub(crate) enum PipeIo {
    /// We write (a child's stdin). `None` once shut down: reads then say
    /// end-of-file, so a half-closed stdin ends like a socket.
    Write(Option<Sender>),
    /// We read (a child's stdout or stderr).
    Read(Receiver),
}

fn not_a_socket() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "a pipe has no address")
}

impl Wire for PipeIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PipeIo::Read(rx) => rx.read(buf),
            PipeIo::Write(Some(_)) => Err(io::ErrorKind::WouldBlock.into()),
            PipeIo::Write(None) => Ok(0),
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            PipeIo::Write(Some(tx)) => without_sigpipe(|| tx.write(data)),
            _ => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        if let PipeIo::Write(tx) = self {
            // Closing the fd also takes it out of the selector.
            drop(tx.take());
        }
        Ok(())
    }

    fn peer_addr(&self) -> io::Result<SockAddr> {
        Err(not_a_socket())
    }

    fn local_addr(&self) -> io::Result<SockAddr> {
        Err(not_a_socket())
    }

    fn register(&mut self, r: &mio::Registry, token: mio::Token) -> io::Result<()> {
        match self {
            PipeIo::Write(Some(tx)) => r.register(tx, token, mio::Interest::WRITABLE),
            PipeIo::Write(None) => Ok(()),
            PipeIo::Read(rx) => r.register(rx, token, mio::Interest::READABLE),
        }
    }

    fn deregister(&mut self, r: &mio::Registry) {
        let _ = match self {
            PipeIo::Write(Some(tx)) => r.deregister(tx),
            PipeIo::Write(None) => Ok(()),
            PipeIo::Read(rx) => r.deregister(rx),
        };
    }

    fn fd(&self) -> Option<RawFd> {
        match self {
            PipeIo::Write(Some(tx)) => Some(tx.as_raw_fd()),
            PipeIo::Write(None) => None,
            PipeIo::Read(rx) => Some(rx.as_raw_fd()),
        }
    }

    fn name(&self) -> &'static str {
        "pipe"
    }
}

/// Registers one end of a pipe as a connection with `proto`, and starts it
/// (`connection_made` at once). Returns its transport.
pub(crate) fn open(
    lp: &Loop,
    io: PipeIo,
    proto: Box<dyn Protocol>,
    at: &'static Location<'static>,
) -> Result<Transport, Error> {
    let conn = Conn::open(lp, Box::new(io), proto, None, at)?;
    // A child is ours, not a peer to guard against: one that reads its
    // stdin only after a long computation keeps it (set one if wanted).
    conn.set_write_timeout(lp, None);
    conn.start(lp);
    Ok(conn.transport())
}

/// Runs `write` with `SIGPIPE` blocked on this thread and takes away the one
/// it raised, if it did: the write then fails with `EPIPE` and nothing else.
fn without_sigpipe(write: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    let mut pipe: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, and `old` is filled by pthread_sigmask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to sets on our stack; pthread_sigmask changes
    // this thread's mask only, and is restored below on every path.
    let blocked = unsafe {
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) == 0
    };
    if !blocked {
        return write();
    }
    // SAFETY: sigpending fills a set on our stack.
    let was_pending = unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1
    };
    let r = write();
    if !was_pending && matches!(&r, Err(e) if e.kind() == io::ErrorKind::BrokenPipe) {
        let now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            // SAFETY: sigtimedwait with a zero timeout takes a pending
            // SIGPIPE (blocked, so it is still pending) or returns -1.
            let got = unsafe { libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now) };
            if got != -1 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
    }
    // SAFETY: restores this thread's mask as it was.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}
