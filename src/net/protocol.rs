// What the user writes: `Protocol` (streams), `DatagramProtocol` (UDP) and
// `Producer` (bytes written into a `Stream` under its flow control).
//
// A protocol is the user's object; the loop owns it for the life of the
// connection and calls its methods with the transport, so a protocol never has
// to store its own transport (asyncio's `self.transport = transport`) to reply.

use super::{DatagramTransport, Transport};
use crate::Failure;
use std::any::Any;
use std::io;
use std::net::SocketAddr;

/// The methods a stream's protocol shares with a framed one
/// ([`FrameProtocol`](crate::net::framing::FrameProtocol)), with their
/// defaults: written once, in both traits.
macro_rules! stream_events {
    () => {
        /// The connection is up; `transport` can be stored (it is a cheap handle).
        fn connection_made(&mut self, transport: &crate::net::Transport) {
            let _ = transport;
        }

        /// The peer closed its side. Return `true` to keep the connection half-open
        /// (you can still write; call `close` when done); `false` (the default)
        /// closes it, after flushing what is buffered.
        fn eof_received(&mut self, transport: &crate::net::Transport) -> bool {
            let _ = transport;
            false
        }

        /// The connection is gone: `None` after a clean close (by either side, or
        /// [`Transport::abort`](crate::net::Transport::abort)), the failure
        /// otherwise (a reset, a write error, a panic in this protocol,
        /// [`Transport::abort_with`](crate::net::Transport::abort_with)'s reason).
        fn connection_lost(
            &mut self,
            transport: &crate::net::Transport,
            reason: Option<crate::Failure>,
        ) {
            let _ = (transport, reason);
        }

        /// The write buffer went above its high-water mark: stop producing.
        fn pause_writing(&mut self, transport: &crate::net::Transport) {
            let _ = transport;
        }

        /// The write buffer drained to its low-water mark: produce again.
        fn resume_writing(&mut self, transport: &crate::net::Transport) {
            let _ = transport;
        }
    };
}
pub(crate) use stream_events;

/// The user's side of a stream connection (TCP or Unix): Twisted's and
/// asyncio's `Protocol`.
///
/// # Call order
/// `connection_made` first, then any number of `data_received`, at most one
/// `eof_received`, any number of paired `pause_writing`/`resume_writing`, and
/// `connection_lost` last, **exactly once** — also when the loop is closed with
/// the connection open (then with a [`LoopClosed`](crate::deferred::LoopClosed)
/// failure). A connection whose connect failed never calls any of them.
///
/// # Guarantees
/// - Methods are called only by the loop, never from inside a [`Transport`]
///   method: a `write` that crosses the high-water mark, or a `close`, changes
///   the transport's state at once, and the protocol hears about it
///   (`pause_writing`, `connection_lost`) right after the method that caused it
///   returns, if that was one of its own, or else in a later turn. So a
///   protocol that shares state with others (a chat room in an `Rc<RefCell<_>>`)
///   is never re-entered while it holds a borrow.
/// - A panic in a method is caught: the connection is aborted with the panic as
///   the reason given to `connection_lost`, the loop's exception handler is told,
///   and every other connection goes on.
///
/// # Backpressure
/// A protocol that writes more than its peer reads should stop at
/// `pause_writing` and go on at `resume_writing`. The defaults do nothing:
/// a protocol that ignores them grows the write buffer until its hard cap
/// ([`Transport::set_write_buffer_cap`]) aborts the connection. Reading stops
/// while writing is paused (see [`Transport::set_read_while_write_paused`]),
/// so a peer that sends requests without reading the replies is held back too.
///
/// # Examples
/// A protocol that sends a large payload on request, honouring backpressure;
/// the other side is an in-memory peer ([`memory`](super::memory)) that asks,
/// takes nothing for a while, then takes everything:
/// ```
/// use deferloop::net::{memory, Protocol, Transport};
/// use deferloop::EventLoop;
///
/// struct Sender {
///     left: usize,
///     paused: bool,
///     pauses: u32,
/// }
///
/// impl Sender {
///     fn produce(&mut self, t: &Transport) {
///         while self.left > 0 && !self.paused {
///             let n = self.left.min(16 * 1024);
///             t.write(&vec![b'x'; n]);
///             self.left -= n;
///             // `write` never calls back into the protocol: ask the transport.
///             self.paused = t.is_writing_paused();
///         }
///     }
/// }
///
/// impl Protocol for Sender {
///     fn data_received(&mut self, t: &Transport, _request: &[u8]) {
///         self.produce(t);
///     }
///     fn pause_writing(&mut self, _t: &Transport) {
///         self.paused = true;
///         self.pauses += 1;
///     }
///     fn resume_writing(&mut self, t: &Transport) {
///         self.paused = false;
///         self.produce(t);
///     }
/// }
///
/// let ev = EventLoop::new()?;
/// let sender = Sender { left: 1 << 20, paused: false, pauses: 0 };
/// let (t, peer) = memory::open(&ev, sender)?;
/// peer.set_room(Some(0)); // the "socket" takes nothing for now
/// peer.send(b"GET");
/// ev.run_once()?;
/// assert!(t.is_writing_paused());
/// assert!(t.write_buffer_size() < 128 * 1024); // not the whole megabyte
///
/// peer.set_room(None); // the peer reads again
/// let mut got = 0;
/// while got < 1 << 20 {
///     ev.run_once()?;
///     got += peer.take_written().len();
/// }
/// assert_eq!(got, 1 << 20);
/// assert!(t.protocol::<Sender>().with(|s| s.pauses).unwrap() >= 1);
/// # Ok::<(), deferloop::Error>(())
/// ```
pub trait Protocol: Any {
    /// Bytes arrived. `data` borrows the loop's read buffer: copy what you keep.
    fn data_received(&mut self, transport: &Transport, data: &[u8]);

