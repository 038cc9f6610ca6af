//! Connecting to a host name: [`Loop::connect_tcp_to`] and
//! [`Loop::connect_udp_to`], with Happy Eyeballs (RFC 8305) over the
//! addresses a lookup returns. Owns `Race` and [`ConnectOptions`].
//! Tests: tests/net_resolve.rs.
//!
//! The connection exists from the start (its transport takes writes, its
//! Deferred can be cancelled) with a placeholder stream; the race runs
//! beside it as a source of its own, with every attempt's socket registered
//! under the race's token. The addresses are interleaved by family, the
//! first family first; an attempt starts, the next one 250 ms later or as
//! soon as the previous fails; the first to connect is moved into the
//! connection and the others are closed. If all fail, the error names the
//! host and every address tried, with its error.

use crate::deferred::LoopClosed;
use crate::net::core::conn::Conn;
use crate::net::core::io::{Tcp, Wire};
use crate::net::open::options::ConnectOptions;
use crate::net::open::resolve::Target;
use crate::net::{Connection, DatagramProtocol, DatagramTransport, Protocol, SockAddr, Transport};
use crate::reactor::{PostAction, Ready, Source, SourceKey};
use crate::{fail, Deferred, Error, Failure, Handle, Loop};
use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::panic::Location;
use std::rc::{Rc, Weak};
use std::time::Duration;

/// The connection's stream until an attempt wins: never connected.
struct Placeholder;

impl Wire for Placeholder {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn connect_result(&mut self) -> io::Result<bool> {
        Ok(false)
    }
    fn peer_addr(&self) -> io::Result<SockAddr> {
        Err(io::ErrorKind::NotConnected.into())
    }
    fn local_addr(&self) -> io::Result<SockAddr> {
        Err(io::ErrorKind::NotConnected.into())
    }
    fn register(&mut self, _: &mio::Registry, _: mio::Token) -> io::Result<()> {
        Ok(())
    }
    fn deregister(&mut self, _: &mio::Registry) {}
    fn name(&self) -> &'static str {
        "tcp (resolving)"
    }
}

struct Race {
    key: Cell<Option<SourceKey>>,
    conn: Weak<Conn>,
    target: String,
    addrs: RefCell<Vec<SocketAddr>>,
    next: Cell<usize>,
    attempts: RefCell<Vec<(SocketAddr, mio::net::TcpStream)>>,
    errors: RefCell<Vec<(SocketAddr, io::Error)>>,
    timer: RefCell<Option<Handle>>,
    delay: Option<Duration>,
    over: Cell<bool>,
    /// What the winning socket becomes first (TLS puts its layer on).
    wrap: RefCell<Option<Wrap>>,
}

/// Turns a won attempt's socket into the connection's stream: TLS puts its
/// layer on it (and arms its handshake deadline) here.
pub(crate) type Wrap = Box<dyn FnOnce(&Loop, &Rc<Conn>, Box<dyn Wire>) -> Box<dyn Wire>>;

impl Race {
    /// Whether the connection still waits for this race.
    fn wanted(&self) -> Option<Rc<Conn>> {
        let conn = self.conn.upgrade()?;
        conn.is_connecting().then_some(conn)
    }

    /// Starts the next attempt (if any), then arms the delay for the one after.
    fn start_next(self: &Rc<Self>, lp: &Loop) {
        if self.over.get() {
            return;
        }
        if self.wanted().is_none() {
            return self.end(lp);
        }
        if let Some(h) = self.timer.borrow_mut().take() {
            h.cancel();
        }
        let Some(key) = self.key.get() else { return };
        loop {
            let i = self.next.get();
            let Some(&addr) = self.addrs.borrow().get(i) else {
                break;
            };
            self.next.set(i + 1);
            let started = mio::net::TcpStream::connect(addr).and_then(|mut s| {
                lp.with_selector(|r| {
                    r.register(
                        &mut s,
                        key.token(),
                        mio::Interest::READABLE | mio::Interest::WRITABLE,
                    )
                })?;
                Ok(s)
            });
            match started {
                Ok(s) => {
                    self.attempts.borrow_mut().push((addr, s));
                    break;
                }
                Err(e) => self.errors.borrow_mut().push((addr, e)),
            }
        }
        let more = self.next.get() < self.addrs.borrow().len();
        if self.attempts.borrow().is_empty() {
            return self.fail_all(lp);
        }
        if let (true, Some(delay)) = (more, self.delay) {
            let weak = Rc::downgrade(self);
            let h = lp.call_later(delay, move |lp| {
                if let Some(race) = weak.upgrade() {
                    race.timer.borrow_mut().take();
                    race.start_next(lp);
                }
            });
            *self.timer.borrow_mut() = h.ok();
        }
    }

