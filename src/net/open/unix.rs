//! Unix stream sockets: the `Loop` methods that listen and connect on a path.
//! Tests: tests/net_unix.rs.

use crate::net::core::conn::connect;
use crate::net::core::connection::{Connection, ProtocolFactory};
use crate::net::core::io::Wire;
use crate::net::open::listener::{self, ListenSock, Listener, UnlinkOnDrop};
use crate::net::{Protocol, SockAddr};
use crate::{Error, Loop};
use std::panic::Location;
use std::path::Path;

impl Loop {
    /// Listens on the Unix socket `path`, which must not exist; it is removed
    /// again when the listener stops or the loop closes — if the file there
    /// is still the one this call created: a socket another listener has
    /// bound at the path since (after this one's file was removed) is left
    /// alone.
    ///
    /// # Errors
    /// [`Error::Closed`], or [`Error::Io`] from `bind` (`AddrInUse` if the
    /// path exists).
    #[track_caller]
    pub fn listen_unix<P: Protocol, A>(
        &self,
        path: impl AsRef<Path>,
        mut factory: impl ProtocolFactory<P, A>,
    ) -> Result<Listener, Error> {
        let at = Location::caller();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let path = path.as_ref();
        let sock = mio::net::UnixListener::bind(path)?;
        let unlink = UnlinkOnDrop::bound(path);
        let local = SockAddr::Unix(Some(path.to_path_buf()));
        let factory: listener::Factory = Box::new(move |peer| Box::new(factory.build(peer)));
        listener::listen(
            self,
            ListenSock::Unix {
                sock,
                _path: unlink,
            },
            factory,
            local,
            None,
            at,
        )
    }

    /// Connects to the Unix socket `path`; as [`connect_tcp`](Self::connect_tcp).
    #[track_caller]
    pub fn connect_unix<P: Protocol>(&self, path: impl AsRef<Path>, protocol: P) -> Connection<P> {
        let path = path.as_ref();
        let to = SockAddr::Unix(Some(path.to_path_buf()));
        let io = mio::net::UnixStream::connect(path).map(|s| Box::new(s) as Box<dyn Wire>);
        connect(self, io, to, protocol, Location::caller())
    }
}
