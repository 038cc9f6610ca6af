//! Stream connections (TCP and Unix): the state the registry keeps for each,
//! its dispatch in step 6, and the [`Transport`] handle. Owns `StreamState`,
//! `Transport`.
//!
//! Readiness: a connection is registered once, for reading *and* writing,
//! edge-triggered. The loop keeps "readable" and "writable" flags per connection
//! and clears them only when the socket says `WouldBlock` (or a read comes back
//! short: the kernel had no more); so no `epoll_ctl` is ever made on the data
//! path, and a protocol that pauses reading loses no wake-up.
//!
//! A dispatch: (connect completion) → flush the write buffer → tell the protocol
//! about flow control → read, at most [`READ_BUDGET`] bytes, one `data_received`
//! per read → tell it again → deliver `connection_lost` if the connection closed.
//! If the budget ran out with data left, the connection queues itself for the
//! next turn instead of starving the others.
//! Tests: tests/net_tcp_*.rs, tests/net_unix.rs, tests/net_faults.rs.

use super::buffer::WriteBuf;
use super::{Protocol, SockAddr};
use crate::reactor::io::{IoCtx, IoKey, Kind, Registry};
use crate::{fail, Deferred, Error, Failure, Loop, Resolver};
use smallvec::SmallVec;
use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::panic::Location;

#[cfg(unix)]
use std::os::unix::io::{AsRawFd, RawFd};

/// Bytes read from one connection in one dispatch, at most; then the others
/// get their turn (asyncio reads 256 KiB per callback, once per turn).
pub const READ_BUDGET: usize = 256 * 1024;

/// How much of a multi-part write is copied into one `write` (see
/// `Sock::write_vectored`).
const COALESCE: usize = 4096;

/// A connected stream socket.
pub(crate) enum Sock {
    Tcp(mio::net::TcpStream),
    #[cfg(unix)]
    Unix(mio::net::UnixStream),
}

impl Sock {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Sock::Unix(s) => (&*s).read(buf),
        }
    }

    fn write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write(data),
            #[cfg(unix)]
            Sock::Unix(s) => (&*s).write(data),
        }
    }

    /// Writes a prefix of `parts`, as `writev` would, but through `write`.
    ///
    /// `writev` takes no flags, so it cannot say `MSG_NOSIGNAL` as std's
    /// `write` on a socket does: a write to a peer that vanished (a Unix
    /// peer gone, a TCP peer gone after half-closing) would raise SIGPIPE
    /// and kill a process that does not ignore it. So the parts are copied
    /// into one buffer, up to [`COALESCE`] bytes, and sent with one `write`:
    /// still one system call for a header and a body; a first part at least
    /// that large is written alone, uncopied.
    fn write_vectored(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        let first = parts.first().map_or(&[][..], |p| &p[..]);
        if parts.len() == 1 || first.len() >= COALESCE {
            return self.write(first);
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
        self.write(&buf[..n])
    }

    fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Write),
            #[cfg(unix)]
            Sock::Unix(s) => s.shutdown(Shutdown::Write),
        }
    }

    fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Sock::Tcp(s) => s.take_error(),
            #[cfg(unix)]
            Sock::Unix(s) => s.take_error(),
        }
    }

    fn peer_addr(&self) -> io::Result<SockAddr> {
        match self {
            Sock::Tcp(s) => s.peer_addr().map(SockAddr::Inet),
            #[cfg(unix)]
            Sock::Unix(s) => s.peer_addr().map(SockAddr::from_unix),
        }
    }

    fn local_addr(&self) -> io::Result<SockAddr> {
        match self {
            Sock::Tcp(s) => s.local_addr().map(SockAddr::Inet),
            #[cfg(unix)]
            Sock::Unix(s) => s.local_addr().map(SockAddr::from_unix),
        }
    }

    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            #[cfg(unix)]
            Sock::Unix(s) => s,
        }
    }

    #[cfg(unix)]
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
}

enum Phase {
    /// `connect` in progress: fires the resolver when it completes.
    Connecting {
        resolver: Option<Resolver<Transport>>,
        to: SockAddr,
    },
    Open,
    /// `close()` was called: no more reading; flush, then close, then give
    /// `connection_lost` this reason.
    Closing(Option<Failure>),
    /// The socket is closed; `connection_lost(reason)` is still owed.
    Closed(Option<Failure>),
    /// Nothing more to deliver (the source is about to leave the registry).
    Lost,
}

