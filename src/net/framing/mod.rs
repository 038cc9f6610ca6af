//! Framing: Twisted's most used protocols — lines, and length-prefixed
//! messages — as pure decoders ([`LineDecoder`], [`LengthDecoder`]) and as
//! protocol adapters ([`Lines`], [`LengthPrefixed`]) around a [`FrameProtocol`].
//!
//! The decoders do no I/O and allocate only to keep a partial frame across
//! reads: frames that arrive whole inside one read are handed out as slices of
//! that read, without a copy. A peer cannot make them buffer without bound:
//! a line longer than the limit, or a length prefix above the limit, is a
//! [`FrameError`] before anything is stored for it.

mod decode;

pub use decode::{LengthDecoder, LineDecoder, Prefix, PrefixBytes, DEFAULT_MAX_LINE};

use super::{Protocol, Transport};
use crate::{Error, Failure};
use std::error::Error as StdError;
use std::fmt;
use std::num::NonZeroUsize;

/// The peer broke the framing rules.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A line (without its delimiter) was longer than the limit; `seen` is how
    /// much of it had arrived when it was refused (at least `limit + 1`).
    LineTooLong {
        /// The maximum line length.
        limit: usize,
        /// Bytes of the line seen.
        seen: usize,
    },
    /// A length prefix announced a message larger than the limit.
    MessageTooLarge {
        /// The announced size.
        size: usize,
        /// The maximum message size.
        limit: usize,
    },
    /// The peer's end of file came in the middle of a frame: these bytes of
    /// it (a line without its delimiter, a message shorter than its prefix
    /// said) are all there will be.
    Truncated {
        /// Bytes of the unfinished frame: of a line, of a message after its
        /// prefix (0 when only the prefix had come), or of a prefix cut short.
        buffered: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::LineTooLong { limit, seen } => {
                write!(f, "line too long: {seen} bytes or more, limit {limit}")
            }
            FrameError::Truncated { buffered } => {
                write!(f, "end of file inside a frame ({buffered} bytes of it)")
            }
            FrameError::MessageTooLarge { size, limit } => {
                write!(
                    f,
                    "message too large: {size} bytes announced, limit {limit}"
                )
            }
        }
    }
}

impl StdError for FrameError {}

/// What a framed protocol implements: [`Protocol`] with whole frames (lines
/// or messages) instead of bytes. Use it through [`Lines`] or
/// [`LengthPrefixed`].
pub trait FrameProtocol: 'static {
    /// One frame, without its delimiter or prefix.
    fn frame_received(&mut self, transport: &Transport, frame: &[u8]);

    /// The peer broke the framing (an over-long line, an oversize message).
    /// Called before the connection is closed with `error` as the reason
    /// given to `connection_lost`; what this writes (an error reply) is
    /// flushed first. Also called, with [`FrameError::Truncated`], just
    /// before `eof_received` when the peer's end of file cut a frame short:
    /// that closes nothing by itself, and the partial frame is dropped.
    fn frame_error(&mut self, transport: &Transport, error: &FrameError) {
        let _ = (transport, error);
    }

    // `connection_made`, `eof_received`, `connection_lost`, `pause_writing`
    // and `resume_writing`: `Protocol`'s, defaults included.
    crate::net::protocol::stream_events!();
}

/// Forwards every `Protocol` method but `data_received` to the inner one.
macro_rules! forward_protocol {
    () => {
        fn connection_made(&mut self, t: &Transport) {
            self.inner.connection_made(t)
        }
        fn eof_received(&mut self, t: &Transport) -> bool {
            if self.decoder.mid_frame() {
                let buffered = self.decoder.buffered();
                let e = FrameError::Truncated { buffered };
                self.inner.frame_error(t, &e);
            }
            self.inner.eof_received(t)
        }
        fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
            self.inner.connection_lost(t, reason)
        }
        fn pause_writing(&mut self, t: &Transport) {
            self.inner.pause_writing(t)
        }
        fn resume_writing(&mut self, t: &Transport) {
            self.inner.resume_writing(t)
        }
    };
}

