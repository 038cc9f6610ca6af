//! Model test: random sequences of add-callback / add-errback / panicking
//! callbacks / fire / pause / unpause / chain (a callback returning a pending
//! or a fired Deferred) / `chain_deferred` / cancel (with no canceller, or one
//! that does nothing, fires, or panics) against a small reference model of
//! Twisted's rules must produce the same observable trace, the same answers
//! to every fire, the same flags on every Deferred, the same final result,
//! and, once everything is dropped, the same failures reported as unhandled
//! (and panicking cancellers logged), each exactly once.
//! A third of the chains start fired (`succeed`, which holds a bare result
//! until a node is needed). Cases: `PROPTEST_CASES`, else the count below (RELIABILITY.md).

mod util;

#[path = "model/deferred.rs"]
mod model;

use model::{canceller, check, op};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: util::cases(3000), .. ProptestConfig::default() })]
    #[test]
    fn chain_matches_the_reference_model(
        cancel_with in canceller(),
        start in proptest::option::weighted(0.3, -5i64..5),
        ops in proptest::collection::vec(op(), 0..32),
    ) {
        check(cancel_with, start, ops)?;
    }
}
