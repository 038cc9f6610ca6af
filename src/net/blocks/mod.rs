//! The building blocks above a connection: [`Stream`](stream::Stream) (read a
//! connection with Deferreds), producers (bytes written under a stream's flow
//! control) and `copy`/`relay` (one stream's bytes into another).
//!
//! Owns the stream's buffer and queue of reads (`stream_state.rs`, the floor
//! the others stand on). Exposes `Stream`, `StreamProtocol`, `copy`, `relay`
//! and the errors a read fails with, re-exported by `net`; the `Producer`
//! trait they drive is the user's, beside `Protocol` (`net/protocol.rs`). Built only on the public
//! [`Transport`](crate::net::Transport) and [`Protocol`](crate::net::Protocol):
//! nothing here reaches into the connection core.

pub(super) mod producer;
pub(super) mod relay;
pub(super) mod stream;
pub(super) mod stream_state;
