//! What the rest of `net/` may do to a connection: connecting (Happy
//! Eyeballs' winner, a listener's count), and putting a layer (TLS) on its
//! wire. The core's state is private to `net/core/`; these operations are
//! its only doors, and each keeps the state's rules: none runs user code
//! while the state is borrowed, and each leaves the readiness flags saying
//! what a dispatch must look at.

use crate::net::core::buffer::WriteBuf;
use crate::net::core::conn::Conn;
use crate::net::core::io::Wire;
use crate::net::core::Phase;
use crate::net::Transport;
use crate::reactor::Ready;
use crate::{Error, Failure, Loop, Resolver};
use std::io;

impl Conn {
    /// The loop this connection belongs to, while it exists.
    pub(crate) fn event_loop(&self) -> Option<Loop> {
        self.lp.upgrade()
    }

    /// Whether a connect is in progress (or, on an accepted stream, a
    /// layer's handshake): `connection_made` has not run.
    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.st.borrow().phase, Phase::Connecting)
    }

    /// Runs `hook` once, when the connection has left the registry, however
    /// it ends (a listener counting its connections, a race closing its
    /// attempts). Replaces a hook set before.
    pub(crate) fn set_on_lost(&self, hook: Box<dyn FnOnce()>) {
        *self.on_lost.borrow_mut() = Some(hook);
    }

    /// Gives a connect in progress the Deferred to fire when it is up (or
    /// fails). Does nothing once the connect is over.
    pub(crate) fn set_resolver(&self, r: Resolver<Transport>) {
        if let Some((resolver, _)) = self.st.borrow_mut().connect.as_mut() {
            *resolver = Some(r);
        }
    }

    /// Abandons a connect in progress: the stream is discarded (no protocol
    /// method runs; its `on_lost` hook does), and what waited on it is
    /// returned, for the caller to fail outside any borrow: the Deferred's
    /// resolver (`None` for an accepted stream, which nobody waits on) and
    /// the destination errors should name. `None` if no connect was in
    /// progress.
    pub(crate) fn give_up(&self, lp: &Loop) -> Option<(Option<Resolver<Transport>>, String)> {
        let connect = self.st.borrow_mut().connect.take();
        let garbage = self.discard(lp);
        drop(garbage);
        connect
    }

    /// A connect raced on other sockets was won by `io`, connected to `to`:
    /// it becomes this connection's wire, registered under its key, and
    /// the next dispatch completes the connect (both readiness flags set,
    /// so it looks at the socket without waiting for an edge).
    pub(crate) fn attach_wire(
        &self,
        lp: &Loop,
        mut io: Box<dyn Wire>,
        to: String,
    ) -> io::Result<()> {
        lp.with_selector(|r| io.register(r, self.key.token()))?;
        if let Some(fd) = io.fd() {
            lp.claim_fd(fd, self.key);
        }
        {
            let mut st = self.st.borrow_mut();
            st.io = Some(io);
            if let Some(c) = st.connect.as_mut() {
                c.1 = to;
            }
            st.read_ready = true;
            st.write_ready = true;
        }
        self.wake(lp);
        Ok(())
    }

    /// Closes the connection now with `reason` (what was buffered is
    /// dropped); `connection_lost(reason)` follows if `connection_made` ran.
    pub(crate) fn abort(&self, lp: &Loop, reason: Option<Failure>) {
        self.close_now(lp, &mut self.st.borrow_mut(), reason);
    }

    /// Runs `f` on the connection's wire (a layer asks its own state through
    /// it: `Wire::layer`); `None` once the connection is closed. `f` runs
    /// with the state borrowed: it must not call back into the connection.
    pub(crate) fn with_wire<R>(&self, f: impl FnOnce(&dyn Wire) -> R) -> Option<R> {
        let st = self.st.borrow();
        st.io.as_deref().map(f)
    }

    // The two layer operations are the TLS layer's (a cargo feature).

    /// Puts a layer over the wire of an open connection (STARTTLS): `layer`
    /// gets the wire and what the protocol wrote and is still buffered (to
    /// send first, as it is), and returns the layered wire. `refuse` may
    /// turn the wire down first (a layer already there). Then the layer
    /// may try the socket and is read (bytes handed to it need no new edge).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the connection is not open (connecting,
    /// closing, half-closed), or `refuse`'s error.
    #[allow(dead_code)]
    pub(crate) fn put_layer(
        &self,
        lp: &Loop,
        refuse: impl FnOnce(&dyn Wire) -> Option<Error>,
        layer: impl FnOnce(Box<dyn Wire>, Vec<u8>) -> Box<dyn Wire>,
    ) -> Result<(), Error> {
        {
            let mut st = self.st.borrow_mut();
            if !matches!(st.phase, Phase::Open) || st.eof_requested {
                return Err(Error::InvalidInput("start_tls needs an open connection"));
            }
            if let Some(e) = st.io.as_deref().and_then(refuse) {
                return Err(e);
            }
            let Some(inner) = st.io.take() else {
                return Ok(());
            };
            let plain = take_buffered(&mut st.wbuf);
            st.io = Some(layer(inner, plain));
            st.write_ready = true;
            st.read_ready = true;
        }
        self.wake(lp);
        Ok(())
    }

    /// An accepted stream whose protocol must wait for a layer's handshake:
    /// `layer` wraps the wire, and the stream goes back to connecting, so
    /// the core's connect completion calls `connection_made` once the layer
    /// says it is up. Nobody waits on a Deferred: a failure goes to the log,
    /// naming `peer`.
    #[allow(dead_code)]
    pub(crate) fn connect_through_layer(
        &self,
        lp: &Loop,
        peer: String,
        layer: impl FnOnce(Box<dyn Wire>) -> Box<dyn Wire>,
    ) {
        {
            let mut st = self.st.borrow_mut();
            st.phase = Phase::Connecting;
            st.connect = Some((None, peer));
            if let Some(inner) = st.io.take() {
                st.io = Some(layer(inner));
            }
        }
        // The socket's first edge may have come already: look now.
        lp.wake_source(self.key, Ready::READABLE | Ready::WRITABLE);
    }
}

/// What the write buffer holds, taken out whole.
#[allow(dead_code)]
fn take_buffered(wbuf: &mut WriteBuf) -> Vec<u8> {
    let mut plain = Vec::with_capacity(wbuf.len());
    while !wbuf.is_empty() {
        let p = wbuf.pending();
        plain.extend_from_slice(p);
        let n = p.len();
        wbuf.consume(n);
    }
    plain
}