    /// Closes every attempt and leaves the registry.
    fn end(&self, lp: &Loop) {
        if self.over.replace(true) {
            return;
        }
        if let Some(h) = self.timer.borrow_mut().take() {
            h.cancel();
        }
        let attempts = std::mem::take(&mut *self.attempts.borrow_mut());
        for (_, mut s) in attempts {
            lp.with_selector(|r| {
                let _ = r.deregister(&mut s);
            });
        }
        if let Some(key) = self.key.take() {
            let garbage = lp.remove_source(key);
            drop(garbage);
        }
    }

    fn fail_all(&self, lp: &Loop) {
        let errors = std::mem::take(&mut *self.errors.borrow_mut());
        let tried: Vec<String> = errors.iter().map(|(a, e)| format!("{a} ({e})")).collect();
        let kind = errors
            .last()
            .map_or(io::ErrorKind::NotFound, |(_, e)| e.kind());
        let e = io::Error::new(
            kind,
            format!(
                "connect to {}: every address failed: {}",
                self.target,
                tried.join(", ")
            ),
        );
        self.end(lp);
        if let Some(conn) = self.conn.upgrade() {
            fail_conn(lp, &conn, Failure::new(e));
        }
    }

    /// `stream` connected to `addr`: it becomes the connection's stream.
    fn win(&self, lp: &Loop, addr: SocketAddr, mut stream: mio::net::TcpStream) {
        lp.with_selector(|r| {
            let _ = r.deregister(&mut stream);
        });
        self.end(lp);
        let Some(conn) = self.wanted() else { return };
        let mut io: Box<dyn Wire> = Box::new(Tcp(stream));
        if let Some(wrap) = self.wrap.borrow_mut().take() {
            io = wrap(lp, &conn, io);
        }
        if let Err(e) = conn.attach_wire(lp, io, addr.to_string()) {
            fail_conn(lp, &conn, Failure::new(e));
        }
    }
}

impl Source for Race {
    fn dispatch(self: Rc<Self>, lp: &Loop, _: SourceKey, _: Ready) -> PostAction {
        if self.wanted().is_none() {
            self.end(lp);
            return PostAction::Continue;
        }
        let mut failed = false;
        let mut i = 0;
        loop {
            let outcome = {
                let mut attempts = self.attempts.borrow_mut();
                let Some((_, s)) = attempts.get_mut(i) else {
                    break;
                };
                Wire::connect_result(s)
            };
            match outcome {
                Ok(false) => i += 1,
                Ok(true) => {
                    let (addr, s) = self.attempts.borrow_mut().remove(i);
                    self.win(lp, addr, s);
                    return PostAction::Continue;
                }
                Err(e) => {
                    let (addr, mut s) = self.attempts.borrow_mut().remove(i);
                    lp.with_selector(|r| {
                        let _ = r.deregister(&mut s);
                    });
                    self.errors.borrow_mut().push((addr, e));
                    failed = true;
                }
            }
        }
        if failed {
            // RFC 8305: a failed attempt starts the next one at once.
            self.start_next(lp);
        }
        PostAction::Continue
    }

    fn close(self: Rc<Self>, _: &Loop) {
        self.over.set(true);
        self.attempts.borrow_mut().clear();
    }

    fn name(&self) -> &'static str {
        "happy eyeballs"
    }

    fn interest(&self) -> (bool, bool) {
        (true, true)
    }
}

/// Fails a connection that is still connecting, uncalled protocol and all.
fn fail_conn(lp: &Loop, conn: &Conn, f: Failure) {
    if let Some((Some(r), _)) = conn.give_up(lp) {
        r.errback_if_pending(f);
    }
}