    /// Whether this protocol lends a buffer of its own for reads (asyncio's
    /// `BufferedProtocol`): asked once, when the connection is made with it.
    /// `false` (the default): [`get_buffer`](Self::get_buffer) is never
    /// asked and every read goes to [`data_received`](Self::data_received),
    /// so a protocol that does not lend pays nothing for the choice.
    fn lends_buffers(&self) -> bool {
        false
    }

    /// Where the next read's bytes go, for a protocol that keeps them in a
    /// buffer of its own (asyncio's `BufferedProtocol.get_buffer`), asked
    /// before each read when [`lends_buffers`](Self::lends_buffers) said so: return
    /// your `Vec` and the read appends to it, straight from the socket, with
    /// no copy through the loop's read buffer; [`buffer_updated`](Self::buffer_updated)
    /// hands it back. `None` (the default): the bytes come to
    /// [`data_received`](Self::data_received).
    ///
    /// The read takes at most `size_hint` bytes (the connection's read
    /// budget and write-side backpressure decide it, as for any read) and
    /// no more than the `Vec`'s spare capacity: reserve what you want read
    /// (with none spare, `size_hint` is reserved for you). Unlike asyncio's
    /// buffer, the `Vec` stays yours: hand it on whole, no copy. Over TLS
    /// (the plaintext comes out of the TLS layer) and in memory, the bytes
    /// are copied into it.
    fn get_buffer(&mut self, transport: &Transport, size_hint: usize) -> Option<Vec<u8>> {
        let _ = (transport, size_hint);
        None
    }

    /// The `Vec` [`get_buffer`](Self::get_buffer) lent, back with `n` bytes
    /// appended (asyncio's `buffer_updated`). Called once for each `Vec`
    /// lent, before any other call; `n` is 0 when the read brought nothing
    /// (an end of file, which [`eof_received`](Self::eof_received) reports
    /// next, or an error). The default passes the new bytes to
    /// [`data_received`](Self::data_received).
    fn buffer_updated(&mut self, transport: &Transport, buffer: Vec<u8>, n: usize) {
        if n > 0 {
            self.data_received(transport, &buffer[buffer.len() - n..]);
        }
    }

    stream_events!();
}

/// The user's side of a UDP socket: asyncio's `DatagramProtocol`.
///
/// The same guarantees as [`Protocol`]: the loop owns it, calls it with the
/// transport, never from inside a transport method, and contains its panics
/// (the socket is then closed with the panic as `connection_lost`'s reason).
pub trait DatagramProtocol: Any {
    /// The socket is ready.
    fn connection_made(&mut self, transport: &DatagramTransport) {
        let _ = transport;
    }

    /// A datagram arrived from `from`. `data` borrows the loop's read buffer.
    fn datagram_received(&mut self, transport: &DatagramTransport, data: &[u8], from: SocketAddr);

    /// A send or receive failed without closing the socket (for example
    /// `ConnectionRefused` on a connected socket after an ICMP port-unreachable).
    fn error_received(&mut self, transport: &DatagramTransport, error: io::Error) {
        let _ = (transport, error);
    }

    /// The socket is closed: `None` after `close`/`abort`, the failure otherwise.
    fn connection_lost(&mut self, transport: &DatagramTransport, reason: Option<Failure>) {
        let _ = (transport, reason);
    }

    /// The send queue went above its high-water mark.
    fn pause_writing(&mut self, transport: &DatagramTransport) {
        let _ = transport;
    }

    /// The send queue drained to its low-water mark.
    fn resume_writing(&mut self, transport: &DatagramTransport) {
        let _ = transport;
    }
}

/// A source of bytes written into a [`Stream`](crate::net::Stream) (Twisted's `IPushProducer`):
/// once registered with [`Stream::register_producer`](crate::net::Stream::register_producer), the stream pauses it
/// while its write buffer is above the high-water mark, resumes it once the
/// buffer has drained, and stops it when the connection goes. The producer
/// writes whenever it likes in between.
///
/// # Examples
/// A producer that counts its pauses:
/// ```
/// use deferloop::net::{Producer, Stream};
/// use deferloop::{EventLoop, Failure};
///
/// struct Counting(u32);
/// impl Producer for Counting {
///     fn pause_producing(&mut self) {
///         self.0 += 1;
///     }
///     fn resume_producing(&mut self) {}
///     fn stop_producing(&mut self, _reason: Option<Failure>) {}
/// }
///
/// let ev = EventLoop::new()?;
/// let (stream, _peer) = Stream::open_memory(&ev)?;
/// stream.register_producer(Counting(0));
/// # Ok::<(), deferloop::Error>(())
/// ```
pub trait Producer: 'static {
    /// The consumer's buffer is full: stop writing until resumed.
    fn pause_producing(&mut self);
    /// The consumer's buffer has drained: write again.
    fn resume_producing(&mut self);
    /// The consumer is gone (`None` after a clean close, else the reason):
    /// nothing more will be taken. The producer is dropped after this.
    fn stop_producing(&mut self, reason: Option<Failure>);
}
