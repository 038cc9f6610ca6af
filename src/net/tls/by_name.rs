//! Connecting over TLS by host name: `Loop::connect_tls_to` and
//! `connect_tls_with`, `Stream::connect_tls` and `connect_tls_with`. The
//! name is looked up and its addresses raced as for `connect_tcp_to`
//! (`net/open/eyeballs.rs`); the winning socket gets the TLS layer, whose
//! SNI and certificate check use the same name. Tests:
//! tests/net_tls_by_name.rs.

use super::config::ClientConfig;
use super::io::{DeadlineSlot, TlsIo};
use super::start::{arm_deadline, client_session, invalid};
use crate::net::core::io::Wire;
use crate::net::open::eyeballs::Wrap;
use crate::net::{ConnectOptions, Connection, Protocol, Stream, Target, Transport};
use crate::{fail, Failure, Loop};
use std::panic::Location;

impl Loop {
    /// Connects over TLS to `target` — `"example.com:443"`, `(host, port)`
    /// or a `SocketAddr` — with the default [`ConnectOptions`]: the name is
    /// looked up, its addresses raced (Happy Eyeballs), and the same name
    /// sent as SNI and checked against the server's certificate. The
    /// Deferred fires once the handshake is done and `connection_made` has
    /// run; it fails with an `io::Error` naming the host when the name does
    /// not resolve or every address fails, with the handshake's error (a
    /// bad certificate, a wrong name), or `TimedOut`. For an IP address the
    /// certificate must be valid for that address.
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// use deferloop::net::{Protocol, Transport};
    /// use deferloop::EventLoop;
    ///
    /// struct Get;
    /// impl Protocol for Get {
    ///     fn connection_made(&mut self, t: &Transport) {
    ///         t.write(b"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n");
    ///     }
    ///     fn data_received(&mut self, _: &Transport, data: &[u8]) {
    ///         print!("{}", String::from_utf8_lossy(data));
    ///     }
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let config = ClientConfig::new().with_system_roots()?;
    /// ev.run_until(ev.connect_tls_to("example.com:443", &config, Get).connected())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tls_to<P: Protocol>(
        &self,
        target: impl Into<Target>,
        config: &ClientConfig,
        protocol: P,
    ) -> Connection<P> {
        self.connect_tls_with(target, config, protocol, &ConnectOptions::default())
    }

    /// [`connect_tls_to`](Self::connect_tls_to) with your own
    /// [`ConnectOptions`] (resolver, timeouts, address preference). The
    /// handshake deadline is the config's, from when an address has
    /// connected; the options' connect timeout bounds the whole.
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// use deferloop::net::{AddressPreference, ConnectOptions, Stream};
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// struct Quiet;
    /// impl deferloop::net::Protocol for Quiet {
    ///     fn data_received(&mut self, _: &deferloop::net::Transport, _: &[u8]) {}
    /// }
    ///
    /// let ev = EventLoop::new()?;
    /// let config = ClientConfig::new().add_roots_from_pem_file("ca.pem")?;
    /// let opts = ConnectOptions::default()
    ///     .with_connect_timeout(Duration::from_secs(5))
    ///     .with_preference(AddressPreference::Ipv6First);
    /// let c = ev.connect_tls_with("db.internal:5433", &config, Quiet, &opts);
    /// ev.run_until(c.connected())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tls_with<P: Protocol>(
        &self,
        target: impl Into<Target>,
        config: &ClientConfig,
        protocol: P,
        options: &ConnectOptions,
    ) -> Connection<P> {
        self.connect_tls_from(target.into(), config, protocol, options, Location::caller())
    }

    /// [`connect_tls_with`](Loop::connect_tls_with), registered as made at
    /// `at` (see `connect_tcp_at`).
    pub(crate) fn connect_tls_from<P: Protocol>(
        &self,
        target: Target,
        config: &ClientConfig,
        protocol: P,
        options: &ConnectOptions,
        at: &'static Location<'static>,
    ) -> Connection<P> {
        let failed = |f: Failure| Connection::new(Transport::dangling(), fail(f));
        let host = match target.parts() {
            Ok((host, _)) => host,
            Err(e) => return failed(Failure::new(e)),
        };
        if let Some(addr) = target.as_addr() {
            return self
                .connect_tls_at(addr, &host, config, protocol, at)
                .connect_timeout(Some(options.connect_timeout));
        }
        let session = match client_session(config, &host) {
            Ok(s) => s,
            Err(e) => return failed(Failure::new(invalid(e))),
        };
        let timeout = config.handshake_timeout();
        let wrap: Wrap = Box::new(move |lp, conn, inner| {
            let slot = DeadlineSlot::default();
            // The socket has connected: the handshake starts now.
            let io = TlsIo::new(inner, session, true, Vec::new(), Vec::new(), slot.clone());
            slot.set(arm_deadline(conn, lp, timeout));
            Box::new(io) as Box<dyn Wire>
        });
        self.connect_named(target, protocol, options, Some(wrap), at)
    }
}

impl Stream {
    /// [`Stream::connect`] over TLS: `target` is looked up, its addresses
    /// raced, and its name sent as SNI and verified, as
    /// [`Loop::connect_tls_to`] does. Reads wait for the handshake; a
    /// failed connect or handshake fails every read with its error.
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// use deferloop::net::Stream;
    /// use deferloop::EventLoop;
    ///
    /// let ev = EventLoop::new()?;
    /// let config = ClientConfig::new().with_system_roots()?;
    /// let s = Stream::connect_tls(&ev, "example.com:443", &config);
    /// s.write(b"HEAD / HTTP/1.0\r\nHost: example.com\r\n\r\n");
    /// println!("{}", ev.run_until(s.read_line())?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tls(lp: &Loop, target: impl Into<Target>, config: &ClientConfig) -> Stream {
        Stream::connect_tls_with(lp, target, config, &ConnectOptions::default())
    }

    /// [`connect_tls`](Self::connect_tls) with your own [`ConnectOptions`].
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// use deferloop::net::{ConnectOptions, Stream};
    /// use deferloop::EventLoop;
    /// use std::time::Duration;
    ///
    /// let ev = EventLoop::new()?;
    /// let config = ClientConfig::new().with_system_roots()?;
    /// let opts = ConnectOptions::default().with_connect_timeout(Duration::from_secs(3));
    /// let s = Stream::connect_tls_with(&ev, "example.com:443", &config, &opts);
    /// ev.run_until(s.connected())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn connect_tls_with(
        lp: &Loop,
        target: impl Into<Target>,
        config: &ClientConfig,
        options: &ConnectOptions,
    ) -> Stream {
        let (target, at) = (target.into(), Location::caller());
        Stream::over(lp, |proto| {
            lp.connect_tls_from(target, config, proto, options, at)
        })
    }
}
