//! Producers: sources of bytes that a [`Stream`]'s flow control drives
//! (Twisted's `IPushProducer` and `registerProducer`): [`Stream::register_producer`],
//! the generator producer behind [`Stream::produce`], and [`Stream::send_file`].
//! The [`Producer`] trait stands beside `Protocol` (`net/protocol.rs`).
//! Tests: tests/net_producer_*.rs.

use crate::net::blocks::stream::Stream;
use crate::net::blocks::stream_state::{notify, StreamCell};
use crate::net::{Producer, Transport};
use crate::{Deferred, Failure, Resolver};
use std::io;

impl Stream {
    /// Attaches `producer` to this stream's writing side, replacing any
    /// other. It is paused at once if the write buffer is above its
    /// high-water mark, and stopped at once if the connection is gone.
    pub fn register_producer(&self, producer: impl Producer) {
        let mut p: Box<dyn Producer> = Box::new(producer);
        let lost = self.shared.borrow().lost.clone();
        if let Some(reason) = lost {
            p.stop_producing(reason);
            return;
        }
        let old = {
            let mut st = self.shared.borrow_mut();
            st.producer_gen += 1;
            st.producer.replace(p)
        };
        // Dropped with the stream unborrowed: a producer may hold a Resolver,
        // whose drop runs callbacks that use this stream.
        drop(old);
        if self.is_writing_paused() {
            notify(&self.shared, true);
        }
    }

    /// Detaches the producer, if any, without telling it.
    pub fn unregister_producer(&self) {
        let old = {
            let mut st = self.shared.borrow_mut();
            st.producer_gen += 1;
            st.producer.take()
        };
        drop(old); // unborrowed, as in `register_producer`
    }

    /// Writes the chunks `next` returns, as fast as the peer takes them,
    /// until it returns `None`: a producer made of a callback. `next` is
    /// called only while the write buffer is below its high-water mark, so
    /// at most about one chunk past the mark is ever buffered. The Deferred
    /// fires with the number of bytes written, or fails if the connection
    /// goes first (with its reason, or a `BrokenPipe` `io::Error`).
    /// Cancelling it stops the producer. The connection stays open: call
    /// `write_eof` or `close` when done.
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::Stream;
    /// use deferloop::EventLoop;
    ///
    /// let ev = EventLoop::new()?;
    /// let (stream, peer) = Stream::open_memory(&ev)?;
    /// let mut left = 3;
    /// let sent = stream.produce(move || {
    ///     left -= 1;
    ///     (left >= 0).then(|| b"tick\n".to_vec())
    /// });
    /// assert_eq!(ev.run_until(sent).unwrap(), 15);
    /// ev.run_once()?; // writes of one turn are flushed together
    /// assert_eq!(peer.take_written(), b"tick\ntick\ntick\n");
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    pub fn produce(&self, next: impl FnMut() -> Option<Vec<u8>> + 'static) -> Deferred<u64> {
        let weak = std::rc::Rc::downgrade(&self.shared);
        let (d, done) = Deferred::with_canceller(move |_| {
            if let Some(shared) = weak.upgrade() {
                let mut st = shared.borrow_mut();
                st.producer_gen += 1;
                st.producer = None;
            }
        });
        self.register_producer(Generate {
            next,
            to: self.transport.clone(),
            shared: std::rc::Rc::downgrade(&self.shared),
            done: Some(done),
            bytes: 0,
            paused: false,
        });
        // Start from the loop, never inside this call.
        let shared = self.shared.clone();
        let started = self
            .event_loop()
            .map(|lp| lp.call_soon(move |_| notify(&shared, false)));
        if !matches!(started, Some(Ok(_))) {
            notify(&self.shared, false);
        }
        d
    }
}

struct Generate<F> {
    next: F,
    to: Transport,
    shared: std::rc::Weak<StreamCell>,
    done: Option<Resolver<u64>>,
    bytes: u64,
    paused: bool,
}

impl<F: FnMut() -> Option<Vec<u8>> + 'static> Producer for Generate<F> {
    fn pause_producing(&mut self) {
        self.paused = true;
    }

    fn resume_producing(&mut self) {
        self.paused = false;
        if self.done.as_ref().is_none_or(Resolver::is_called) {
            return;
        }
        while !self.paused && !self.to.is_writing_paused() && !self.to.is_closing() {
            match (self.next)() {
                Some(chunk) => {
                    self.bytes += chunk.len() as u64;
                    self.to.write(&chunk);
                }
                None => {
                    if let Some(shared) = self.shared.upgrade() {
                        let mut st = shared.borrow_mut();
                        st.producer_gen += 1;
                    }
                    if let Some(done) = self.done.take() {
                        let _ = done.callback(self.bytes);
                    }
                    return;
                }
            }
        }
    }

    fn stop_producing(&mut self, reason: Option<Failure>) {
        if let Some(done) = self.done.take() {
            let f = reason.unwrap_or_else(|| {
                Failure::new(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the connection closed before the producer was done",
                ))
            });
            let _ = done.errback(f);
        }
    }
}

