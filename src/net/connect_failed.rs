//! The error a failed connect carries: where to, and the cause kept as a
//! value, so a TLS error inside it can be downcast on its way to `main`.
//! Owns [`ConnectFailed`]. Tests: tests/net_tls_accept_close.rs.

use std::error::Error as StdError;
use std::fmt;
use std::io;

/// Why a connect to an address failed: the payload of the `io::Error` (of
/// the cause's kind) a failed connect's Deferred fails with.
///
/// Its text is "connect to ADDR"; the cause is its
/// [`source`](StdError::source) — the cause's own payload when it has one (a
/// `TlsError`, say), else the OS error — so a
/// chain walk (`anyhow`'s `{:#}`, [`Failure`](crate::Failure)'s text) names
/// the address once and the reason once, and finds the cause by type.
#[derive(Debug)]
pub struct ConnectFailed {
    to: String,
    cause: io::Error,
}

impl ConnectFailed {
    /// An `io::Error` of `cause`'s kind, carrying where the connect went.
    pub(crate) fn wrap(to: impl fmt::Display, cause: io::Error) -> io::Error {
        let kind = cause.kind();
        io::Error::new(
            kind,
            ConnectFailed {
                to: to.to_string(),
                cause,
            },
        )
    }

    /// The address the connect went to, as text.
    pub fn to(&self) -> &str {
        &self.to
    }

    /// The error the connect failed with.
    pub fn cause(&self) -> &io::Error {
        &self.cause
    }
}

impl fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connect to {}", self.to)
    }
}

impl StdError for ConnectFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        // `io::Error::source` skips its own payload: hand that out first.
        match self.cause.get_ref() {
            Some(inner) => Some(inner),
            None => Some(&self.cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_the_address_once_and_the_cause_once() {
        let e = ConnectFailed::wrap("127.0.0.1:1", io::ErrorKind::ConnectionRefused.into());
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        let f = crate::Failure::new(e);
        let text = f.to_string();
        assert_eq!(text.matches("connect to 127.0.0.1:1").count(), 1, "{text}");
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        let inner = io::Error::new(io::ErrorKind::InvalidData, fmt::Error);
        let e = ConnectFailed::wrap("x", inner);
        let payload = e.get_ref().unwrap().source().unwrap();
        assert!(payload.downcast_ref::<fmt::Error>().is_some());
    }
}