/// What the registry keeps for one stream connection.
pub(crate) struct StreamState {
    sock: Option<Sock>,
    /// `None` while a dispatch holds it, and after `connection_lost`.
    proto: Option<Box<dyn Protocol>>,
    phase: Phase,
    wbuf: WriteBuf,
    read_ready: bool,
    /// The peer's FIN (or a hang-up) was signalled: read until end-of-file,
    /// even after a short read.
    read_closed: bool,
    write_ready: bool,
    reading_paused: bool,
    eof_received: bool,
    eof_requested: bool,
    eof_written: bool,
    /// `connection_made` was called, so `connection_lost` is owed.
    made: bool,
    dropped_writes: u64,
}

impl StreamState {
    pub(crate) fn kind_name(&self) -> &'static str {
        match self.sock {
            #[cfg(unix)]
            Some(Sock::Unix(_)) => "unix",
            _ => "tcp",
        }
    }

    fn can_read(&self) -> bool {
        matches!(self.phase, Phase::Open)
            && self.read_ready
            && !self.reading_paused
            && !self.eof_received
            && self.sock.is_some()
    }

    fn accepts_writes(&self) -> bool {
        matches!(self.phase, Phase::Open) && !self.eof_requested && self.sock.is_some()
    }

    fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Closing(_))
    }

    /// Whether a dispatch would have work to do right now.
    fn wants_dispatch(&self) -> bool {
        self.can_read()
            || matches!(self.phase, Phase::Closed(_))
            || (self.is_open() && self.wbuf.flow.has_note())
            || (self.write_ready && !self.wbuf.is_empty() && self.sock.is_some())
    }

    /// What `Loop::close` must finish: the owed `connection_lost` (protocol
    /// and reason), or the resolver of a connect still in progress.
    pub(crate) fn take_for_close(&mut self) -> ClosingStream {
        let phase = std::mem::replace(&mut self.phase, Phase::Lost);
        match phase {
            Phase::Connecting { resolver, .. } => ClosingStream::Connecting(resolver),
            Phase::Lost => ClosingStream::Nothing,
            _ if !self.made => ClosingStream::Nothing,
            Phase::Closed(reason) => match self.proto.take() {
                Some(p) => ClosingStream::Lost(p, reason),
                None => ClosingStream::Nothing,
            },
            Phase::Open | Phase::Closing(None) => match self.proto.take() {
                Some(p) => ClosingStream::Lost(p, Some(Failure::new(Error::Closed))),
                None => ClosingStream::Nothing,
            },
            Phase::Closing(reason) => match self.proto.take() {
                Some(p) => ClosingStream::Lost(p, reason),
                None => ClosingStream::Nothing,
            },
        }
    }
}

/// See [`StreamState::take_for_close`].
pub(crate) enum ClosingStream {
    Nothing,
    Connecting(Option<Resolver<Transport>>),
    Lost(Box<dyn Protocol>, Option<Failure>),
}

fn state(io: &mut Registry, key: IoKey) -> Option<&mut StreamState> {
    match &mut io.get_mut(key)?.kind {
        Kind::Stream(s) => Some(s),
        _ => None,
    }
}

/// Registers a new stream socket, connected or connecting, for reading and
/// writing (edge-triggered, once for its whole life).
pub(crate) fn register(
    lp: &Loop,
    mut sock: Sock,
    proto: Option<Box<dyn Protocol>>,
    connecting: Option<SockAddr>,
    at: &'static Location<'static>,
) -> io::Result<IoKey> {
    let mut cx = lp.io_ctx();
    let key = cx.io.vacant_key();
    let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
    cx.poll
        .registry()
        .register(sock.source(), key.token(), interest)?;
    #[cfg(unix)]
    cx.io
        .set_fd(sock.fd(), key, crate::reactor::io::Owner::Transport);
    let phase = match connecting {
        Some(to) => Phase::Connecting { resolver: None, to },
        None => Phase::Open,
    };
    let state = StreamState {
        sock: Some(sock),
        proto,
        phase,
        wbuf: WriteBuf::default(),
        read_ready: false,
        read_closed: false,
        write_ready: false,
        reading_paused: false,
        eof_received: false,
        eof_requested: false,
        eof_written: false,
        made: false,
        dropped_writes: 0,
    };
    cx.io.insert_at(key, Kind::Stream(state), at);
    cx.io.get_mut(key).expect("just inserted").interest = Some(interest);
    Ok(key)
}