/// How much [`Stream::send_file`] reads per call on the thread pool.
const FILE_CHUNK: usize = 64 * 1024;

struct FileSend {
    file: Option<std::fs::File>,
    to: Transport,
    shared: std::rc::Weak<StreamCell>,
    done: Option<Resolver<u64>>,
    bytes: u64,
    paused: bool,
    reading: bool,
}

type FileRef = std::rc::Rc<std::cell::RefCell<FileSend>>;

/// The producer registered for a file: the state is shared with the reads
/// in flight on the pool.
struct FileProducer(FileRef);

impl Producer for FileProducer {
    fn pause_producing(&mut self) {
        self.0.borrow_mut().paused = true;
    }

    fn resume_producing(&mut self) {
        self.0.borrow_mut().paused = false;
        read_next(&self.0);
    }

    fn stop_producing(&mut self, reason: Option<Failure>) {
        let done = {
            let mut f = self.0.borrow_mut();
            f.file = None;
            f.done.take()
        };
        if let Some(done) = done {
            let _ = done.errback(reason.unwrap_or_else(|| {
                Failure::new(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the connection closed before the file was sent",
                ))
            }));
        }
    }
}

/// Reads the next chunk on the pool unless paused, reading, or done.
fn read_next(state: &FileRef) {
    let (mut file, lp) = {
        let mut f = state.borrow_mut();
        if f.paused || f.reading || f.done.as_ref().is_none_or(Resolver::is_called) {
            return;
        }
        let Some(lp) = f.to.event_loop() else { return };
        let Some(file) = f.file.take() else { return };
        f.reading = true;
        (file, lp)
    };
    let state = state.clone();
    let _ = lp
        .defer_to_thread(move || {
            let mut buf = vec![0; FILE_CHUNK];
            let n = io::Read::read(&mut file, &mut buf);
            (file, buf, n)
        })
        .add_both(move |r: Result<_, Failure>| {
            let outcome = {
                let mut f = state.borrow_mut();
                f.reading = false;
                if f.done.as_ref().is_none_or(Resolver::is_called) {
                    return Ok(()); // stopped or cancelled meanwhile
                }
                match r.and_then(|(file, buf, n)| Ok((file, buf, n?))) {
                    Ok((_, _, 0)) => Some(Ok(f.bytes)),
                    Ok((file, buf, n)) => {
                        f.to.write(&buf[..n]);
                        f.bytes += n as u64;
                        f.paused |= f.to.is_writing_paused();
                        f.file = Some(file);
                        None
                    }
                    Err(e) => Some(Err(e)),
                }
            };
            match outcome {
                None => read_next(&state),
                Some(end) => {
                    let (done, shared) = {
                        let mut f = state.borrow_mut();
                        (f.done.take(), f.shared.upgrade())
                    };
                    if let Some(shared) = shared {
                        shared.borrow_mut().producer_gen += 1;
                        shared.borrow_mut().producer = None;
                    }
                    if let Some(done) = done {
                        let _ = done.resolve(end);
                    }
                }
            }
            Ok::<(), Failure>(())
        });
}

impl Stream {
    /// Sends `file` from its current position to its end, reading it in
    /// 64 KiB chunks on the loop's thread pool (Twisted's `FileSender`): the
    /// next chunk is read only while the write buffer is below its high-water
    /// mark. Fires with the number of bytes sent, or fails with a read error,
    /// or if the connection goes first (with its reason, or a `BrokenPipe`
    /// `io::Error`). Cancelling it stops sending. The connection stays open.
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::Stream;
    /// use deferloop::EventLoop;
    ///
    /// let path = std::env::temp_dir().join(format!("deferloop-doc-{}", std::process::id()));
    /// std::fs::write(&path, b"from a file\n")?;
    /// let file = std::fs::File::open(&path)?;
    /// let ev = EventLoop::new()?;
    /// let (stream, peer) = Stream::open_memory(&ev)?;
    /// assert_eq!(ev.run_until(stream.send_file(file)).unwrap(), 12);
    /// assert_eq!(peer.take_written(), b"from a file\n");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn send_file(&self, file: std::fs::File) -> Deferred<u64> {
        let weak = std::rc::Rc::downgrade(&self.shared);
        let (d, done) = Deferred::with_canceller(move |_| {
            if let Some(shared) = weak.upgrade() {
                let mut st = shared.borrow_mut();
                st.producer_gen += 1;
                st.producer = None;
            }
        });
        let state = std::rc::Rc::new(std::cell::RefCell::new(FileSend {
            file: Some(file),
            to: self.transport.clone(),
            shared: std::rc::Rc::downgrade(&self.shared),
            done: Some(done),
            bytes: 0,
            paused: false,
            reading: false,
        }));
        self.register_producer(FileProducer(state.clone()));
        read_next(&state);
        d
    }
}
