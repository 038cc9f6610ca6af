//! Reading a connection with Deferreds: [`Stream`] (asyncio's `StreamReader`
//! and `StreamWriter` in one cheap handle), [`StreamProtocol`] (the protocol
//! that feeds it), and the errors a read fails with. Producers live in
//! `producer.rs`, pipes and relays in `relay.rs`.
//! Tests: tests/net_stream_*.rs.

use super::memory::{self, Peer};
use super::producer::Producer;
use super::relay::Tap;
use super::{Listener, Protocol, Transport};
use crate::deferred::Cancelled;
use crate::reactor::WeakLoop;
use crate::{Deferred, Error, Failure, Loop, Resolver};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::rc::{Rc, Weak};

/// How many bytes a [`Stream`] buffers before it stops reading its
/// connection, and the longest line [`Stream::read_line`] accepts: 64 KiB,
/// asyncio's default.
pub const DEFAULT_READ_LIMIT: usize = 64 * 1024;

/// A line (or anything read with [`Stream::read_until`]) did not end within
/// the stream's read limit. The over-long line is dropped from the buffer:
/// up to its delimiter if that has arrived, else everything buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
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
pub struct IncompleteRead {
    /// What had arrived; it is no longer buffered.
    pub partial: Vec<u8>,
    /// How many bytes [`Stream::read_exactly`] wanted; `None` for a read
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

enum Want {
    Until(Vec<u8>),
    Exactly(usize),
    Some,
}

struct Request {
    id: u64,
    want: Want,
    done: Resolver<Vec<u8>>,
}

/// A request to fire, and what with.
type Answer = (Resolver<Vec<u8>>, Result<Vec<u8>, Failure>);

/// The state behind every clone of one [`Stream`].
pub(super) struct State {
    buf: Vec<u8>,
    /// `buf[pos..]` is unread.
    pos: usize,
    /// How far past `pos` the head request's delimiter was looked for.
    scanned: usize,
    limit: usize,
    eof: bool,
    /// Set once the connection is gone (or its connect failed): the reason.
    pub(super) lost: Option<Option<Failure>>,
    pending: VecDeque<Request>,
    next_id: u64,
    delivering: bool,
    scheduled: bool,
    /// A consumer this stream is piped into asked it to pause.
    pub(super) held: bool,
    /// Whether this stream paused its transport's reading.
    paused: bool,
    connected: Option<Result<(), Failure>>,
    waiters: Vec<Resolver<()>>,
    lp: WeakLoop,
    /// The producer writing into this stream (see `producer.rs`).
    pub(super) producer: Option<Box<dyn Producer>>,
    pub(super) producer_gen: u64,
    /// Where this stream's bytes go while it is piped (see `relay.rs`).
    pub(super) tap: Option<Tap>,
}

impl State {
    fn new(lp: WeakLoop) -> State {
        State {
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            limit: DEFAULT_READ_LIMIT,
            eof: false,
            lost: None,
            pending: VecDeque::new(),
            next_id: 0,
            delivering: false,
            scheduled: false,
            held: false,
            paused: false,
            connected: None,
            waiters: Vec::new(),
            lp,
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

    fn available(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(super) fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.consume(n);
        out
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.scanned = 0;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.len() / 2 && self.pos > 4096 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The failure a read that cannot complete gets: the connection's loss
    /// reason, or `partial` as an [`IncompleteRead`].
    fn ended(&mut self, expected: Option<usize>) -> Failure {
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

    /// The head request and its result, if it can complete now.
    fn next_ready(&mut self) -> Option<Answer> {
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
            Want::Until(delim) => {
                let delim = delim.clone();
                let from = self.scanned.saturating_sub(delim.len());
                let found = self.buf[self.pos + from..]
                    .windows(delim.len().max(1))
                    .position(|w| w == delim.as_slice())
                    .map(|i| from + i + delim.len());
                match found {
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
    fn should_pause(&self) -> bool {
        let avail = self.available();
        let needs_more = matches!(
            self.pending.front(),
            Some(Request { want: Want::Exactly(n), .. }) if *n > avail
        );
        self.held || (avail >= self.limit && !needs_more)
    }
}

pub(super) type Shared = RefCell<State>;

/// A connection read with Deferreds: the callback form of asyncio's
/// `StreamReader`, with the connection's [`Transport`] for writing
/// (`Stream` dereferences to it: `stream.write(..)`, `stream.close()`).
///
/// Each read returns a [`Deferred`] that fires with the bytes once they have
/// arrived: [`read_line`](Self::read_line), [`read_until`](Self::read_until),
/// [`read_exactly`](Self::read_exactly), [`read_some`](Self::read_some).
/// Reads queue: several may be waiting, and they complete in the order they
/// were asked. A read fails with the connection's loss reason (a reset), with
/// [`IncompleteRead`] at the end of file, or with [`LineTooLong`].
///
/// A stream is cheap to clone (clones read the same buffer) and keeps its
/// connection's state alive only while the connection is open: there is no
/// protocol to write, and no shared cell to hold.
///
/// # Guarantees
/// - **Backpressure.** Bytes are read into the stream's buffer until it holds
///   its limit ([`set_read_limit`](Self::set_read_limit), 64 KiB by default)
///   and no read is waiting for more; then the connection is not read until a
///   read takes bytes out, so a peer that sends faster than the program asks
///   is pushed back by TCP.
/// - **Cancel-safe.** Cancelling a read drops the request, never the data: the
///   bytes that had arrived stay in the buffer for the next read.
/// - **Stack-safe.** A read never fires inside the call that asks for it: a
///   read that can complete at once fires from the loop (in this turn if a
///   read of the same stream is firing, else in the next), so a loop that
///   asks for the next line from the callback of the last runs at constant
///   stack depth however many lines are buffered.
/// - The stream manages its transport's reading: do not call
///   `pause_reading`/`resume_reading` on it yourself.
/// - After the peer's end of file the connection stays half-open while any
///   clone of the stream is held or a producer writes into it (you may still
///   write; `close` when done); a stream nobody holds closes.
///
/// # Examples
/// A line-based request and reply, on an in-memory connection:
/// ```
/// use deferloop::net::Stream;
/// use deferloop::EventLoop;
///
/// let ev = EventLoop::new()?;
/// let (stream, peer) = Stream::open_memory(&ev)?;
/// stream.write(b"what colour?\n");
/// peer.send(b"blue\nred\n");
/// assert_eq!(ev.run_until(stream.read_line()).unwrap(), "blue");
/// assert_eq!(ev.run_until(stream.read_exactly(3)).unwrap(), b"red");
/// assert_eq!(peer.take_written(), b"what colour?\n");
/// # Ok::<(), deferloop::Error>(())
/// ```
#[derive(Clone)]
pub struct Stream {
    pub(super) shared: Rc<Shared>,
    pub(super) transport: Transport,
}

impl Deref for Stream {
    type Target = Transport;
    fn deref(&self) -> &Transport {
        &self.transport
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.borrow();
        f.debug_struct("Stream")
            .field("transport", &self.transport)
            .field("buffered", &st.available())
            .field("waiting_reads", &st.pending.len())
            .field("eof", &st.eof)
            .finish()
    }
}

impl Stream {
    /// Connects to `addr` and returns its stream at once: writes are
    /// buffered until the connection is up, and reads wait for it. If the
    /// connect fails, every read (and [`connected`](Self::connected)) fails
    /// with its error.
    ///
    /// # Examples
    /// Asking a line server one question, with a time limit; cancelling the
    /// answer (which the timeout does) closes the connection:
    /// ```no_run
    /// use deferloop::net::Stream;
    /// use deferloop::{Deferred, EventLoop, Failure, Loop};
    /// use std::time::Duration;
    ///
    /// fn ask(lp: &Loop, addr: std::net::SocketAddr) -> Deferred<String> {
    ///     let s = Stream::connect(lp, addr);
    ///     s.write(b"what colour?\n");
    ///     s.read_line()
    ///         .add_timeout(Duration::from_secs(1), lp)
    ///         .add_both(move |r: Result<String, Failure>| {
    ///             s.abort();
    ///             r
    ///         })
    /// }
    /// let ev = EventLoop::new()?;
    /// let answer = ev.run_until(ask(&ev, "127.0.0.1:7000".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect(lp: &Loop, addr: SocketAddr) -> Stream {
        let shared = Rc::new(RefCell::new(State::new(lp.downgrade())));
        let proto = StreamProtocol {
            shared: shared.clone(),
            on_made: None,
        };
        let (transport, _, connected) = lp.connect_tcp(addr, proto).into_parts();
        let stream = Stream { shared, transport };
        let weak = Rc::downgrade(&stream.shared);
        let _ = connected.add_both(move |r: Result<Transport, Failure>| {
            if let (Err(f), Some(shared)) = (r, weak.upgrade()) {
                lost(&shared, Some(f));
            }
            Ok::<_, Failure>(())
        });
        stream
    }

    /// Listens on `addr` and calls `on_connection` with the stream of each
    /// connection accepted (asyncio's `start_server`).
    ///
    /// # Errors
    /// As for [`Loop::listen_tcp`](crate::Loop::listen_tcp).
    ///
    /// # Examples
    /// An echo server:
    /// ```
    /// use deferloop::net::Stream;
    /// use deferloop::EventLoop;
    ///
    /// fn echo(s: Stream) {
    ///     let _ = s.read_some().add_callback(move |data| {
    ///         if data.is_empty() {
    ///             s.close(); // the peer is done
    ///         } else {
    ///             s.write(&data);
    ///             echo(s);
    ///         }
    ///         Ok(())
    ///     });
    /// }
    /// let ev = EventLoop::new()?;
    /// let server = Stream::listen_tcp(&ev, "127.0.0.1:0".parse().unwrap(), echo)?;
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    #[track_caller]
    pub fn listen_tcp(
        lp: &Loop,
        addr: SocketAddr,
        on_connection: impl FnMut(Stream) + 'static,
    ) -> Result<Listener, Error> {
        let on_connection = Rc::new(RefCell::new(on_connection));
        lp.listen_tcp(addr, move || {
            let f = on_connection.clone();
            StreamProtocol::new(move |s| (f.borrow_mut())(s))
        })
    }

    /// Opens an in-memory connection (see [`memory`](super::memory)) and
    /// returns its stream and the test's end of it.
    ///
    /// # Errors
    /// [`Error::Closed`] on a closed loop.
    #[track_caller]
    pub fn open_memory(lp: &Loop) -> Result<(Stream, Peer), Error> {
        let shared = Rc::new(RefCell::new(State::new(lp.downgrade())));
        let proto = StreamProtocol {
            shared: shared.clone(),
            on_made: None,
        };
        let (transport, peer) = memory::open(lp, proto)?;
        Ok((Stream { shared, transport }, peer))
    }

    /// The connection's transport (also reached through `Deref`).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Reads one line, up to `\n`, and returns it without its line ending
    /// (`\n` or `\r\n`). Fails with [`LineTooLong`] if no `\n` comes within
    /// the read limit, with [`IncompleteRead`] at the end of file, and with an
    /// `InvalidData` `io::Error` if the line is not UTF-8 (the line is
    /// consumed either way). For the bytes, use [`read_until`](Self::read_until).
    pub fn read_line(&self) -> Deferred<String> {
        self.read_until(b"\n").add_callback(|mut line: Vec<u8>| {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            String::from_utf8(line)
                .map_err(|e| Failure::new(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
        })
    }

    /// Reads up to and including `delimiter` (asyncio's `readuntil`). Fails
    /// with [`LineTooLong`] if the delimiter does not end within the read
    /// limit, and with [`IncompleteRead`] at the end of file.
    ///
    /// # Panics
    /// If `delimiter` is empty.
    pub fn read_until(&self, delimiter: &[u8]) -> Deferred<Vec<u8>> {
        assert!(!delimiter.is_empty(), "read_until needs a delimiter");
        self.request(Want::Until(delimiter.to_vec()))
    }

    /// Reads exactly `n` bytes (asyncio's `readexactly`); `n` may exceed the
    /// read limit. At the end of file it fails with [`IncompleteRead`],
    /// holding what had arrived.
    pub fn read_exactly(&self, n: usize) -> Deferred<Vec<u8>> {
        self.request(Want::Exactly(n))
    }

    /// Reads whatever is buffered, waiting until at least one byte is. At a
    /// clean end of file it fires with an empty `Vec` (as `read` returns 0);
    /// after a reset it fails with the error.
    pub fn read_some(&self) -> Deferred<Vec<u8>> {
        self.request(Want::Some)
    }

    /// Sets the read limit: how much is buffered before reading pauses, and
    /// the longest line.
    ///
    /// # Panics
    /// If `limit` is 0.
    pub fn set_read_limit(&self, limit: usize) {
        assert!(limit > 0, "a read limit of 0 would never read");
        self.shared.borrow_mut().limit = limit;
        self.update_reading();
    }

    /// The read limit ([`DEFAULT_READ_LIMIT`] unless set).
    pub fn read_limit(&self) -> usize {
        self.shared.borrow().limit
    }

    /// How many bytes have arrived and are not read yet.
    pub fn buffered(&self) -> usize {
        self.shared.borrow().available()
    }

    /// Whether the peer has ended its side (or the connection is gone).
    pub fn at_eof(&self) -> bool {
        let st = self.shared.borrow();
        st.eof || st.lost.is_some()
    }

    /// A Deferred that fires once the connection is up, or fails with the
    /// connect's error. Cancelling it (a timeout does) abandons a connect still
    /// in progress; on a connection that is up, it only drops this Deferred.
    pub fn connected(&self) -> Deferred<()> {
        let mut st = self.shared.borrow_mut();
        if let Some(r) = &st.connected {
            return match r {
                Ok(()) => crate::deferred::succeed(()),
                Err(f) => crate::deferred::fail(f.clone()),
            };
        }
        let t = self.transport.clone();
        let (d, r) = Deferred::with_canceller(move |_| {
            if t.is_connecting() {
                t.abort_with(Cancelled);
            }
        });
        st.waiters.push(r);
        d
    }

    fn request(&self, want: Want) -> Deferred<Vec<u8>> {
        let weak = Rc::downgrade(&self.shared);
        let transport = self.transport.clone();
        let mut st = self.shared.borrow_mut();
        let id = st.next_id;
        st.next_id += 1;
        let (d, done) = Deferred::with_canceller(move |_| {
            // Drop the request; the bytes stay buffered.
            if let Some(shared) = weak.upgrade() {
                let mut st = shared.borrow_mut();
                if st.pending.front().is_some_and(|r| r.id == id) {
                    st.scanned = 0;
                }
                st.pending.retain(|r| r.id != id);
                drop(st);
                update_reading(&shared, &transport);
            }
        });
        st.pending.push_back(Request { id, want, done });
        let idle = !st.delivering && !st.scheduled;
        let has_input = st.available() > 0 || st.eof || st.lost.is_some();
        if idle && has_input {
            st.scheduled = true;
            let lp = st.lp.upgrade();
            drop(st);
            let me = self.clone();
            let queued = lp.map(|lp| lp.call_soon(move |_| me.pump_scheduled()));
            if !matches!(queued, Some(Ok(_))) {
                // No loop to run it: answer now.
                self.shared.borrow_mut().scheduled = false;
                pump(&self.shared, &self.transport);
            }
        } else {
            drop(st);
        }
        self.update_reading();
        d
    }

    fn pump_scheduled(&self) {
        self.shared.borrow_mut().scheduled = false;
        pump(&self.shared, &self.transport);
    }

    pub(super) fn update_reading(&self) {
        update_reading(&self.shared, &self.transport);
    }
}

/// Fires every request that can complete, one after the other, at constant
/// stack depth: a read asked from a callback fired here is queued and fired
/// by this loop once that callback returns.
pub(super) fn pump(shared: &Rc<Shared>, transport: &Transport) {
    if std::mem::replace(&mut shared.borrow_mut().delivering, true) {
        return;
    }
    struct Done<'a>(&'a Shared);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.borrow_mut().delivering = false;
        }
    }
    let guard = Done(shared);
    loop {
        let next = shared.borrow_mut().next_ready();
        match next {
            Some((done, result)) => {
                let _ = done.resolve(result);
            }
            None => break,
        }
    }
    drop(guard);
    update_reading(shared, transport);
}

pub(super) fn update_reading(shared: &Shared, transport: &Transport) {
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
/// producer, end the pipe.
fn lost(shared: &Rc<Shared>, reason: Option<Failure>) {
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
    let dead = Transport { conn: Weak::new() };
    pump(shared, &dead);
}

/// The protocol behind a [`Stream`]: feeds its buffer, completes its reads,
/// and passes the connection's pauses on to a [`Producer`]. Use it where a
/// protocol value is wanted: with [`Loop::listen_tcp`](crate::Loop::listen_tcp),
/// [`Loop::connect_unix`](crate::Loop::connect_unix) or
/// [`memory::open`](super::memory::open).
///
/// # Examples
/// ```
/// use deferloop::net::{memory, StreamProtocol};
/// use deferloop::EventLoop;
///
/// let ev = EventLoop::new()?;
/// let proto = StreamProtocol::new(|s| {
///     let _ = s.read_line().add_callback(move |name| {
///         s.write(format!("hello, {name}\n").as_bytes());
///         Ok(())
///     });
/// });
/// let (_t, peer) = memory::open(&ev, proto)?;
/// peer.send(b"ada\n");
/// ev.run_once()?; // the line arrives, the reply is written
/// assert_eq!(peer.take_written(), b"hello, ada\n");
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct StreamProtocol {
    shared: Rc<Shared>,
    on_made: Option<Box<dyn FnOnce(Stream)>>,
}

impl StreamProtocol {
    /// A protocol that calls `on_connection` with the connection's stream
    /// once it is up.
    pub fn new(on_connection: impl FnOnce(Stream) + 'static) -> StreamProtocol {
        StreamProtocol {
            shared: Rc::new(RefCell::new(State::new(WeakLoop::default()))),
            on_made: Some(Box::new(on_connection)),
        }
    }

    fn stream(&self, t: &Transport) -> Stream {
        Stream {
            shared: self.shared.clone(),
            transport: t.clone(),
        }
    }
}

impl fmt::Debug for StreamProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamProtocol").finish_non_exhaustive()
    }
}

impl Protocol for StreamProtocol {
    fn connection_made(&mut self, t: &Transport) {
        let waiters = {
            let mut st = self.shared.borrow_mut();
            if let Some(lp) = t.event_loop() {
                st.lp = lp.downgrade();
            }
            st.connected = Some(Ok(()));
            std::mem::take(&mut st.waiters)
        };
        for w in waiters {
            let _ = w.callback(());
        }
        if let Some(f) = self.on_made.take() {
            f(self.stream(t));
        }
        update_reading(&self.shared, t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let piped = {
            let mut st = self.shared.borrow_mut();
            match &mut st.tap {
                Some(tap) => {
                    tap.pass(data);
                    true
                }
                None => {
                    st.push(data);
                    false
                }
            }
        };
        if !piped {
            pump(&self.shared, t);
        }
    }

    fn eof_received(&mut self, t: &Transport) -> bool {
        let tap = {
            let mut st = self.shared.borrow_mut();
            st.eof = true;
            st.tap.take()
        };
        if let Some(tap) = tap {
            tap.source_ended();
        }
        pump(&self.shared, t);
        // Half-open while someone may still write: a holder of the stream,
        // or a producer (the other direction of a relay).
        Rc::strong_count(&self.shared) > 1 || self.shared.borrow().producer.is_some()
    }

    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        lost(&self.shared, reason);
    }

    fn pause_writing(&mut self, _: &Transport) {
        super::producer::notify(&self.shared, true);
    }

    fn resume_writing(&mut self, _: &Transport) {
        super::producer::notify(&self.shared, false);
    }
}
