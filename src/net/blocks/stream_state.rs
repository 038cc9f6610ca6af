//! A [`Stream`](crate::net::Stream)'s state: its buffer, its queue of reads, how
//! reads complete (at constant stack depth), when reading pauses, and what the
//! connection's loss does to them; the errors a read fails with; the
//! registered producer and where a copied stream's bytes go (its `Tap`). The
//! handle is `stream.rs`; this file imports nothing else of `net/blocks/`.

use crate::deferred::Spare;
use crate::net::{Producer, Transport};
use crate::reactor::WeakLoop;
use crate::{Failure, Resolver};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::rc::{Rc, Weak};

/// How many bytes a [`Stream`](crate::net::Stream) buffers before it stops reading its
/// connection, and the longest line [`Stream::read_line`](crate::net::Stream::read_line) accepts: 64 KiB,
/// asyncio's default.
pub const DEFAULT_READ_LIMIT: usize = 64 * 1024;

/// A line (or anything read with [`Stream::read_until`](crate::net::Stream::read_until)) did not end within
/// the stream's read limit. The over-long line is dropped from the buffer:
/// up to its delimiter if that has arrived, else everything buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LineTooLong {
    /// The limit that was passed, in bytes.
    pub limit: usize,
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line longer than the limit of {} bytes", self.limit)
    }
}

impl std::error::Error for LineTooLong {}

/// The peer ended its side before a read was complete (asyncio's
/// `IncompleteReadError`). Also what a read fails with at a clean end of
/// file when nothing is buffered (then `partial` is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IncompleteRead {
    /// What had arrived; it is no longer buffered.
    pub partial: Vec<u8>,
    /// How many bytes [`Stream::read_exactly`](crate::net::Stream::read_exactly) wanted; `None` for a read
    /// waiting for a delimiter.
    pub expected: Option<usize>,
}

impl fmt::Display for IncompleteRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.expected {
            Some(n) => write!(f, "end of file after {} of {} bytes", self.partial.len(), n),
            None => write!(
                f,
                "end of file after {} bytes, before the delimiter",
                self.partial.len()
            ),
        }
    }
}

impl std::error::Error for IncompleteRead {}

pub(super) enum Want {
    /// Up to and including `\n`, answered as a `String` (`Done::Line`).
    Line,
    Until(SmallVec<[u8; 8]>),
    Exactly(usize),
    Some,
}

/// What a request fires: the bytes, or a line as text (so that `read_line`
/// needs no callback of its own to convert).
pub(super) enum Done {
    Bytes(Resolver<Vec<u8>>),
    Line(Resolver<String>),
}

impl Done {
    /// Whether the read's Deferred has fired: here, only by a cancel (the
    /// request is then dropped, its bytes kept).
    fn is_called(&self) -> bool {
        match self {
            Done::Bytes(r) => r.is_called(),
            Done::Line(r) => r.is_called(),
        }
    }

    /// Fires the read's Deferred with `r`; returns its storage if nothing
    /// holds it any more, for the next read.
    fn fire(self, r: Result<Vec<u8>, Failure>) -> Option<Spare> {
        match self {
            Done::Bytes(d) => {
                let _ = d.resolve(r);
                d.into_spare()
            }
            Done::Line(d) => {
                let _ = d.resolve(r.and_then(into_line));
                d.into_spare()
            }
        }
    }
}

