//! Guides for readers who know another library: the names they know, their
//! spelling here, and what differs.
//!
//! - [For Twisted users](for_twisted_users): every Twisted name, and why
//!   chains are typed, abandoned and reported as they are here.
//! - [For tokio users](for_tokio_users): the same program written both ways,
//!   what colours and what doesn't, and where tokio's names went.
//! - [Sequential logic with callbacks](sequential_logic): loops, retries,
//!   early exit, try/finally, bounded maps, scopes, cancellation and errors
//!   to `main`, without coroutines.
//! - [Testing with simulation](testing_with_simulation): a whole
//!   distributed program on simulated time, seeded, with the network's
//!   faults; seed search and replay (feature `sim`).

#[doc = include_str!("../../docs/for_twisted_users.md")]
pub mod for_twisted_users {}

#[doc = include_str!("../../docs/for_tokio_users.md")]
pub mod for_tokio_users {}

#[doc = include_str!("../../docs/sequential_logic.md")]
pub mod sequential_logic {}

#[cfg_attr(feature = "sim", doc = include_str!("../../docs/testing_with_simulation.md"))]
#[cfg_attr(
    not(feature = "sim"),
    doc = "Testing with simulation: built with the `sim` feature (see docs/testing_with_simulation.md)."
)]
pub mod testing_with_simulation {}
