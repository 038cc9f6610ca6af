//! [`TlsIo`]: a [`Wire`] over another `Wire`, with a `rustls`
//! connection in between (Twisted's `TLSMemoryBIOProtocol`, one layer lower).
//! The core reads plaintext from it and writes plaintext to it; records go
//! to and come from the inner stream. What it holds itself (records the
//! socket did not take, close_notify) the core asks about and flushes
//! through `Wire::output` and `Wire::flush_output`; what it says after a
//! read, through `Wire::input`. Tests: tests/net_tls_*.rs.

use super::records::RecordCounter;
use super::TlsError;
use crate::net::core::io::{Input, Output, Wire};
use crate::net::Limits;
use crate::net::SockAddr;
use crate::Handle;
use std::cell::Cell;
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::io::RawFd;
use std::rc::Rc;

/// Where a connection's handshake deadline timer is kept, so the layer can
/// cancel it once the handshake is done (or the stream dropped).
pub(crate) type DeadlineSlot = Rc<Cell<Option<Handle>>>;

/// What a record costs a read's budget beyond its bytes: a key update (27
/// bytes) takes about 3 µs to process, a byte of data about 1 ns to
/// decrypt, a small record a few hundred ns. See `TlsIo::charge`.
const RECORD_COST: usize = 2048;

pub(crate) struct TlsIo {
    inner: Box<dyn Wire>,
    tls: rustls::Connection,
    /// The inner stream's connect is done.
    inner_up: bool,
    /// Plaintext written before `start_tls`, for the socket before any
    /// record: `out[sent..]`. Records go from rustls's own buffer straight
    /// to the socket, several in one `sendmsg`; what the socket does not
    /// take stays there, and rustls frees each record once it is sent, so
    /// a connection keeps no buffer of a burst once it is out.
    out: Vec<u8>,
    sent: usize,
    /// Bytes written to the inner stream, in all (`Output::sent`).
    written: u64,
    /// Bytes received before `start_tls` that belong to the handshake: fed
    /// to rustls before the socket is read.
    early: Vec<u8>,
    /// A write was refused during the handshake: say so when it is done.
    owe_writable: bool,
    close_sent: bool,
    /// The peer's close_notify has arrived: see `send_close`.
    peer_closed: bool,
    /// `write_eof`: shut the inner stream's write side once `out` is sent.
    shutdown_after_flush: bool,
    deadline: DeadlineSlot,
    /// A fatal error met after some plaintext was read: returned next.
    error: Option<io::Error>,
    /// The peer's end (close_notify or end-of-file) met after some
    /// plaintext was read: reported by the next read.
    end_held: bool,
    /// The last read stopped after a budget of records: see `read`.
    spent: bool,
    /// What the records read since the socket last said `WouldBlock`, or a
    /// budget was spent, cost: a budget holds across the reads of a turn.
    charged: usize,
    /// Where the received stream is, to count its records.
    records: RecordCounter,
}

impl TlsIo {
    /// Layers `tls` over `inner`. `plain_out` is sent first, unencrypted
    /// (what was buffered before `start_tls`); `early` is handed to rustls
    /// before anything read from `inner` (what arrived before it).
    pub(crate) fn new(
        inner: Box<dyn Wire>,
        tls: rustls::Connection,
        inner_up: bool,
        plain_out: Vec<u8>,
        early: Vec<u8>,
        deadline: DeadlineSlot,
    ) -> TlsIo {
        TlsIo {
            inner,
            tls,
            inner_up,
            out: plain_out,
            sent: 0,
            written: 0,
            early,
            owe_writable: false,
            close_sent: false,
            peer_closed: false,
            shutdown_after_flush: false,
            deadline,
            error: None,
            end_held: false,
            spent: false,
            charged: 0,
            records: RecordCounter::default(),
        }
    }