/// A [`Protocol`] that hands its inner [`FrameProtocol`] one line at a time.
///
/// Lines after one that closed the transport are dropped. A line over the
/// limit calls `frame_error`, then closes the connection (flushing what was
/// written) with the [`FrameError`] as `connection_lost`'s reason. So are
/// the lines that came in the clear behind one whose `frame_received` began
/// a TLS upgrade (`start_tls`): they were not sent over TLS, so they are
/// never delivered as if they had been (a STARTTLS command injection); the
/// same holds for [`LengthPrefixed`].
///
/// `pause_reading` from `frame_received` stops the lines too: those already
/// read wait until `resume_reading`, as Twisted's `LineReceiver` does on
/// `pauseProducing`. The framer's own hold (while a burst is delivered 64
/// lines a turn) is apart from the protocol's pause: neither lifts the other.
///
/// # Examples
/// A line server that answers each line with its length, and a client:
/// ```
/// use deferloop::net::framing::{FrameProtocol, Lines};
/// use deferloop::net::{Protocol, Transport};
/// use deferloop::EventLoop;
///
/// struct Len;
/// impl FrameProtocol for Len {
///     fn frame_received(&mut self, t: &Transport, line: &[u8]) {
///         t.write(format!("{}\r\n", line.len()).as_bytes());
///     }
/// }
/// struct Ask(Vec<u8>);
/// impl Protocol for Ask {
///     fn connection_made(&mut self, t: &Transport) {
///         t.write(b"hello\r\nsplit li");
///         t.write(b"ne\r\n");
///     }
///     fn data_received(&mut self, t: &Transport, data: &[u8]) {
///         self.0.extend_from_slice(data);
///         if self.0 == b"5\r\n10\r\n" {
///             if let Some(lp) = t.event_loop() {
///                 lp.stop();
///             }
///         }
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let server = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Lines::new(Len))?;
/// let _client = ev.connect_tcp(server.local_addr().as_inet().unwrap(), Ask(Vec::new()));
/// ev.run()?;
/// # Ok::<(), deferloop::Error>(())
/// ```
pub struct Lines<P> {
    decoder: LineDecoder,
    inner: P,
    backlog: Backlog,
}

impl<P: std::fmt::Debug> std::fmt::Debug for Lines<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("decoder", &self.decoder)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<P: FrameProtocol> Lines<P> {
    /// Lines ending with `b"\r\n"`, at most [`DEFAULT_MAX_LINE`] bytes.
    pub fn new(inner: P) -> Lines<P> {
        Lines {
            decoder: LineDecoder::new(b"\r\n", DEFAULT_MAX_LINE).expect("non-empty delimiter"),
            inner,
            backlog: Backlog::default(),
        }
    }

    /// Lines ending with `delimiter`, at most `max_line` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty delimiter.
    pub fn with_delimiter(inner: P, delimiter: &[u8], max_line: usize) -> Result<Lines<P>, Error> {
        Ok(Lines {
            decoder: LineDecoder::new(delimiter, max_line)?,
            inner,
            backlog: Backlog::default(),
        })
    }

    /// The inner protocol.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The inner protocol, mutably.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

impl<P: FrameProtocol> Lines<P> {
    /// Delivers at most `n` lines per connection per turn (default
    /// [`FRAMES_PER_TURN`]); the rest wait, with reading held, for the next
    /// turns, so one peer's burst of short lines cannot hold the loop.
    pub fn set_frames_per_turn(&mut self, n: NonZeroUsize) {
        self.backlog.per_turn = n.get();
    }
}

impl<P: FrameProtocol> Protocol for Lines<P> {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let decoder = &mut self.decoder;
        let r = self.backlog.deliver(&mut self.inner, t, data, |input, on| {
            decoder.feed_counted(input, on)
        });
        if let Err(e) = r {
            self.inner.frame_error(t, &e);
            t.close_with(e);
        }
    }

