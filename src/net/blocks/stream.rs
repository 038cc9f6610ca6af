//! Reading a connection with Deferreds: [`Stream`] (asyncio's `StreamReader`
//! and `StreamWriter` in one cheap handle), [`StreamProtocol`] (the protocol
//! that feeds it). The state under it, and the errors a read fails with, are
//! `stream_state.rs`; producers live in `producer.rs`, copies and relays in
//! `relay.rs`.
//! Tests: tests/net_stream_*.rs.

use crate::deferred::{CancelHook, Cancelled};
use crate::net::blocks::stream_state::{
    lost, notify, pump, update_reading, Done, Request, StreamCell, StreamState, Want,
};
use crate::net::open::memory::{self, Peer};
use crate::net::{ConnectOptions, Connection, Listener, Protocol, Target, Transport};
use crate::reactor::WeakLoop;
use crate::{Deferred, Error, Failure, Loop, Resolver};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::panic::Location;
use std::rc::Rc;

/// A connection read with Deferreds: the callback form of asyncio's
/// `StreamReader`, with the connection's [`Transport`] for writing
/// (`Stream` dereferences to it: `stream.write(..)`, `stream.close()`).
///
/// Each read returns a [`Deferred`] that fires with the bytes once they have
/// arrived: [`read_line`](Self::read_line), [`read_until`](Self::read_until),
/// [`read_exactly`](Self::read_exactly), [`read_some`](Self::read_some).
/// Reads queue: several may be waiting, and they complete in the order they
/// were asked. A read fails with the connection's loss reason (a reset), with
/// [`IncompleteRead`](crate::net::IncompleteRead) at the end of file, or with [`LineTooLong`](crate::net::LineTooLong).
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
/// - **No copy on the way in.** From a TCP or Unix socket, bytes are read
///   straight into the stream's buffer (it lends it to the read, asyncio's
///   `BufferedProtocol`), and a read that takes all of it gets that buffer
///   itself; over TLS the plaintext is copied in from the TLS layer.
/// - **Cancel-safe.** Cancelling a read drops the request, never the data: the
///   bytes that had arrived stay in the buffer for the next read. A read
///   cancelled while others wait behind it (a timed-out `read_line` ahead of
///   pipelined reads) lets them go on at once, answered from what is
///   buffered, without waiting for more input.
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
    pub(super) shared: Rc<StreamCell>,
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
            .field("waiting_reads", &st.waiting_reads())
            .field("eof", &st.eof)
            .finish()
    }
}

