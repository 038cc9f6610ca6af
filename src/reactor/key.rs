//! [`SourceKey`]: a registered source's slab index and generation, also its
//! selector token. What an event, a wake and a queued dispatch name a source
//! by; below both the registry (`source.rs`) and the ready queue (`ready.rs`).
//! Tests: `source.rs` (a reused slot gets a new generation).

/// A registered source: its slab index and generation; also its mio `Token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SourceKey {
    pub(super) index: u32,
    pub(super) gen: u32,
}

impl SourceKey {
    /// A key no source has (the waker's token): the ready queue's task that
    /// runs the remote calls a turn took in (turn.rs).
    pub(crate) const REMOTE_CALLS: SourceKey = SourceKey {
        index: u32::MAX,
        gen: u32::MAX,
    };

    /// The selector token of this source.
    pub(crate) fn token(self) -> mio::Token {
        mio::Token((self.gen as usize) << 32 | self.index as usize)
    }

    pub(crate) fn from_token(t: mio::Token) -> SourceKey {
        SourceKey {
            index: (t.0 & 0xffff_ffff) as u32,
            gen: (t.0 >> 32) as u32,
        }
    }
}