impl Loop {
    /// Connects to `target` — `"db.internal:5432"`, `("localhost", 80)` or a
    /// `SocketAddr` — with the default [`ConnectOptions`]: the name is looked
    /// up on the resolver pool (10 s at most), then the addresses are raced
    /// with Happy Eyeballs. Returns at once, as
    /// [`connect_tcp`](Self::connect_tcp) does; the Deferred fails with an
    /// `io::Error` naming the host and every address tried, or with a
    /// `TimedOut` one naming the host if it is not up within
    /// [`Limits::connect_timeout`](crate::net::Limits::connect_timeout) (30 s for the lookup and all attempts;
    /// [`ConnectOptions::connect_timeout`] or
    /// [`Connection::connect_timeout`] replaces it). A name that does not
    /// resolve fails it with the lookup's `io::Error`, naming the host.
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::{Protocol, Transport};
    /// use deferloop::EventLoop;
    ///
    /// struct Quiet;
    /// impl Protocol for Quiet {
    ///     fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let server = ev.listen_tcp("127.0.0.1:0".parse()?, || Quiet)?;
    /// let port = server.local_addr().as_inet().unwrap().port();
    /// let t = ev.run_until(ev.connect_tcp_to(("localhost", port), Quiet).connected())?;
    /// assert!(t.peer_addr()?.as_inet().unwrap().ip().is_loopback());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tcp_to<P: Protocol>(
        &self,
        target: impl Into<Target>,
        protocol: P,
    ) -> Connection<P> {
        self.connect_tcp_with(target, protocol, &ConnectOptions::default())
    }

    /// [`connect_tcp_to`](Self::connect_tcp_to) with your own
    /// [`ConnectOptions`]: resolver, lookup and connect timeouts, attempt
    /// delay, and which addresses to try
    /// ([`AddressPreference`](crate::net::AddressPreference)).
    ///
    /// # Examples
    /// Only IPv4, and at most two seconds for the whole connect:
    /// ```
    /// use deferloop::net::{AddressPreference, ConnectOptions, Protocol, Transport};
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// struct Quiet;
    /// impl Protocol for Quiet {
    ///     fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let server = ev.listen_tcp("127.0.0.1:0".parse()?, || Quiet)?;
    /// let port = server.local_addr().as_inet().unwrap().port();
    /// let opts = ConnectOptions::default()
    ///     .with_preference(AddressPreference::Ipv4Only)
    ///     .with_connect_timeout(Duration::from_secs(2));
    /// let c = ev.connect_tcp_with(format!("localhost:{port}"), Quiet, &opts);
    /// let t = ev.run_until(c.connected())?;
    /// assert!(t.peer_addr()?.as_inet().unwrap().is_ipv4());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tcp_with<P: Protocol>(
        &self,
        target: impl Into<Target>,
        protocol: P,
        options: &ConnectOptions,
    ) -> Connection<P> {
        self.connect_tcp_from(target.into(), protocol, options, Location::caller())
    }

    /// [`connect_tcp_with`](Loop::connect_tcp_with), registered as made at
    /// `at` (see `connect_tcp_at`).
    pub(crate) fn connect_tcp_from<P: Protocol>(
        &self,
        target: Target,
        protocol: P,
        options: &ConnectOptions,
        at: &'static Location<'static>,
    ) -> Connection<P> {
        #[cfg(feature = "sim")]
        let target = crate::sim::wire::resolve(self, target);
        if let Some(addr) = target.as_addr() {
            return self
                .connect_tcp_at(addr, protocol, at)
                .connect_timeout(Some(options.connect_timeout));
        }
        self.connect_named(target, protocol, options, None, at)
    }

    /// Looks `target` up and races its addresses; `wrap` makes the winning
    /// socket the connection's stream.
    pub(crate) fn connect_named<P: Protocol>(
        &self,
        target: Target,
        protocol: P,
        options: &ConnectOptions,
        wrap: Option<Wrap>,
        at: &'static Location<'static>,
    ) -> Connection<P> {
        let failed = |f: Failure| Connection::new(Transport::dangling(), fail(f));
        let (host, port) = match target.parts() {
            Ok(p) => p,
            Err(e) => return failed(Failure::new(e)),
        };
        let shown = target.to_string();
        let conn = match Conn::open(
            self,
            Box::new(Placeholder),
            Box::new(protocol),
            Some(shown.clone()),
            at,
        ) {
            Ok(c) => c,
            Err(Error::Closed) => return failed(Failure::new(LoopClosed)),
            Err(e) => return failed(Failure::new(e)),
        };
        let lookup = options
            .resolver
            .lookup(self, &host, port, options.lookup_timeout);
        let lookup_handle = lookup.cancel_handle();
        // However the connect is abandoned (cancelled, timed out, failed),
        // `discard` runs this: the race's attempts close with it.
        let race_slot: Rc<RefCell<Option<Rc<Race>>>> = Rc::default();
        let (race_for_end, lp_for_end) = (race_slot.clone(), self.downgrade());
        conn.set_on_lost(Box::new(move || {
            let race = race_for_end.borrow_mut().take();
            if let (Some(race), Some(lp)) = (race, lp_for_end.upgrade()) {
                race.end(&lp);
            }
        }));
        let weak = Rc::downgrade(&conn);
        let (d, r) = Deferred::with_canceller(move |_| {
            lookup_handle.cancel();
            if let Some(conn) = weak.upgrade() {
                if let Some(lp) = conn.event_loop() {
                    let garbage = conn.discard(&lp);
                    drop(garbage);
                }
            }
        });
        conn.set_resolver(r);
        // One deadline for the lookup and every attempt, as for `connect_tcp`.
        conn.set_connect_timeout(self, Some(options.connect_timeout));
        let weak = Rc::downgrade(&conn);
        let delay = options.attempt_delay;
        let preference = options.preference;
        let _ = lookup.add_both(move |result| {
            let Some(conn) = weak.upgrade() else {
                return Ok(());
            };
            let Some(lp) = conn.event_loop() else {
                return Ok(());
            };
            if !conn.is_connecting() {
                return Ok(());
            }
            let addrs = match result.and_then(|a| Ok(preference.order(&shown, a)?)) {
                Ok(a) => a,
                Err(f) => {
                    fail_conn(&lp, &conn, f);
                    return Ok(());
                }
            };
            let race = Rc::new(Race {
                key: Cell::new(None),
                conn: Rc::downgrade(&conn),
                target: shown,
                addrs: RefCell::new(addrs),
                next: Cell::new(0),
                attempts: RefCell::new(Vec::new()),
                errors: RefCell::new(Vec::new()),
                timer: RefCell::new(None),
                delay,
                over: Cell::new(false),
                wrap: RefCell::new(wrap),
            });
            let r2 = race.clone();
            match lp.insert_source(at, move |_, _| Ok(r2 as Rc<dyn Source>)) {
                Ok(key) => race.key.set(Some(key)),
                Err(e) => {
                    fail_conn(&lp, &conn, Failure::new(e));
                    return Ok(());
                }
            }
            *race_slot.borrow_mut() = Some(race.clone());
            race.start_next(&lp);
            Ok::<(), Failure>(())
        });
        Connection::new(conn.transport(), d)
    }

    /// Opens a UDP socket connected to `target` (`"host:port"`, a pair or a
    /// `SocketAddr`): the name is looked up on the resolver pool and the
    /// first address used. The Deferred fails with an `io::Error` naming
    /// the host if the lookup fails or times out (10 s).
    pub fn connect_udp_to<P: DatagramProtocol>(
        &self,
        target: impl Into<Target>,
        protocol: P,
    ) -> Deferred<DatagramTransport> {
        self.connect_udp_with(target, protocol, &ConnectOptions::default())
    }

    /// [`connect_udp_to`](Self::connect_udp_to) with your own
    /// [`ConnectOptions`]: its resolver, lookup timeout and address
    /// preference pick the address (the first one the preference orders).
    ///
    /// # Examples
    /// ```
    /// use deferloop::net::{AddressPreference, ConnectOptions, DatagramProtocol, DatagramTransport};
    /// use deferloop::EventLoop;
    /// use std::net::SocketAddr;
    ///
    /// struct Quiet;
    /// impl DatagramProtocol for Quiet {
    ///     fn datagram_received(&mut self, _: &DatagramTransport, _: &[u8], _: SocketAddr) {}
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let opts = ConnectOptions::default().with_preference(AddressPreference::Ipv4Only);
    /// let t = ev.run_until(ev.connect_udp_with("localhost:9", Quiet, &opts))?;
    /// assert!(t.peer_addr().unwrap().is_ipv4());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect_udp_with<P: DatagramProtocol>(
        &self,
        target: impl Into<Target>,
        protocol: P,
        options: &ConnectOptions,
    ) -> Deferred<DatagramTransport> {
        let target = target.into();
        let (host, port) = match target.parts() {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let lookup = options
            .resolver
            .lookup(self, &host, port, options.lookup_timeout);
        let (weak, preference) = (self.downgrade(), options.preference);
        lookup.add_callback(move |addrs: Vec<SocketAddr>| {
            let lp = weak.upgrade().ok_or_else(|| Failure::new(LoopClosed))?;
            let addr = preference.order(&target.to_string(), addrs)?[0];
            lp.connect_udp(addr, protocol).map_err(|e| {
                Failure::new(io::Error::other(format!(
                    "connect to {target} ({addr}): {e}"
                )))
            })
        })
    }
}