impl Stream {
    /// Connects to `target` — `"host:port"`, `(host, port)` or a
    /// `SocketAddr` — and returns its stream at once: writes are buffered
    /// until the connection is up, and reads wait for it. A name is looked
    /// up and its addresses raced (Happy Eyeballs), as
    /// [`Loop::connect_tcp_to`] does. If the connect fails (a refused
    /// address, a name that does not resolve, a malformed target), every
    /// read (and [`connected`](Self::connected)) fails with its error.
    ///
    /// # Examples
    /// Asking a line server one question, with a time limit; cancelling the
    /// answer (which the timeout does) closes the connection:
    /// ```no_run
    /// use deferloop::net::Stream;
    /// use deferloop::{Deferred, EventLoop, Failure, Loop};
    /// use std::time::Duration;
    ///
    /// fn ask(lp: &Loop, server: &str) -> Deferred<String> {
    ///     let s = Stream::connect(lp, server);
    ///     s.write(b"what colour?\n");
    ///     s.read_line()
    ///         .add_timeout(Duration::from_secs(1), lp)
    ///         .add_both(move |r: Result<String, Failure>| {
    ///             s.abort();
    ///             r
    ///         })
    /// }
    /// let ev = EventLoop::new()?;
    /// let answer = ev.run_until(ask(&ev, "colours.internal:7000"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A name that does not resolve is an error on the stream, not a panic:
    /// ```
    /// use deferloop::net::Stream;
    /// use deferloop::{EventLoop, Failure};
    ///
    /// let ev = EventLoop::new()?;
    /// let s = Stream::connect(&ev, "nonexistent.invalid:80");
    /// let failed = s.connected().add_both(|r| Ok::<_, Failure>(r.err()));
    /// let f = ev.run_until(failed).unwrap().expect("the connect fails");
    /// assert!(f.to_string().contains("nonexistent.invalid"), "{f}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect(lp: &Loop, target: impl Into<Target>) -> Stream {
        Stream::connect_with(lp, target, &ConnectOptions::default())
    }

    /// [`connect`](Self::connect) with your own [`ConnectOptions`]
    /// (resolver, timeouts, address preference).
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::{AddressPreference, ConnectOptions, Stream};
    /// use deferloop::EventLoop;
    ///
    /// let ev = EventLoop::new()?;
    /// let server = Stream::listen_tcp(&ev, "127.0.0.1:0".parse()?, |s| s.write(b"hi\n"))?;
    /// let port = server.local_addr().as_inet().unwrap().port();
    /// let opts = ConnectOptions::default().with_preference(AddressPreference::Ipv4Only);
    /// let s = Stream::connect_with(&ev, ("localhost", port), &opts);
    /// assert_eq!(ev.run_until(s.read_line())?, "hi");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_with(lp: &Loop, target: impl Into<Target>, options: &ConnectOptions) -> Stream {
        let (target, at) = (target.into(), Location::caller());
        Stream::over(lp, |proto| lp.connect_tcp_from(target, proto, options, at))
    }

    /// A stream over the connection `connect` makes with its protocol.
    pub(crate) fn over(
        lp: &Loop,
        connect: impl FnOnce(StreamProtocol) -> Connection<StreamProtocol>,
    ) -> Stream {
        let shared = Rc::new(RefCell::new(StreamState::new(lp.downgrade())));
        let proto = StreamProtocol {
            shared: shared.clone(),
            on_made: None,
        };
        let (transport, _, connected) = connect(proto).into_parts();
        shared.borrow_mut().transport = transport.clone();
        let stream = Stream { shared, transport };
        // Held strongly until the connect is settled: a failed connect drops
        // the protocol (the state's other owner) before this runs, and a
        // stream whose handle was dropped (`relay(&a, &Stream::connect(..))`)
        // must still fail what waits on it, a copy's Deferred among them,
        // with the connect's error rather than abandon it.
        let held = stream.shared.clone();
        connected
            .add_both(move |r: Result<Transport, Failure>| {
                if let Err(f) = r {
                    lost(&held, Some(f));
                }
                Ok::<_, Failure>(())
            })
            .detach();
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

    /// Opens an in-memory connection (see [`memory`](crate::net::open::memory)) and
    /// returns its stream and the test's end of it.
    ///
    /// # Errors
    /// [`Error::Closed`] on a closed loop.
    #[track_caller]
    pub fn open_memory(lp: &Loop) -> Result<(Stream, Peer), Error> {
        let shared = Rc::new(RefCell::new(StreamState::new(lp.downgrade())));
        let proto = StreamProtocol {
            shared: shared.clone(),
            on_made: None,
        };
        let (transport, peer) = memory::open(lp, proto)?;
        shared.borrow_mut().transport = transport.clone();
        Ok((Stream { shared, transport }, peer))
    }

    /// The connection's transport (also reached through `Deref`).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Reads one line, up to `\n`, and returns it without its line ending
    /// (`\n` or `\r\n`). Fails with [`LineTooLong`](crate::net::LineTooLong) if no `\n` comes within
    /// the read limit, with [`IncompleteRead`](crate::net::IncompleteRead) at the end of file, and with an
    /// `InvalidData` `io::Error` if the line is not UTF-8 (the line is
    /// consumed either way). For the bytes, use [`read_until`](Self::read_until).
    #[track_caller]
    pub fn read_line(&self) -> Deferred<String> {
        let (d, done) = self.deferred();
        self.request(Want::Line, Done::Line(done));
        d
    }

    /// Reads up to and including `delimiter` (asyncio's `readuntil`). Fails
    /// with [`LineTooLong`](crate::net::LineTooLong) if the delimiter does not end within the read
    /// limit, and with [`IncompleteRead`](crate::net::IncompleteRead) at the end of file.
    ///
    /// # Panics
    /// If `delimiter` is empty.
    #[track_caller]
    pub fn read_until(&self, delimiter: &[u8]) -> Deferred<Vec<u8>> {
        assert!(!delimiter.is_empty(), "read_until needs a delimiter");
        self.read(Want::Until(SmallVec::from_slice(delimiter)))
    }

    /// Reads exactly `n` bytes (asyncio's `readexactly`); `n` may exceed the
    /// read limit. At the end of file it fails with [`IncompleteRead`](crate::net::IncompleteRead),
    /// holding what had arrived.
    #[track_caller]
    pub fn read_exactly(&self, n: usize) -> Deferred<Vec<u8>> {
        self.read(Want::Exactly(n))
    }

    /// Reads whatever is buffered, waiting until at least one byte is. At a
    /// clean end of file it fires with an empty `Vec` (as `read` returns 0);
    /// after a reset it fails with the error.
    #[track_caller]
    pub fn read_some(&self) -> Deferred<Vec<u8>> {
        self.read(Want::Some)
    }

    /// Sets the read limit: how much is buffered before reading pauses, and
    /// the longest line.
    ///
    /// # Panics
    /// If `limit` is 0.
    pub fn set_read_limit(&self, limit: usize) {
        assert!(limit > 0, "a read limit of 0 would never read");
        self.shared.borrow_mut().limit = limit;
        // A read waiting for its delimiter may be over the new limit now.
        self.schedule();
        self.update_reading();
    }

    /// The read limit ([`DEFAULT_READ_LIMIT`](crate::net::DEFAULT_READ_LIMIT) unless set).
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

    #[track_caller]
    fn read(&self, want: Want) -> Deferred<Vec<u8>> {
        let (d, done) = self.deferred();
        self.request(want, Done::Bytes(done));
        d
    }

    /// A Deferred for a read, in the storage of the last read's if nothing
    /// holds that any more. It has no canceller: a cancelled read fails with
    /// `Cancelled` at once, and its request is dropped when it reaches the
    /// head of the queue, without taking any bytes. The stream is told of the
    /// cancel (through a weak reference to its state: no allocation), so
    /// that the reads behind a cancelled head are answered from what is
    /// buffered without waiting for more input.
    #[track_caller]
    fn deferred<T: 'static>(&self) -> (Deferred<T>, Resolver<T>) {
        let spare = self.shared.borrow_mut().spare.take();
        let (d, r) = Deferred::new_in(spare);
        let hook: std::rc::Weak<StreamCell> = Rc::downgrade(&self.shared);
        d.tell_on_cancel(hook);
        d.tag_wait(|| crate::deferred::registry::Wait::Read {
            peer: self
                .peer_addr()
                .map_or_else(|e| e.to_string(), |a| a.to_string()),
            buffered: self.buffered(),
        });
        (d, r)
    }

    fn request(&self, want: Want, done: Done) {
        // Cancelled reads at the head go first (dropped outside the borrow:
        // what their chains hold may run code).
        loop {
            let cancelled = self.shared.borrow_mut().pop_cancelled();
            if cancelled.is_none() {
                break;
            }
        }
        self.shared
            .borrow_mut()
            .pending
            .push_back(Request { want, done });
        self.schedule();
        self.update_reading();
    }

    /// Answers what can be answered from the loop, soon (never inside the
    /// caller's call), if there is input to answer from or the head of the
    /// queue needs none (a read of 0 bytes, a cancelled read). The head is
    /// looked at, not the read just asked for: popping a cancelled head can
    /// leave a read of 0 bytes at the front that was queued behind it.
    fn schedule(&self) {
        let mut st = self.shared.borrow_mut();
        let idle = !st.delivering && !st.scheduled;
        let has_input = st.available() > 0 || st.eof || st.lost.is_some();
        if idle && !st.pending.is_empty() && (has_input || st.head_needs_no_input()) {
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
        }
    }

    fn pump_scheduled(&self) {
        self.shared.borrow_mut().scheduled = false;
        pump(&self.shared, &self.transport);
    }

    pub(super) fn update_reading(&self) {
        update_reading(&self.shared, &self.transport);
    }
}