/// Registers a connecting socket and returns the Deferred of its transport.
/// Cancelling it removes the socket; the protocol is dropped uncalled.
#[track_caller]
pub(crate) fn connect(
    lp: &Loop,
    sock: Sock,
    to: SockAddr,
    proto: Box<dyn Protocol>,
) -> Deferred<Transport> {
    let at = Location::caller();
    let key = match register(lp, sock, Some(proto), Some(to.clone()), at) {
        Ok(key) => key,
        Err(e) => return fail(io::Error::new(e.kind(), format!("connect to {to}: {e}"))),
    };
    let weak = lp.downgrade();
    let (d, r) = Deferred::with_canceller(move |_| {
        if let Some(lp) = Loop::upgrade(&weak) {
            let garbage = discard(&lp, key);
            drop(garbage);
        }
    });
    let mut cx = lp.io_ctx();
    if let Some(StreamState {
        phase: Phase::Connecting { resolver, .. },
        ..
    }) = state(&mut cx.io, key)
    {
        *resolver = Some(r);
    }
    d
}

/// Removes a stream that never became a connection (refused, cancelled, or its
/// factory failed): no protocol method is called. Returns what to drop.
pub(crate) fn discard(lp: &Loop, key: IoKey) -> Option<crate::reactor::io::Source> {
    let mut cx = lp.io_ctx();
    let s = state(&mut cx.io, key)?;
    if let Some(mut sock) = s.sock.take() {
        let _ = cx.poll.registry().deregister(sock.source());
        #[cfg(unix)]
        cx.io.clear_fd_for(sock.fd(), key);
    }
    cx.io.remove(key)
}

/// Starts a connection: `connection_made`, then the protocol goes in its slot.
/// Returns the failure if `connection_made` panicked (the connection is then
/// aborted with it, and `connection_lost` follows).
pub(crate) fn start(lp: &Loop, key: IoKey, mut proto: Box<dyn Protocol>) -> Option<Failure> {
    let t = Transport {
        lp: lp.clone(),
        key,
    };
    {
        let mut cx = lp.io_ctx();
        let s = state(&mut cx.io, key)?;
        s.phase = Phase::Open;
        s.made = true;
    }
    let failed = call(&t, &mut proto, |p| p.connection_made(&t));
    let mut cx = lp.io_ctx();
    if let Some(src) = cx.io.get_mut(key) {
        if let Kind::Stream(s) = &mut src.kind {
            s.proto = Some(proto);
            let again = s.wants_dispatch();
            if again {
                lp.queue_dispatch(&mut cx.io, key);
            }
        }
    }
    failed
}

/// Calls one protocol method, containing a panic: it is reported to the
/// exception handler and the connection is aborted with it. Returns the
/// failure if there was one.
fn call(
    t: &Transport,
    proto: &mut Box<dyn Protocol>,
    f: impl FnOnce(&mut dyn Protocol),
) -> Option<Failure> {
    let message = "Exception in protocol callback";
    let failure = super::contain(&t.lp, t.key, message, || f(&mut **proto))?;
    close_now(&t.lp, &mut t.lp.io_ctx(), t.key, Some(failure.clone()));
    Some(failure)
}

/// Closes the socket now: the buffer is dropped, the fd leaves the selector
/// and the registry's fd table, and `connection_lost(reason)` is owed (queued).
/// The first reason wins.
fn close_now(lp: &Loop, cx: &mut IoCtx<'_>, key: IoKey, reason: Option<Failure>) {
    let Some(s) = state(&mut cx.io, key) else {
        return;
    };
    if matches!(s.phase, Phase::Closed(_) | Phase::Lost) {
        return;
    }
    s.wbuf.clear();
    s.phase = if s.made {
        Phase::Closed(reason)
    } else {
        Phase::Lost
    };
    let sock = s.sock.take();
    if let Some(mut sock) = sock {
        let _ = cx.poll.registry().deregister(sock.source());
        #[cfg(unix)]
        cx.io.clear_fd_for(sock.fd(), key);
        drop(sock);
    }
    lp.queue_dispatch(&mut cx.io, key);
}

