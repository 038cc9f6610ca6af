//! The contenders of the echo comparison, how each server is started, and
//! the sizes and connection count every one is measured at.

/// How a contender's server is started.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// `echo server NAME`: this binary.
    Rust(&'static str),
    /// `python scripts/echo_server.py MODE`.
    Python(&'static str),
}

#[derive(Clone, Copy)]
pub(crate) struct Contender {
    pub(crate) label: &'static str,
    pub(crate) kind: Kind,
    /// Threads serving: a server with more than one is not pinned (it and
    /// the client share the cores).
    pub(crate) threads: usize,
}

pub(crate) const CALLBACKS: &str = "deferloop callbacks";
pub(crate) const COROUTINES: &str = "deferloop coroutines";
pub(crate) const READS: &str = "deferloop Deferred reads";
pub(crate) const MARK256: &str = "deferloop callbacks, 256 KiB mark (control)";
pub(crate) const TOKIO: &str = "tokio current-thread";
pub(crate) const MIO: &str = "mio by hand";
pub(crate) const EMBEDDED: &str = "deferloop in tokio";
pub(crate) const LOOPS2: &str = "deferloop 2 loops";
pub(crate) const TOKIO_MT2: &str = "tokio multi-thread, 2 workers";

pub(crate) const CONTENDERS: [Contender; 12] = [
    Contender {
        label: CALLBACKS,
        kind: Kind::Rust("deferloop"),
        threads: 1,
    },
    Contender {
        label: COROUTINES,
        kind: Kind::Rust("deferloop-coro"),
        threads: 1,
    },
    Contender {
        label: READS,
        kind: Kind::Rust("deferloop-reads"),
        threads: 1,
    },
    Contender {
        label: MARK256,
        kind: Kind::Rust("deferloop-mark256"),
        threads: 1,
    },
    Contender {
        label: TOKIO,
        kind: Kind::Rust("tokio"),
        threads: 1,
    },
    Contender {
        label: MIO,
        kind: Kind::Rust("mio"),
        threads: 1,
    },
    Contender {
        label: EMBEDDED,
        kind: Kind::Rust("deferloop-in-tokio"),
        threads: 1,
    },
    Contender {
        label: LOOPS2,
        kind: Kind::Rust("deferloop-2loops"),
        threads: 2,
    },
    Contender {
        label: TOKIO_MT2,
        kind: Kind::Rust("tokio-mt2"),
        threads: 2,
    },
    Contender {
        label: "asyncio protocol",
        kind: Kind::Python("asyncio"),
        threads: 1,
    },
    Contender {
        label: "uvloop protocol",
        kind: Kind::Python("uvloop"),
        threads: 1,
    },
    Contender {
        label: "Twisted protocol",
        kind: Kind::Python("twisted"),
        threads: 1,
    },
];

/// With `--features tls`: deferloop and tokio over TLS (`tls.rs`).
pub(crate) const TLS_CALLBACKS: &str = "deferloop callbacks, TLS";
pub(crate) const TOKIO_TLS: &str = "tokio-rustls current-thread";

#[cfg(feature = "tls")]
pub(crate) const TLS_CONTENDERS: &[Contender] = &[
    Contender {
        label: TLS_CALLBACKS,
        kind: Kind::Rust("deferloop-tls"),
        threads: 1,
    },
    Contender {
        label: TOKIO_TLS,
        kind: Kind::Rust("tokio-tls"),
        threads: 1,
    },
];
#[cfg(not(feature = "tls"))]
pub(crate) const TLS_CONTENDERS: &[Contender] = &[];

/// The request/response workload's servers (`rr.rs`), measured apart from
/// the echo.
pub(crate) const RR_RAW: &str = "raw Protocol, lines split by hand";
pub(crate) const RR_READS: &str = "Stream, read_line()";
pub(crate) const RR_CONTENDERS: [Contender; 2] = [
    Contender {
        label: RR_RAW,
        kind: Kind::Rust("rr-raw"),
        threads: 1,
    },
    Contender {
        label: RR_READS,
        kind: Kind::Rust("rr-reads"),
        threads: 1,
    },
];

/// Every contender this build has.
pub(crate) fn contenders() -> impl Iterator<Item = Contender> {
    CONTENDERS.into_iter().chain(TLS_CONTENDERS.iter().copied())
}

pub(crate) const SIZES: [usize; 3] = [1024, 10 * 1024, 100 * 1024];
pub(crate) const CONNECTIONS: usize = 10;