/// A line read up to its `\n` as text, without its line ending (`\n` or
/// `\r\n`); an `InvalidData` error if it is not UTF-8.
fn into_line(mut line: Vec<u8>) -> Result<String, Failure> {
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map_err(|e| Failure::new(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

pub(super) struct Request {
    pub(super) want: Want,
    pub(super) done: Done,
}

/// A request to fire, and what with.
pub(super) type Answer = (Done, Result<Vec<u8>, Failure>);

/// Where `delim` ends in `hay`, looking from `scanned` bytes in (less what
/// could hold the start of a delimiter cut at that point).
fn find_delim(hay: &[u8], delim: &[u8], scanned: usize) -> Option<usize> {
    let from = scanned.saturating_sub(delim.len() - 1).min(hay.len());
    match delim {
        [b] => hay[from..]
            .iter()
            .position(|x| x == b)
            .map(|i| from + i + 1),
        _ => hay[from..]
            .windows(delim.len())
            .position(|w| w == delim)
            .map(|i| from + i + delim.len()),
    }
}

/// The state behind every clone of one [`Stream`].
pub(super) struct StreamState {
    pub(super) buf: Vec<u8>,
    /// `buf[pos..]` is unread.
    pub(super) pos: usize,
    /// How far past `pos` the head request's delimiter was looked for.
    pub(super) scanned: usize,
    pub(super) limit: usize,
    pub(super) eof: bool,
    /// Set once the connection is gone (or its connect failed): the reason.
    pub(super) lost: Option<Option<Failure>>,
    /// Reads asked for, oldest first. A cancelled one stays until it is at
    /// the head, where it is dropped without taking anything (its cancel
    /// schedules a look at the queue, see `CancelHook for StreamCell`).
    pub(super) pending: VecDeque<Request>,
    /// The storage of the last read's Deferred, for the next read's.
    pub(super) spare: Option<Spare>,
    pub(super) delivering: bool,
    pub(super) scheduled: bool,
    /// A consumer this stream is copied into asked it to pause.
    pub(super) held: bool,
    /// Whether this stream paused its transport's reading.
    pub(super) paused: bool,
    pub(super) connected: Option<Result<(), Failure>>,
    pub(super) waiters: Vec<Resolver<()>>,
    pub(super) lp: WeakLoop,
    /// The connection's transport (a weak handle), for what runs without
    /// one at hand: a read's cancel.
    pub(super) transport: Transport,
    /// The last read into `buf` (see `lend`): its size, and whether it
    /// filled the room it was lent.
    pub(super) last_read: (usize, bool),
    /// The producer writing into this stream (see `producer.rs`).
    pub(super) producer: Option<Box<dyn Producer>>,
    pub(super) producer_gen: u64,
    /// Where this stream's bytes go while it is copied (see `relay.rs`).
    pub(super) tap: Option<Tap>,
}

/// Capacity a read buffer keeps once emptied (see `StreamState::consume`).
const KEEP: usize = 16 * 1024;

/// The least room a read is lent (see `StreamState::lend`).
const MIN_LEND: usize = 4096;

/// The most room a read is lent: under the allocator's usual threshold for
/// a fresh `mmap` (glibc's starts at 128 KiB), so that a buffer handed out
/// and freed by each read reuses warm heap memory instead of costing a map,
/// an unmap and a page fault per 4 KiB the kernel writes.
const MAX_LEND: usize = 120 * 1024;

impl StreamState {
    pub(super) fn new(lp: WeakLoop) -> StreamState {
        StreamState {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            limit: DEFAULT_READ_LIMIT,
            eof: false,
            lost: None,
            pending: VecDeque::new(),
            spare: None,
            delivering: false,
            scheduled: false,
            held: false,
            paused: false,
            connected: None,
            waiters: Vec::new(),
            lp,
            transport: Transport::dangling(),
            last_read: (0, false),
            producer: None,
            producer_gen: 0,
            tap: None,
        }
    }

    pub(super) fn buffered_len(&self) -> usize {
        self.available()
    }

    pub(super) fn at_eof(&self) -> bool {
        self.eof
    }

    /// Reads asked for and not cancelled, not yet answered.
    pub(super) fn waiting_reads(&self) -> usize {
        self.pending.iter().filter(|r| !r.done.is_called()).count()
    }

    pub(super) fn available(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes, as the caller's own `Vec`. A read of everything
    /// buffered from the start takes the buffer itself when its capacity is
    /// not much more than `n` (so the caller holds no large idle capacity):
    /// one copy per read (into the buffer) instead of two.
    pub(super) fn take(&mut self, n: usize) -> Vec<u8> {
        if self.pos == 0 && n == self.buf.len() {
            if self.buf.capacity() <= n + n / 2 {
                self.scanned = 0;
                return std::mem::take(&mut self.buf);
            }
            if n >= KEEP {
                // A large read lent more room than it took: the room is given
                // back (a `realloc` that shrinks in place), not the bytes
                // copied.
                self.scanned = 0;
                let mut whole = std::mem::take(&mut self.buf);
                whole.shrink_to_fit();
                return whole;
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.consume(n);
        out
    }

    /// Drops the next `n` bytes. An emptied buffer keeps at most
    /// [`KEEP`] of capacity, a compacted one at most four times what it
    /// holds: a burst's memory (up to a read limit plus a read, about
    /// 512 KiB) is not held by a connection that has gone quiet.
    pub(super) fn consume(&mut self, n: usize) {
        self.pos += n;
        self.scanned = 0;
        if self.pos == self.buf.len() {
            self.pos = 0;
            if self.buf.capacity() > KEEP {
                self.buf = Vec::new();
            } else {
                self.buf.clear();
            }
        } else if self.pos > self.buf.len() / 2 && self.pos > 4096 {
            self.buf.drain(..self.pos);
            self.pos = 0;
            let len = self.buf.len();
            if self.buf.capacity() > KEEP.max(4 * len) {
                self.buf.shrink_to(KEEP.max(2 * len));
            }
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The buffer, lent for a read straight into it (`Protocol::get_buffer`;
    /// `put_back` returns it), with room for at most `hint` bytes: about a
    /// quarter more than the last read (twice as much if that filled its
    /// room), at least [`MIN_LEND`]. A message the size of the last fits
    /// with room to spare, so its read is short (the core need not read
    /// again to find the socket empty), and a buffer read whole is handed to
    /// the read that takes it with little idle capacity (see `take`).
    pub(super) fn lend(&mut self, hint: usize) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.buf);
        let (last, filled) = self.last_read;
        let grown = if last >= KEEP {
            // Large reads: room for all the socket may hold, as the loop's
            // own buffer has, so that a message is one read, not several.
            MAX_LEND
        } else if filled {
            last.saturating_mul(2)
        } else {
            last + last / 4
        };
        let want = grown.max(MIN_LEND).min(hint).min(MAX_LEND);
        if buf.capacity() - buf.len() < want {
            buf.reserve(want);
        }
        buf
    }

    /// The lent buffer, back with `n` bytes appended. Room the read did not
    /// use is not kept beyond what `consume` keeps: at most [`KEEP`] when
    /// nothing is buffered, four times what is (a connection left idle
    /// after a read, or with half a line, holds no read's worth of room).
    pub(super) fn put_back(&mut self, buf: Vec<u8>, n: usize) {
        if n > 0 {
            self.last_read = (n, buf.len() == buf.capacity());
        }
        self.buf = buf;
        let len = self.buf.len();
        if self.buf.capacity() > KEEP.max(4 * len) {
            if len == 0 {
                self.buf = Vec::new();
            } else {
                self.buf.shrink_to(KEEP.max(2 * len));
            }
        }
    }

    /// The failure a read that cannot complete gets: the connection's loss
    /// reason, or `partial` as an [`IncompleteRead`].
    pub(super) fn ended(&mut self, expected: Option<usize>) -> Failure {
        match &self.lost {
            Some(Some(f)) => f.clone(),
            _ => {
                let n = self.available();
                Failure::new(IncompleteRead {
                    partial: self.take(n),
                    expected,
                })
            }
        }
    }

    /// Whether the head request was cancelled (and waits to be dropped).
    pub(super) fn head_cancelled(&self) -> bool {
        self.pending.front().is_some_and(|r| r.done.is_called())
    }

    /// Whether the head request can be answered, or dropped, without any
    /// input: it was cancelled, or it asks for 0 bytes.
    pub(super) fn head_needs_no_input(&self) -> bool {
        self.head_cancelled()
            || matches!(self.pending.front(), Some(r) if matches!(r.want, Want::Exactly(0)))
    }

    /// The head request if it was cancelled (its Deferred fired): removed,
    /// to be dropped once this state is no longer borrowed.
    pub(super) fn pop_cancelled(&mut self) -> Option<Request> {
        if !self.head_cancelled() {
            return None;
        }
        self.scanned = 0;
        self.pending.pop_front()
    }

    /// The head request and its result, if it can complete now (a cancelled
    /// head must have been popped).
    pub(super) fn next_ready(&mut self) -> Option<Answer> {
        let ended = self.eof || self.lost.is_some();
        let head = self.pending.front()?;
        let avail = self.available();
        let result = match &head.want {
            Want::Some if avail > 0 => Ok(self.take(avail)),
            Want::Some if ended => match &self.lost {
                Some(Some(f)) => Err(f.clone()),
                _ => Ok(Vec::new()),
            },
            Want::Exactly(n) if avail >= *n => Ok(self.take(*n)),
            Want::Exactly(n) if ended => Err(self.ended(Some(*n))),
            Want::Line | Want::Until(_) => {
                let delim: &[u8] = match &head.want {
                    Want::Until(d) => d,
                    _ => b"\n",
                };
                match find_delim(&self.buf[self.pos..], delim, self.scanned) {
                    Some(end) if end <= self.limit => Ok(self.take(end)),
                    Some(end) => {
                        self.consume(end);
                        Err(Failure::new(LineTooLong { limit: self.limit }))
                    }
                    None if avail >= self.limit => {
                        self.consume(avail);
                        Err(Failure::new(LineTooLong { limit: self.limit }))
                    }
                    None if ended => Err(self.ended(None)),
                    None => {
                        self.scanned = avail;
                        return None;
                    }
                }
            }
            _ => return None,
        };
        let head = self.pending.pop_front().expect("the head request");
        self.scanned = 0;
        Some((head.done, result))
    }

    /// Whether reading should be paused: a consumer asked, or the buffer is
    /// full and the head request cannot use more.
    pub(super) fn should_pause(&self) -> bool {
        let avail = self.available();
        let needs_more = matches!(
            self.pending.front(),
            Some(Request { want: Want::Exactly(n), done }) if *n > avail && !done.is_called()
        );
        self.held || (avail >= self.limit && !needs_more)
    }
}

pub(super) type StreamCell = RefCell<StreamState>;

/// Fires every request that can complete, one after the other, at constant
/// stack depth: a read asked from a callback fired here is queued and fired
/// by this loop once that callback returns.
pub(super) fn pump(shared: &Rc<StreamCell>, transport: &Transport) {
    if std::mem::replace(&mut shared.borrow_mut().delivering, true) {
        return;
    }
    struct Delivering<'a>(&'a StreamCell);
    impl Drop for Delivering<'_> {
        fn drop(&mut self) {
            self.0.borrow_mut().delivering = false;
        }
    }
    let guard = Delivering(shared);
    loop {
        let mut st = shared.borrow_mut();
        if let Some(cancelled) = st.pop_cancelled() {
            drop(st);
            drop(cancelled);
            continue;
        }
        let Some((done, result)) = st.next_ready() else {
            break;
        };
        drop(st);
        if let Some(spare) = done.fire(result) {
            shared.borrow_mut().spare.get_or_insert(spare);
        }
    }
    drop(guard);
    update_reading(shared, transport);
}

pub(super) fn update_reading(shared: &StreamCell, transport: &Transport) {
    let mut st = shared.borrow_mut();
    if st.lost.is_some() {
        return;
    }
    let pause = st.should_pause();
    if pause != st.paused {
        st.paused = pause;
        drop(st);
        if pause {
            transport.pause_reading();
        } else {
            transport.resume_reading();
        }
    }
}

/// The connection is gone (or never came up): fail what waits, stop the
/// producer, end the copy.
pub(super) fn lost(shared: &Rc<StreamCell>, reason: Option<Failure>) {
    let (waiters, producer, tap) = {
        let mut st = shared.borrow_mut();
        if st.lost.is_some() {
            return;
        }
        st.lost = Some(reason.clone());
        let waiters = if st.connected.is_none() {
            let r = reason
                .clone()
                .unwrap_or_else(|| Failure::msg("closed before it was up"));
            st.connected = Some(Err(r.clone()));
            std::mem::take(&mut st.waiters)
                .into_iter()
                .map(|w| (w, r.clone()))
                .collect()
        } else {
            Vec::new()
        };
        st.producer_gen += 1;
        (waiters, st.producer.take(), st.tap.take())
    };
    for (w, f) in waiters {
        let _ = w.errback(f);
    }
    if let Some(mut p) = producer {
        p.stop_producing(reason.clone());
    }
    if let Some(tap) = tap {
        tap.source_lost(reason);
    }
    // Nothing reads any more: fail or answer what waits.
    let dead = Transport::dangling();
    pump(shared, &dead);
}

/// Tells the registered producer of `shared` to pause or resume. The
/// producer is taken out while it runs, so it may use the stream freely.
pub(super) fn notify(shared: &StreamCell, pause: bool) {
    let (mut p, gen) = {
        let mut st = shared.borrow_mut();
        match st.producer.take() {
            Some(p) => (p, st.producer_gen),
            None => return,
        }
    };
    if pause {
        p.pause_producing();
    } else {
        p.resume_producing();
    }
    let mut st = shared.borrow_mut();
    if st.producer_gen == gen && st.producer.is_none() && st.lost.is_none() {
        st.producer = Some(p);
    }
}

/// Where a copied stream's bytes go: kept in the source's state.
pub(super) struct Tap {
    pub(super) to: Transport,
    pub(super) to_shared: Weak<StreamCell>,
    pub(super) bytes: u64,
    pub(super) done: Resolver<u64>,
}

impl Tap {
    pub(super) fn pass(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        self.to.write(data);
    }

    fn detach(&self) {
        if let Some(to) = self.to_shared.upgrade() {
            let mut st = to.borrow_mut();
            st.producer_gen += 1;
            st.producer = None;
        }
    }

    /// The source sent its end of file: pass it on.
    pub(super) fn source_ended(self) {
        self.detach();
        self.to.write_eof();
        let _ = self.done.callback(self.bytes);
    }

    /// The source is gone before its end of file.
    pub(super) fn source_lost(self, reason: Option<Failure>) {
        self.detach();
        let _ = self.done.errback(reason.unwrap_or_else(|| {
            Failure::new(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the source closed before its end of file",
            ))
        }));
    }
}

#[cfg(test)]
#[path = "stream_state_tests.rs"]
mod tests;