    /// Writes what is waiting to the socket: the plaintext of before
    /// `start_tls`, then rustls's records. `Ok(true)`: all of it is out;
    /// `Ok(false)`: the socket is full.
    fn push_out(&mut self) -> io::Result<bool> {
        while self.sent < self.out.len() {
            match self.inner.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    self.written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out.capacity() > 0 {
            self.out = Vec::new();
            self.sent = 0;
        }
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut Sink(&mut *self.inner)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if std::mem::take(&mut self.shutdown_after_flush) {
            self.inner.shutdown_write()?;
        }
        Ok(true)
    }

    /// Sends what is left, our close_notify last. Once the peer's
    /// close_notify has arrived, a peer that is gone (`EPIPE`,
    /// `ECONNRESET`) is a clean end, not an error: both sides said they
    /// were done, and a client that closes at once with the server's
    /// session tickets unread resets the connection, so ours cannot go.
    fn send_close(&mut self) -> io::Result<bool> {
        match self.push_out() {
            Err(e)
                if self.peer_closed
                    && matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
            {
                self.out = Vec::new();
                self.sent = 0;
                self.shutdown_after_flush = false;
                Ok(true)
            }
            r => r,
        }
    }

    /// Reads records from the socket (or what arrived before `start_tls`).
    /// Charges the budget for them: their bytes, and `RECORD_COST` for
    /// each record whose header came in.
    fn read_tls(&mut self) -> io::Result<usize> {
        let mut src = Source {
            early: &mut self.early,
            inner: &mut *self.inner,
            counter: &mut self.records,
            headers: 0,
        };
        let r = self.tls.read_tls(&mut src);
        let headers = src.headers;
        if let Ok(k) = r {
            self.charged = self
                .charged
                .saturating_add(k)
                .saturating_add(headers.saturating_mul(RECORD_COST));
        }
        r
    }

    /// Whether the records read since the budget began spent it; if so,
    /// `Wire::input` says so and the next read begins a new one. Records
    /// are charged for their bytes and `RECORD_COST` each: a record costs
    /// far more than its bytes, and a peer chooses how many its bytes make,
    /// so a budget then holds the loop about as long whatever they carry.
    fn charge(&mut self) -> bool {
        if self.charged < Limits::DEFAULT.read_budget {
            return false;
        }
        self.spent = true;
        self.charged = 0;
        true
    }

    /// Decrypts what was read; answers the peer (handshake messages, key
    /// updates, an alert on error) as far as the socket takes it.
    fn process(&mut self) -> io::Result<()> {
        if let Err(e) = self.tls.process_new_packets() {
            // Tell the peer why, if the socket takes it.
            let _ = self.push_out();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                TlsError::Rustls(e),
            ));
        }
        if !self.tls.is_handshaking() {
            if let Some(h) = self.deadline.take() {
                h.cancel();
            }
        }
        if self.tls.wants_write() {
            self.push_out()?;
        }
        Ok(())
    }

    /// Drives the handshake: `Ok(true)` once done, `Ok(false)` waiting for
    /// the peer, `Err` if it failed.
    fn handshake(&mut self) -> io::Result<bool> {
        loop {
            self.push_out()?;
            if !self.tls.is_handshaking() {
                // The handshake's records do not count against the data's.
                self.charged = 0;
                return Ok(true);
            }
            match self.read_tls() {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        TlsError::HandshakeEof,
                    ))
                }
                Ok(_) => self.process()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Encrypts what `put` gives rustls, as much as the socket takes.
    fn write_with(
        &mut self,
        total: usize,
        mut put: impl FnMut(&mut rustls::Writer<'_>, usize) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if self.tls.is_handshaking() {
            // Kept in the core's buffer, where flow control sees it, until
            // the handshake is done (`Wire::input` says so). The core now waits
            // for a writable edge: send what the handshake has (a socket
            // that takes it all gives none).
            self.owe_writable = true;
            self.push_out()?;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if !self.push_out()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = 0;
        while n < total {
            // rustls takes at most its buffer limit (64 KiB) at a time.
            let k = put(&mut self.tls.writer(), n)?;
            if k == 0 {
                break;
            }
            n += k;
            if !self.push_out()? {
                break;
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

/// The socket as rustls writes records to it: several records in one
/// vectored write (`sendmsg` on a socket, net/core/io.rs).
struct Sink<'a>(&'a mut dyn Wire);

impl Write for Sink<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.write(data)
    }
    fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(parts)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// rustls's view of the socket: what arrived before `start_tls` first.
/// Counts the records that pass.
struct Source<'a> {
    early: &'a mut Vec<u8>,
    inner: &'a mut dyn Wire,
    counter: &'a mut RecordCounter,
    /// Record headers seen in this read.
    headers: usize,
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.early.is_empty() {
            self.inner.read(buf)?
        } else {
            let n = buf.len().min(self.early.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            if self.early.is_empty() {
                *self.early = Vec::new();
            }
            n
        };
        self.headers += self.counter.count(&buf[..n]);
        Ok(n)
    }
}

impl Wire for TlsIo {
    /// Returns plaintext. A short read means the socket is drained too (the
    /// core waits for the next edge then), so records are read until the
    /// buffer is full or the socket says `WouldBlock`; or until a read
    /// budget of records is spent (see `charge`), which `Wire::input`
    /// reports. Records may carry almost no plaintext (key updates around
    /// one-byte messages): a budget in plaintext alone would let such a
    /// peer hold the loop for as long as it keeps the socket full.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.end_held = false;
        let mut n = 0;
        loop {
            match self.tls.reader().read(&mut buf[n..]) {
                // The peer's close_notify: a clean end-of-file.
                Ok(0) => {
                    self.peer_closed = true;
                    self.end_held = n > 0;
                    return Ok(n);
                }
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        self.charge();
                        return Ok(n);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    if n > 0 {
                        self.end_held = true;
                        return Ok(n);
                    }
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        TlsError::Truncated,
                    ));
                }
                Err(e) => return Err(e),
            }
            if self.charge() {
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            match self.read_tls() {
                // Seen by rustls: the reader says whether it was clean.
                Ok(0) => {}
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.charged = 0;
                    return if n > 0 { Ok(n) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = self.process() {
                if n == 0 {
                    return Err(e);
                }
                self.error = Some(e);
                return Ok(n);
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_with(data.len(), |w, n| w.write(&data[n..]))
    }

    fn write_vectored(&mut self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        // rustls makes one record of several parts: no copy here.
        let total = parts.iter().map(|p| p.len()).sum();
        self.write_with(total, |w, n| {
            if n == 0 {
                w.write_vectored(parts)
            } else {
                // A part taken in part: go on one part at a time.
                let mut skip = n;
                for p in parts {
                    if skip < p.len() {
                        return w.write(&p[skip..]);
                    }
                    skip -= p.len();
                }
                Ok(0)
            }
        })
    }

    /// `write_eof`: close_notify, then the inner stream's write side.
    fn shutdown_write(&mut self) -> io::Result<()> {
        if !std::mem::replace(&mut self.close_sent, true) {
            self.tls.send_close_notify();
        }
        self.shutdown_after_flush = true;
        self.send_close().map(drop)
    }

    /// The inner connect, then the handshake: "connected" means both.
    fn connect_result(&mut self) -> io::Result<bool> {
        if !self.inner_up {
            if !self.inner.connect_result()? {
                return Ok(false);
            }
            self.inner_up = true;
        }
        self.handshake()
    }

    /// The socket's pending error (a reset while reading is paused): the
    /// layer has none of its own.
    fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }
    fn peer_addr(&self) -> io::Result<SockAddr> {
        self.inner.peer_addr()
    }
    fn local_addr(&self) -> io::Result<SockAddr> {
        self.inner.local_addr()
    }
    fn register(&mut self, r: &mio::Registry, token: mio::Token) -> io::Result<()> {
        self.inner.register(r, token)
    }
    fn deregister(&mut self, r: &mio::Registry) {
        self.inner.deregister(r)
    }
    fn fd(&self) -> Option<RawFd> {
        self.inner.fd()
    }
    fn name(&self) -> &'static str {
        "tls"
    }
    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.inner.set_nodelay(on)
    }
    fn nodelay(&self) -> io::Result<bool> {
        self.inner.nodelay()
    }

    /// After a read: the peer's end or an error held behind the data
    /// returned; a budget of records spent (see `charge`); writes refused
    /// during the handshake (see `write_with`) free to go on, the handshake
    /// being done (it is only driven by reads, and by the connect).
    fn input(&mut self) -> Input {
        let writable = self.owe_writable && !self.tls.is_handshaking();
        if writable {
            self.owe_writable = false;
        }
        Input {
            held: self.end_held || self.error.is_some(),
            spent: std::mem::take(&mut self.spent),
            writable,
        }
    }
    fn output(&self) -> Output {
        Output {
            pending: self.sent < self.out.len() || self.tls.wants_write(),
            sent: Some(self.written),
            handshaking: self.tls.is_handshaking(),
        }
    }
    /// Records the socket did not take; closing, close_notify last, before
    /// the socket closes.
    fn flush_output(&mut self, closing: bool) -> io::Result<bool> {
        if !closing {
            return self.push_out();
        }
        if !std::mem::replace(&mut self.close_sent, true) {
            self.tls.send_close_notify();
        }
        self.send_close()
    }
    fn layer(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl Drop for TlsIo {
    fn drop(&mut self) {
        if let Some(h) = self.deadline.take() {
            h.cancel();
        }
    }
}

/// The TLS session of a stream, if TLS is layered on it (its handshake
/// state, ALPN, peer): what the core's `Wire::layer` hands back, asked here.
pub(crate) fn session(io: &dyn Wire) -> Option<&rustls::CommonState> {
    let tls = io.layer()?.downcast_ref::<TlsIo>()?;
    Some(&tls.tls)
}