/// A read was cancelled. A cancelled read at the head of the queue holds up
/// the reads behind it until it is dropped: look at the queue again (from
/// the loop, as for any read that can complete), so that they are answered
/// from what is buffered, or from an end of file, without waiting for input
/// that may never come.
impl CancelHook for StreamCell {
    fn cancelled(self: Rc<Self>) {
        let transport = {
            let st = self.borrow();
            if !st.head_needs_no_input() {
                // One behind the head: dropped once the head is answered.
                return;
            }
            st.transport.clone()
        };
        Stream {
            shared: self,
            transport,
        }
        .schedule();
    }
}

/// The protocol behind a [`Stream`]: feeds its buffer, completes its reads,
/// and passes the connection's pauses on to a [`Producer`](crate::net::Producer). Use it where a
/// protocol value is wanted: with [`Loop::listen_tcp`](crate::Loop::listen_tcp),
/// [`Loop::connect_unix`](crate::Loop::connect_unix) or
/// [`memory::open`](crate::net::open::memory::open).
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
    shared: Rc<StreamCell>,
    on_made: Option<Box<dyn FnOnce(Stream)>>,
}

impl StreamProtocol {
    /// A protocol that calls `on_connection` with the connection's stream
    /// once it is up.
    pub fn new(on_connection: impl FnOnce(Stream) + 'static) -> StreamProtocol {
        StreamProtocol {
            shared: Rc::new(RefCell::new(StreamState::new(WeakLoop::default()))),
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
            st.transport = t.clone();
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
        let copied = {
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
        if !copied {
            pump(&self.shared, t);
        }
    }

    fn lends_buffers(&self) -> bool {
        true
    }

    /// The stream's own buffer, for the read to append to: no copy through
    /// the loop's read buffer. Not while the stream is copied (its bytes
    /// pass on, see `relay.rs`).
    fn get_buffer(&mut self, _t: &Transport, size_hint: usize) -> Option<Vec<u8>> {
        let mut st = self.shared.borrow_mut();
        if st.tap.is_some() {
            return None;
        }
        Some(st.lend(size_hint))
    }

    fn buffer_updated(&mut self, t: &Transport, buffer: Vec<u8>, n: usize) {
        self.shared.borrow_mut().put_back(buffer, n);
        if n > 0 {
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
        notify(&self.shared, true);
    }

    fn resume_writing(&mut self, _: &Transport) {
        notify(&self.shared, false);
    }
}
