//! [`Limits`]: what bounds a connection, the connections of a listener, and
//! a UDP socket, as one value with documented defaults. Pure data: the
//! connection core, the listener and the UDP socket each read their part.
//! Tests: tests/net_limits.rs.

use std::time::Duration;

/// What bounds a connection, a listener's connections, or a UDP socket.
///
/// Start from [`Limits::DEFAULT`] (or `Limits::default()`) and change the
/// fields you want; then hand it to [`Transport::set_limits`] (one
/// connection), [`Listener::set_limits`] (the listener, and every connection
/// it accepts from then on) or [`DatagramTransport::set_limits`] (a UDP
/// socket). A field that does not apply to what it is given to is ignored
/// (a connection has no accept batch). Every default bounds a peer that
/// misbehaves; an idle timeout is the one limit off by default.
///
/// # Examples
/// ```
/// use deferloop::net::Limits;
/// use std::time::Duration;
///
/// let mut limits = Limits::DEFAULT;
/// limits.idle_timeout = Some(Duration::from_secs(30));
/// limits.write_buffer_cap = 1 << 20;
/// assert_eq!(limits.read_budget, 256 * 1024);
/// ```
///
/// [`Transport::set_limits`]: crate::net::Transport::set_limits
/// [`Listener::set_limits`]: crate::net::Listener::set_limits
/// [`DatagramTransport::set_limits`]: crate::net::DatagramTransport::set_limits
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Bytes read from one connection (or UDP socket) in one dispatch, at
    /// most; then the others get their turn. Default 256 KiB (asyncio reads
    /// 256 KiB per callback, once per turn); one read takes at most 256 KiB.
    ///
    /// A TLS connection also counts the records it reads: their bytes, and
    /// 2 KiB more for each record (a key update costs about as much to
    /// process as 3 KiB of data to decrypt), against the default budget.
    /// asyncio's and Twisted's budgets count plaintext only, so a peer that
    /// streams records carrying almost none holds their loop for as long as
    /// it keeps the socket full; here it gets about a millisecond per turn
    /// (tests/net_tls_fairness.rs).
    pub read_budget: usize,
    /// Above this many bytes buffered for writing, the protocol hears
    /// `pause_writing` and the connection is not read until the buffer
    /// drains (default 64 KiB).
    pub high_water: usize,
    /// At or below this many bytes buffered, a paused protocol hears
    /// `resume_writing` (default 16 KiB).
    pub low_water: usize,
    /// Past this many bytes buffered for writing the connection is aborted
    /// with [`WriteBufferFull`](crate::net::WriteBufferFull); a UDP socket
    /// refuses the datagram. Default 64 MiB.
    pub write_buffer_cap: usize,
    /// Output the peer takes none of for this long aborts the connection
    /// with a `TimedOut` error (nginx's `send_timeout`). Default 60 s.
    pub write_timeout: Option<Duration>,
    /// No data from the peer for this long aborts the connection (Twisted's
    /// `TimeoutMixin`). Default: none.
    pub idle_timeout: Option<Duration>,
    /// A graceful `close` may flush for this long before it aborts.
    /// Default 30 s.
    pub linger: Duration,
    /// A connect may take this long (Twisted's `connectTCP` uses 30 s too);
    /// see [`Connection::connect_timeout`](crate::net::Connection::connect_timeout).
    pub connect_timeout: Duration,
    /// Connections a listener accepts in one dispatch, at most, before it
    /// yields to the rest of the turn (asyncio: 100). Default 128.
    pub accept_batch: usize,
    /// When accepting fails for want of file descriptors or memory, the
    /// listener waits this long before it tries again (asyncio's 1 s).
    pub accept_retry_delay: Duration,
    /// The listen backlog: by default the system's maximum (`i32::MAX`, cut
    /// down by the kernel to `somaxconn`).
    pub backlog: i32,
    /// Datagrams a UDP socket receives in one dispatch, at most (also
    /// bounded by `read_budget` bytes). Default 64.
    pub datagrams_per_dispatch: usize,
}

impl Limits {
    /// The defaults, as documented on each field.
    pub const DEFAULT: Limits = Limits {
        read_budget: 256 * 1024,
        high_water: 64 * 1024,
        low_water: 16 * 1024,
        write_buffer_cap: 64 * 1024 * 1024,
        write_timeout: Some(Duration::from_secs(60)),
        idle_timeout: None,
        linger: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(30),
        accept_batch: 128,
        accept_retry_delay: Duration::from_secs(1),
        backlog: i32::MAX,
        datagrams_per_dispatch: 64,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