    forward_protocol!();
}

/// A [`Protocol`] that hands its inner [`FrameProtocol`] one length-prefixed
/// message at a time; see [`Lines`] for what happens after a close or on an
/// oversize prefix. Send with [`LengthPrefixed::send`].
pub struct LengthPrefixed<P> {
    decoder: LengthDecoder,
    inner: P,
    backlog: Backlog,
}

impl<P: std::fmt::Debug> std::fmt::Debug for LengthPrefixed<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LengthPrefixed")
            .field("decoder", &self.decoder)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<P: FrameProtocol> LengthPrefixed<P> {
    /// Messages with a `prefix`-sized big-endian length, at most `max` bytes.
    pub fn new(inner: P, prefix: Prefix, max: usize) -> LengthPrefixed<P> {
        LengthPrefixed {
            decoder: LengthDecoder::new(prefix, max),
            inner,
            backlog: Backlog::default(),
        }
    }

    /// Writes `message` with its prefix (one system call when nothing is
    /// buffered and it is small; see [`Transport::write_vectored`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the length does not fit the prefix;
    /// nothing is written then.
    pub fn send(t: &Transport, prefix: Prefix, message: &[u8]) -> Result<(), Error> {
        let head = prefix.encode(message.len()).ok_or(Error::InvalidInput(
            "message too long for its length prefix",
        ))?;
        t.write_vectored(&[head.as_ref(), message]);
        Ok(())
    }

    /// The inner protocol.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The inner protocol, mutably.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

impl<P: FrameProtocol> LengthPrefixed<P> {
    /// As [`Lines::set_frames_per_turn`].
    pub fn set_frames_per_turn(&mut self, n: NonZeroUsize) {
        self.backlog.per_turn = n.get();
    }
}

impl<P: FrameProtocol> Protocol for LengthPrefixed<P> {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let decoder = &mut self.decoder;
        let r = self.backlog.deliver(&mut self.inner, t, data, |input, on| {
            decoder.feed_counted(input, on)
        });
        if let Err(e) = r {
            self.inner.frame_error(t, &e);
            t.close_with(e);
        }
    }

    forward_protocol!();
}

/// Frames delivered per connection per turn by [`Lines`] and
/// [`LengthPrefixed`], unless set otherwise.
pub const FRAMES_PER_TURN: usize = 64;

/// What the adapters share: the bytes of a read beyond the turn's budget of
/// frames, decoded and delivered in later turns while reading is held.
/// They wait as they came, undecoded: a read of tiny frames costs its own
/// size, not an allocation per frame.
///
/// And the STARTTLS rule: once the inner protocol begins a TLS upgrade from
/// `frame_received` on a connection that was in the clear, no more frames of
/// that read (or of the backlog) are delivered. They arrived in the clear, so
/// delivering them as if they came over TLS would let a man in the middle
/// inject commands (CVE-2011-0411); a client has to wait for the server's
/// answer before it starts TLS (RFC 3207, section 5).
struct Backlog {
    /// Bytes read and not yet decoded: `rest[at..]` (emptied: no capacity
    /// kept).
    rest: Vec<u8>,
    at: usize,
    per_turn: usize,
    /// The connection was in the clear when this delivery began (and so
    /// when what waits was read).
    clear: bool,
    /// The turn of the last delivery, and the frames delivered in it: a
    /// turn may deliver twice (what waited, then a new read).
    turn: Option<u64>,
    spent: usize,
}

impl Default for Backlog {
    fn default() -> Self {
        Backlog {
            rest: Vec::new(),
            at: 0,
            per_turn: FRAMES_PER_TURN,
            clear: true,
            turn: None,
            spent: 0,
        }
    }
}

/// Whether `t` is (or is becoming) a TLS connection: a layer is on its
/// wire (only TLS makes one).
fn is_tls(t: &Transport) -> bool {
    t.is_layered()
}