/// Writes as much of `parts` (`total` bytes) as the socket takes now; one
/// `write` for one part, `Sock::write_vectored` (up to 4 KiB copied into one
/// `write`) for several.
fn write_parts_now(sock: &Sock, parts: &[&[u8]], total: usize) -> io::Result<usize> {
    let mut n = 0;
    while n < total {
        let r = if parts.len() == 1 {
            sock.write(&parts[0][n..])
        } else {
            let mut skip = n;
            let mut slices: SmallVec<[IoSlice<'_>; 4]> = SmallVec::new();
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                } else {
                    slices.push(IoSlice::new(&p[skip..]));
                    skip = 0;
                }
            }
            sock.write_vectored(&slices)
        };
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// What to do once the write buffer is empty.
fn after_drain(lp: &Loop, cx: &mut IoCtx<'_>, key: IoKey) {
    let Some(s) = state(&mut cx.io, key) else {
        return;
    };
    if !s.wbuf.is_empty() {
        return;
    }
    if let Phase::Closing(reason) = &mut s.phase {
        let reason = reason.take();
        close_now(lp, cx, key, reason);
        return;
    }
    if s.eof_requested && !s.eof_written {
        s.eof_written = true;
        let r = s.sock.as_ref().map_or(Ok(()), Sock::shutdown_write);
        let both = s.eof_received;
        match r {
            Err(e) => close_now(lp, cx, key, Some(Failure::new(e))),
            Ok(()) if both => close_now(lp, cx, key, None),
            Ok(()) => {}
        }
    }
}

/// Step 6 for a stream source.
pub(crate) fn dispatch(lp: &Loop, key: IoKey) {
    let t = Transport {
        lp: lp.clone(),
        key,
    };
    // One borrow to begin: merge the readiness, take the protocol, flush.
    let (proto, connecting, noted) = {
        let mut cx = lp.io_ctx();
        let Some(src) = cx.io.get_mut(key) else {
            return;
        };
        let r = std::mem::take(&mut src.readable);
        let w = std::mem::take(&mut src.writable);
        let hup = src.read_closed;
        let Kind::Stream(s) = &mut src.kind else {
            return;
        };
        s.read_ready |= r;
        s.read_closed |= hup;
        s.write_ready |= w;
        let proto = s.proto.take();
        let connecting = matches!(s.phase, Phase::Connecting { .. });
        if !connecting {
            flush(lp, &mut cx, key);
        }
        let noted = state(&mut cx.io, key).is_some_and(|s| s.wbuf.flow.has_note());
        (proto, connecting, noted)
    };
    let Some(mut proto) = proto else {
        // Only a connection whose `connection_made` never ran has no protocol
        // here; a dispatch never runs inside another one.
        let mut cx = lp.io_ctx();
        if let Some(src) = cx.io.get_mut(key) {
            src.queued = false;
        }
        return;
    };
    if connecting {
        match finish_connect(&t, proto) {
            Some(p) => proto = p,
            None => return,
        }
    }
    if noted {
        notes(&t, &mut proto);
    }
    read(&t, &mut proto);
    finish_dispatch(&t, proto);
}

/// Completes a connect. Gives the protocol back if the dispatch goes on
/// (connected); otherwise it is back in its slot (not yet) or dropped (failed).
fn finish_connect(t: &Transport, mut proto: Box<dyn Protocol>) -> Option<Box<dyn Protocol>> {
    enum Outcome {
        NotYet,
        Failed(io::Error, Option<Resolver<Transport>>),
        Connected(Option<Resolver<Transport>>),
    }
    let lp = &t.lp;
    let outcome = {
        let mut cx = lp.io_ctx();
        let s = state(&mut cx.io, t.key)?;
        let ready = std::mem::take(&mut s.read_ready) | std::mem::take(&mut s.write_ready);
        let Phase::Connecting { resolver, to } = &mut s.phase else {
            return Some(proto);
        };
        let sock = s.sock.as_ref().expect("a connecting stream has a socket");
        let checked = match sock.take_error() {
            Ok(None) if !ready => Ok(false),
            Ok(None) => match sock.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
            Ok(Some(e)) | Err(e) => Err(e),
        };
        match checked {
            Ok(false) => Outcome::NotYet,
            Ok(true) => Outcome::Connected(resolver.take()),
            Err(e) => Outcome::Failed(
                io::Error::new(e.kind(), format!("connect to {to}: {e}")),
                resolver.take(),
            ),
        }
    };
    match outcome {
        Outcome::NotYet => {
            let mut cx = lp.io_ctx();
            if let Some(src) = cx.io.get_mut(t.key) {
                src.queued = false;
                if let Kind::Stream(s) = &mut src.kind {
                    s.proto = Some(proto);
                }
            }
            None
        }
        Outcome::Failed(e, resolver) => {
            let garbage = discard(lp, t.key);
            drop((garbage, proto));
            if let Some(r) = resolver {
                let _ = r.errback(e);
            }
            None
        }
        Outcome::Connected(resolver) => {
            {
                let mut cx = lp.io_ctx();
                if let Some(s) = state(&mut cx.io, t.key) {
                    if let Some(Sock::Tcp(sock)) = &s.sock {
                        let _ = sock.set_nodelay(true);
                    }
                    s.phase = Phase::Open;
                    s.made = true;
                    // The connect's readiness says nothing about data: look.
                    s.read_ready = true;
                    s.write_ready = true;
                }
            }
            let failed = call(t, &mut proto, |p| p.connection_made(t));
            if let Some(r) = resolver {
                let _ = match failed {
                    None => r.callback(t.clone()),
                    Some(f) => r.errback(f),
                };
            }
            Some(proto)
        }
    }
}

/// Writes what is buffered, if the socket is writable.
fn flush(lp: &Loop, cx: &mut IoCtx<'_>, key: IoKey) {
    let Some(s) = state(&mut cx.io, key) else {
        return;
    };
    if !s.write_ready || s.wbuf.is_empty() {
        return;
    }
    let Some(sock) = s.sock.as_ref() else {
        return;
    };
    let r = loop {
        if s.wbuf.is_empty() {
            break Ok(());
        }
        match sock.write(s.wbuf.pending()) {
            Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => s.wbuf.consume(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                s.write_ready = false;
                break Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    match r {
        Err(e) => close_now(lp, cx, key, Some(Failure::new(e))),
        Ok(()) => after_drain(lp, cx, key),
    }
}

/// Delivers pending `pause_writing` / `resume_writing` calls.
fn notes(t: &Transport, proto: &mut Box<dyn Protocol>) {
    loop {
        let note = {
            let mut cx = t.lp.io_ctx();
            match state(&mut cx.io, t.key) {
                Some(s) if s.is_open() => s.wbuf.flow.take_note(),
                _ => None,
            }
        };
        let failed = match note {
            Some(true) => call(t, proto, |p| p.pause_writing(t)),
            Some(false) => call(t, proto, |p| p.resume_writing(t)),
            None => return,
        };
        if failed.is_some() {
            return;
        }
    }
}

/// Reads up to [`READ_BUDGET`] bytes, one `data_received` per read.
fn read(t: &Transport, proto: &mut Box<dyn Protocol>) {
    enum Step {
        /// `n` bytes; `more`: the socket may have more.
        Data(usize, bool),
        Eof,
        Stop,
    }
    let lp = &t.lp;
    let mut buf = lp.take_read_buf();
    let mut budget = READ_BUDGET;
    loop {
        let step = {
            let mut cx = lp.io_ctx();
            let Some(s) = state(&mut cx.io, t.key) else {
                break;
            };
            if !s.can_read() {
                break;
            }
            let sock = s.sock.as_ref().expect("a readable stream has a socket");
            match sock.read(&mut buf) {
                Ok(0) => {
                    s.read_ready = false;
                    s.eof_received = true;
                    Step::Eof
                }
                Ok(n) => {
                    // A short read emptied the socket: the next data brings a
                    // new edge, so no read is spent learning `WouldBlock`.
                    // Unless the peer's FIN was signalled already: its edge
                    // is spent, so read on to the end-of-file.
                    if n < buf.len() && !s.read_closed {
                        s.read_ready = false;
                    }
                    Step::Data(n, s.read_ready)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    s.read_ready = false;
                    Step::Stop
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    close_now(lp, &mut cx, t.key, Some(Failure::new(e)));
                    Step::Stop
                }
            }
        };
        match step {
            Step::Data(n, more) => {
                if call(t, proto, |p| p.data_received(t, &buf[..n])).is_some() {
                    break;
                }
                budget = budget.saturating_sub(n);
                if budget == 0 || !more {
                    break;
                }
            }
            Step::Eof => {
                let mut keep_open = false;
                if call(t, proto, |p| keep_open = p.eof_received(t)).is_none() {
                    let written = {
                        let mut cx = lp.io_ctx();
                        state(&mut cx.io, t.key).is_some_and(|s| s.eof_written)
                    };
                    if !keep_open {
                        t.close();
                    } else if written {
                        close_now(lp, &mut lp.io_ctx(), t.key, None);
                    }
                }
                break;
            }
            Step::Stop => break,
        }
    }
    lp.put_read_buf(buf);
}

/// Delivers the flow-control notes that the protocol's own calls caused, then
/// `connection_lost` if owed; else puts the protocol back and queues the next
/// dispatch if there is work left (read budget spent, a note from elsewhere).
fn finish_dispatch(t: &Transport, mut proto: Box<dyn Protocol>) {
    let lp = &t.lp;
    let reason = loop {
        let mut cx = lp.io_ctx();
        let Some(src) = cx.io.get_mut(t.key) else {
            return;
        };
        let Kind::Stream(s) = &mut src.kind else {
            return;
        };
        if s.is_open() && s.wbuf.flow.has_note() {
            drop(cx);
            notes(t, &mut proto);
            continue;
        }
        if let Phase::Closed(reason) = &mut s.phase {
            let reason = reason.take();
            s.phase = Phase::Lost;
            break reason;
        }
        s.proto = Some(proto);
        let again = s.wants_dispatch();
        src.queued = false;
        if again {
            lp.queue_dispatch(&mut cx.io, t.key);
        }
        return;
    };
    deliver_lost(t, &mut proto, reason);
    let garbage = lp.io_ctx().io.remove(t.key);
    drop((garbage, proto));
}

/// Calls `connection_lost`, containing (and reporting) a panic.
pub(crate) fn deliver_lost(t: &Transport, proto: &mut Box<dyn Protocol>, reason: Option<Failure>) {
    let message = "Exception in protocol callback (connection_lost)";
    let _ = super::contain(&t.lp, t.key, message, || proto.connection_lost(t, reason));
}

/// A stream connection, as its protocol and the user see it: a cheap handle
/// (`Clone`; equal handles name the same connection) to the state the loop keeps.
///
/// Methods change the transport's state at once; the protocol hears about the
/// consequences (`pause_writing`, `connection_lost`) from the loop, never from
/// inside the method (see [`Protocol`]). On a connection that is gone, every
/// method does nothing (writes are dropped, see [`write`](Self::write)) and the
/// queries say "closed".
#[derive(Clone)]
pub struct Transport {
    pub(crate) lp: Loop,
    pub(crate) key: IoKey,
}

impl Transport {
    fn with<R>(&self, f: impl FnOnce(&mut StreamState) -> R) -> Option<R> {
        let mut cx = self.lp.io_ctx();
        state(&mut cx.io, self.key).map(f)
    }

    /// The loop this transport belongs to.
    pub fn event_loop(&self) -> &Loop {
        &self.lp
    }

    /// Sends `data`: written to the socket at once if nothing is buffered,
    /// the rest buffered and written as the socket drains. Never blocks.
    ///
    /// A write that takes the buffer above the high-water mark makes
    /// [`is_writing_paused`](Self::is_writing_paused) true at once; the
    /// protocol's `pause_writing` follows (see [`Protocol`]).
    ///
    /// After [`close`](Self::close), [`write_eof`](Self::write_eof),
    /// [`abort`](Self::abort) or the connection's loss, writes are **ignored**
    /// (asyncio's behaviour): the first one is logged with `log::warn!`, and
    /// [`dropped_writes`](Self::dropped_writes) counts them. A write error
    /// (reset, broken pipe) aborts the connection with that error as the
    /// reason given to `connection_lost`.
    pub fn write(&self, data: &[u8]) {
        self.write_vectored(&[data]);
    }

    /// Sends `parts` one after the other, as [`write`](Self::write) would,
    /// but with one system call when nothing is buffered and the parts add
    /// up to 4 KiB or less (a header and a body, say): they are copied into
    /// one `send`, not written with `writev`, which could raise SIGPIPE.
    pub fn write_vectored(&self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return;
        }
        let mut cx = self.lp.io_ctx();
        let Some(s) = state(&mut cx.io, self.key) else {
            return;
        };
        if !s.accepts_writes() {
            s.dropped_writes += 1;
            if s.dropped_writes == 1 {
                log::warn!(
                    "deferloop: write of {total} bytes to a closing or closed transport ignored"
                );
            }
            return;
        }
        let mut written = 0;
        if s.wbuf.is_empty() {
            let sock = s.sock.as_ref().expect("an open stream has a socket");
            match write_parts_now(sock, parts, total) {
                Ok(n) => written = n,
                Err(e) => {
                    close_now(&self.lp, &mut cx, self.key, Some(Failure::new(e)));
                    return;
                }
            }
            if written < total {
                s.write_ready = false;
            }
        }
        if written < total {
            let mut skip = written;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                s.wbuf.push(&part[skip..]);
                skip = 0;
            }
            if s.wbuf.flow.has_note() {
                self.lp.queue_dispatch(&mut cx.io, self.key);
            }
        }
    }

    /// Closes the write side once the buffer is flushed (TCP `shutdown(SHUT_WR)`):
    /// the peer reads end-of-file; reading goes on. Later writes are ignored.
    pub fn write_eof(&self) {
        let mut cx = self.lp.io_ctx();
        let Some(s) = state(&mut cx.io, self.key) else {
            return;
        };
        if !s.accepts_writes() {
            return;
        }
        s.eof_requested = true;
        after_drain(&self.lp, &mut cx, self.key);
    }

    /// Closes the connection gracefully: reading stops now, what is buffered is
    /// written, then the socket closes and `connection_lost(None)` follows.
    /// Idempotent.
    pub fn close(&self) {
        self.close_inner(None);
    }

    /// Like [`close`](Self::close), with `reason` given to `connection_lost`:
    /// for a protocol that gives up on its peer but still flushes a last reply
    /// (the framers do this on an over-long line).
    #[track_caller]
    pub fn close_with(&self, reason: impl Into<Failure>) {
        self.close_inner(Some(reason.into()));
    }

    fn close_inner(&self, reason: Option<Failure>) {
        let mut cx = self.lp.io_ctx();
        let Some(s) = state(&mut cx.io, self.key) else {
            return;
        };
        if !matches!(s.phase, Phase::Open) {
            return;
        }
        s.phase = Phase::Closing(reason);
        after_drain(&self.lp, &mut cx, self.key);
    }

    /// Closes the connection now: the buffer is dropped, the socket closed;
    /// `connection_lost(None)` follows (asyncio's `abort`).
    pub fn abort(&self) {
        close_now(&self.lp, &mut self.lp.io_ctx(), self.key, None);
    }

    /// Like [`abort`](Self::abort), with `reason` given to `connection_lost`:
    /// for a protocol that gives up on its peer (a framing error, say).
    #[track_caller]
    pub fn abort_with(&self, reason: impl Into<Failure>) {
        let reason = reason.into();
        close_now(&self.lp, &mut self.lp.io_ctx(), self.key, Some(reason));
    }

    /// Whether the connection is closing or closed.
    pub fn is_closing(&self) -> bool {
        self.with(|s| !matches!(s.phase, Phase::Open))
            .unwrap_or(true)
    }

    /// Stops calling `data_received` until [`resume_reading`](Self::resume_reading).
    /// No system call: the kernel's buffer fills, and TCP pushes back on the peer.
    pub fn pause_reading(&self) {
        self.with(|s| s.reading_paused = true);
    }

    /// Undoes [`pause_reading`](Self::pause_reading); data that arrived
    /// meanwhile is delivered from the next step 6.
    pub fn resume_reading(&self) {
        let mut cx = self.lp.io_ctx();
        let Some(s) = state(&mut cx.io, self.key) else {
            return;
        };
        if !std::mem::take(&mut s.reading_paused) {
            return;
        }
        if s.wants_dispatch() {
            self.lp.queue_dispatch(&mut cx.io, self.key);
        }
    }

    /// Whether `data_received` can be called: open, not paused, no EOF yet.
    pub fn is_reading(&self) -> bool {
        self.with(|s| matches!(s.phase, Phase::Open) && !s.reading_paused && !s.eof_received)
            .unwrap_or(false)
    }

    /// Sets the write buffer's high- and low-water marks (asyncio's rules: see
    /// [`DEFAULT_HIGH_WATER`](super::DEFAULT_HIGH_WATER)); the buffer is
    /// re-checked at once, so lowering `high` below the current size pauses
    /// the protocol.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high >= low`; [`Error::Gone`] for a
    /// connection that no longer exists.
    pub fn set_write_buffer_limits(
        &self,
        high: Option<usize>,
        low: Option<usize>,
    ) -> Result<(), Error> {
        let mut cx = self.lp.io_ctx();
        let s = state(&mut cx.io, self.key).ok_or(Error::Gone)?;
        s.wbuf.set_limits(high, low)?;
        if s.wbuf.flow.has_note() {
            self.lp.queue_dispatch(&mut cx.io, self.key);
        }
        Ok(())
    }

    /// `(low, high)` water marks of the write buffer.
    pub fn write_buffer_limits(&self) -> (usize, usize) {
        self.with(|s| s.wbuf.flow.limits()).unwrap_or((0, 0))
    }

    /// Bytes buffered, not yet taken by the socket.
    pub fn write_buffer_size(&self) -> usize {
        self.with(|s| s.wbuf.len()).unwrap_or(0)
    }

    /// Whether the buffer is above its high-water mark (and has not drained to
    /// the low one since): the state `pause_writing` reports.
    pub fn is_writing_paused(&self) -> bool {
        self.with(|s| s.wbuf.flow.is_paused()).unwrap_or(false)
    }

    /// Writes ignored because the transport was closing or closed.
    pub fn dropped_writes(&self) -> u64 {
        self.with(|s| s.dropped_writes).unwrap_or(0)
    }

    /// The local address.
    ///
    /// # Errors
    /// `ErrorKind::NotConnected` once the socket is closed; else the OS error.
    pub fn local_addr(&self) -> io::Result<SockAddr> {
        self.with(|s| s.sock.as_ref().map(Sock::local_addr))
            .flatten()
            .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }

    /// The peer's address.
    ///
    /// # Errors
    /// As for [`local_addr`](Self::local_addr).
    pub fn peer_addr(&self) -> io::Result<SockAddr> {
        self.with(|s| s.sock.as_ref().map(Sock::peer_addr))
            .flatten()
            .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }

    /// The socket's file descriptor while it is open (for `setsockopt` and
    /// the like; the loop keeps owning it: `add_reader` on it is refused).
    #[cfg(unix)]
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.with(|s| s.sock.as_ref().map(Sock::fd)).flatten()
    }

    /// Sets `TCP_NODELAY` (on by default for every TCP connection deferloop makes).
    ///
    /// # Errors
    /// `ErrorKind::Unsupported` on a Unix socket; `NotConnected` once closed.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.with(|s| match &s.sock {
            Some(Sock::Tcp(t)) => t.set_nodelay(on),
            #[cfg(unix)]
            Some(Sock::Unix(_)) => Err(io::ErrorKind::Unsupported.into()),
            None => Err(io::ErrorKind::NotConnected.into()),
        })
        .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// # Errors
    /// As for [`set_nodelay`](Self::set_nodelay).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.with(|s| match &s.sock {
            Some(Sock::Tcp(t)) => t.nodelay(),
            #[cfg(unix)]
            Some(Sock::Unix(_)) => Err(io::ErrorKind::Unsupported.into()),
            None => Err(io::ErrorKind::NotConnected.into()),
        })
        .unwrap_or_else(|| Err(io::ErrorKind::NotConnected.into()))
    }
}

super::handle_identity!(Transport);

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Transport");
        match self.with(|s| (s.sock.as_ref().map(Sock::peer_addr), s.wbuf.len())) {
            Some((peer, buffered)) => d
                .field("peer", &peer.and_then(Result::ok))
                .field("closing", &self.is_closing())
                .field("buffered", &buffered),
            None => d.field("closed", &true),
        };
        d.finish()
    }
}
