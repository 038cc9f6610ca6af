//! How a connect by name looks the name up and which addresses it tries:
//! [`ConnectOptions`] and [`AddressPreference`], one value shared by
//! `connect_tcp_with`, `connect_udp_with`, `Stream::connect_with` and the
//! TLS connects by name. The ordering of the addresses for Happy Eyeballs
//! is here too. Tests: tests/net_resolve.rs, tests/net_connect_by_name.rs.

use crate::net::open::resolve::{HostResolver, DEFAULT_LOOKUP_TIMEOUT};
use crate::net::Limits;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// RFC 8305's "Connection Attempt Delay", as asyncio and Twisted use it.
pub const HAPPY_EYEBALLS_DELAY: Duration = Duration::from_millis(250);

/// How a connect by name finds and connects to a host:
/// [`Loop::connect_tcp_with`](crate::Loop::connect_tcp_with),
/// [`Loop::connect_udp_with`](crate::Loop::connect_udp_with),
/// [`Stream::connect_with`](crate::net::Stream::connect_with), and over TLS
/// `Loop::connect_tls_with` and `Stream::connect_tls_with` (feature `tls`).
///
/// Built from [`Default`] and the `with_*` setters, so that a field added
/// later breaks no caller:
/// ```
/// use deferloop::net::{AddressPreference, ConnectOptions};
/// use std::time::Duration;
///
/// let opts = ConnectOptions::default()
///     .with_lookup_timeout(Duration::from_secs(2))
///     .with_connect_timeout(Duration::from_secs(5))
///     .with_preference(AddressPreference::Ipv4Only);
/// assert_eq!(opts.lookup_timeout, Duration::from_secs(2));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Who looks the name up (default: [`HostResolver::system`]).
    pub resolver: HostResolver,
    /// Limit on the lookup (default 10 s).
    pub lookup_timeout: Duration,
    /// Limit on the whole connect — lookup, every attempt, and a TLS
    /// handshake's start — after which it fails with a `TimedOut` error
    /// (default [`Limits::connect_timeout`], 30 s). Not used by UDP, which
    /// has nothing to wait for after the lookup.
    pub connect_timeout: Duration,
    /// The delay before the next address is tried while the last attempt
    /// is still pending (default 250 ms); `None` tries one address at a
    /// time, each until it fails.
    pub attempt_delay: Option<Duration>,
    /// Which of the looked-up addresses to try, in what order (default
    /// [`AddressPreference::System`]).
    pub preference: AddressPreference,
}

/// Which addresses of a looked-up name a connect tries, first to last. An
/// address given as such (`"127.0.0.1:80"`, a `SocketAddr`) is used as it
/// is, whatever the preference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressPreference {
    /// The system's order (RFC 6724, as `getaddrinfo` returns it), the
    /// families alternating from the first address's (RFC 8305).
    #[default]
    System,
    /// IPv4 addresses first, then alternating.
    Ipv4First,
    /// IPv6 addresses first, then alternating.
    Ipv6First,
    /// Only IPv4 addresses; a name with none fails the connect.
    Ipv4Only,
    /// Only IPv6 addresses; a name with none fails the connect.
    Ipv6Only,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            resolver: HostResolver::system(),
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
            connect_timeout: Limits::DEFAULT.connect_timeout,
            attempt_delay: Some(HAPPY_EYEBALLS_DELAY),
            preference: AddressPreference::System,
        }
    }
}

impl ConnectOptions {
    /// Looks names up with `resolver`.
    pub fn with_resolver(mut self, resolver: HostResolver) -> Self {
        self.resolver = resolver;
        self
    }

    /// Gives up on the lookup after `timeout`.
    pub fn with_lookup_timeout(mut self, timeout: Duration) -> Self {
        self.lookup_timeout = timeout;
        self
    }

    /// Gives up on the whole connect after `timeout`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Starts the next address after `delay` while the last attempt is
    /// pending; `None` tries one address at a time.
    pub fn with_attempt_delay(mut self, delay: Option<Duration>) -> Self {
        self.attempt_delay = delay;
        self
    }

    /// Tries the addresses `preference` picks, in its order.
    pub fn with_preference(mut self, preference: AddressPreference) -> Self {
        self.preference = preference;
        self
    }
}

impl AddressPreference {
    /// The addresses to try, in order: filtered and ordered as the
    /// preference says, then interleaved by family.
    ///
    /// # Errors
    /// An `io::Error` (`NotFound`) naming `target` when the preference
    /// leaves no address.
    pub(crate) fn order(self, target: &str, addrs: Vec<SocketAddr>) -> io::Result<Vec<SocketAddr>> {
        let found = addrs.len();
        let (keep_v4, keep_v6, v6_first) = match self {
            AddressPreference::System => (true, true, None),
            AddressPreference::Ipv4First => (true, true, Some(false)),
            AddressPreference::Ipv6First => (true, true, Some(true)),
            AddressPreference::Ipv4Only => (true, false, None),
            AddressPreference::Ipv6Only => (false, true, None),
        };
        let mut kept: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| if a.is_ipv6() { keep_v6 } else { keep_v4 })
            .collect();
        if kept.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "connect to {target}: none of its {found} addresses is allowed by {self:?}"
                ),
            ));
        }
        if let Some(v6) = v6_first {
            // A stable sort: the preferred family first, each in the system's order.
            kept.sort_by_key(|a| a.is_ipv6() != v6);
        }
        Ok(interleave(kept))
    }
}

/// Orders addresses for Happy Eyeballs: families alternate, starting with
/// the family of the first address.
pub(crate) fn interleave(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let Some(first) = addrs.first() else {
        return addrs;
    };
    let first_v6 = first.is_ipv6();
    let (mut a, mut b): (Vec<_>, Vec<_>) = addrs.into_iter().partition(|x| x.is_ipv6() == first_v6);
    a.reverse();
    b.reverse();
    let mut out = Vec::with_capacity(a.len() + b.len());
    while !a.is_empty() || !b.is_empty() {
        out.extend(a.pop());
        out.extend(b.pop());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn each_preference_orders_or_filters_the_addresses() {
        let found = addrs(&["[::1]:1", "[::2]:1", "10.0.0.1:1", "10.0.0.2:1"]);
        let order = |p: AddressPreference| p.order("h:1", found.clone()).unwrap();
        assert_eq!(
            order(AddressPreference::System),
            addrs(&["[::1]:1", "10.0.0.1:1", "[::2]:1", "10.0.0.2:1"])
        );
        assert_eq!(
            order(AddressPreference::Ipv4First),
            addrs(&["10.0.0.1:1", "[::1]:1", "10.0.0.2:1", "[::2]:1"])
        );
        assert_eq!(
            order(AddressPreference::Ipv6First),
            order(AddressPreference::System)
        );
        assert_eq!(
            order(AddressPreference::Ipv4Only),
            addrs(&["10.0.0.1:1", "10.0.0.2:1"])
        );
        assert_eq!(
            order(AddressPreference::Ipv6Only),
            addrs(&["[::1]:1", "[::2]:1"])
        );
    }

    #[test]
    fn a_preference_that_leaves_nothing_is_an_error_naming_the_host() {
        let e = AddressPreference::Ipv6Only
            .order("db.test:5432", addrs(&["10.0.0.1:5432"]))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("db.test:5432"), "{e}");
    }
}