/// Why a delivery stopped before the end of its bytes.
#[derive(PartialEq)]
enum Stop {
    No,
    Budget,
    /// The protocol paused reading: frames already read wait too.
    Paused,
    /// Closing, or a TLS upgrade: the rest is dropped.
    Drop,
}

impl Backlog {
    /// Decodes what waits, then `data`, delivering up to the turn's budget
    /// of frames; what is left waits, with reading held (a pause of the
    /// framer's own, which the protocol's `resume_reading` does not lift),
    /// for a later turn (an empty `data_received`, asked for with
    /// `redeliver`).
    fn deliver<P: FrameProtocol>(
        &mut self,
        inner: &mut P,
        t: &Transport,
        data: &[u8],
        decode: impl FnOnce(&[u8], &mut dyn FnMut(&[u8]) -> bool) -> Result<usize, FrameError>,
    ) -> Result<(), FrameError> {
        let clear = !is_tls(t);
        if self.clear && !clear && self.rest.len() > self.at {
            // What waits came in the clear, and TLS began since (started
            // from a callback, or by the protocol between two turns).
            log::warn!(
                "deferloop: {} bytes received in the clear before a STARTTLS dropped",
                self.rest.len() - self.at
            );
            (self.rest, self.at) = (Vec::new(), 0);
            t.hold_reading(false);
        }
        self.clear = clear;
        let mut waiting = std::mem::take(&mut self.rest);
        let mut at = std::mem::take(&mut self.at);
        if !waiting.is_empty() && !data.is_empty() {
            waiting.drain(..at);
            at = 0;
            waiting.extend_from_slice(data);
        }
        if !waiting.is_empty() && t.reading_paused() {
            // The protocol paused: what waits goes on once it resumes.
            self.rest = waiting;
            self.at = at;
            return Ok(());
        }
        let input: &[u8] = if waiting.is_empty() {
            data
        } else {
            &waiting[at..]
        };
        let turn = t.event_loop().map(|lp| lp.turn_count());
        if turn != self.turn {
            (self.turn, self.spent) = (turn, 0);
        }
        let (clear, per_turn) = (self.clear, self.per_turn);
        if self.spent >= per_turn && !input.is_empty() {
            // This turn's frames were delivered (from what waited): the
            // new read waits for the next turn too.
            if waiting.is_empty() {
                self.rest = data.to_vec();
            } else {
                self.rest = waiting;
                self.at = at;
            }
            t.hold_reading(true);
            t.redeliver();
            return Ok(());
        }
        let mut stop = Stop::No;
        let mut delivered = self.spent;
        let r = decode(input, &mut |frame| {
            delivered += 1;
            inner.frame_received(t, frame);
            if t.is_closing() || (clear && is_tls(t)) {
                stop = Stop::Drop;
            } else if delivered >= per_turn {
                stop = Stop::Budget;
            } else if t.reading_paused() {
                stop = Stop::Paused;
            }
            stop == Stop::No
        });
        self.spent = delivered;
        let used = r.as_ref().map_or(input.len(), |&n| n);
        let left = input.len() - used;
        match stop {
            Stop::Budget | Stop::Paused if left > 0 => {
                // Kept as it is, read from an offset: no copy per turn.
                if waiting.is_empty() {
                    self.rest = data[used..].to_vec();
                } else {
                    self.rest = waiting;
                    self.at = at + used;
                }
                t.hold_reading(true);
                // Paused: `resume_reading` asks for the delivery.
                if stop == Stop::Budget {
                    t.redeliver();
                }
                return r.map(drop);
            }
            Stop::Drop if left > 0 && !t.is_closing() => {
                log::warn!(
                    "deferloop: {left} bytes received in the clear after a STARTTLS dropped"
                );
            }
            _ => {}
        }
        t.hold_reading(false);
        r.map(drop)
    }
}
