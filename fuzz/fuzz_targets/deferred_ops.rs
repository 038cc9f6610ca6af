//! Deferred operation sequences decoded from the fuzzer's bytes, run against
//! the reference model of tests/model/deferred.rs (the one the proptest
//! model test uses): same trace, same answers, same flags, same result, same
//! unhandled-failure reports. Coverage guidance finds orderings that random
//! generation rarely reaches.
#![no_main]

#[path = "../../tests/model/deferred.rs"]
mod model;

use deferloop_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use model::{check, CancellerM, Op};

fn small(b: u8) -> i64 {
    i64::from(b % 10) - 5
}

fn decode(input: &mut Input<'_>) -> Op {
    let (kind, a, b) = (input.byte(), input.byte(), input.byte());
    let k = usize::from(a);
    match kind % 16 {
        0 => Op::AddCallback(small(a)),
        1 => Op::AddFailing,
        2 => Op::AddPanicking,
        3 => Op::AddErrback(small(a)),
        4 => Op::AddChainPending,
        5 => Op::AddChainReady(small(a)),
        6 => Op::AddChainFailed,
        7 => Op::Fire(k, small(b)),
        8 => Op::FireErr(k),
        9 => Op::FireInner(k, small(b)),
        10 => Op::FireInnerErr(k),
        11 => Op::Pause,
        12 => Op::Unpause,
        13 => Op::Cancel,
        14 => Op::ChainTo,
        _ => Op::ChainToFired(small(a)),
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let c = input.byte();
    let cancel_with = match c % 8 {
        0 => Some(CancellerM::Noop),
        1 => Some(CancellerM::Callback(small(c / 8))),
        2 => Some(CancellerM::Errback),
        3 => Some(CancellerM::Panic),
        _ => None,
    };
    // A quarter of the chains start fired (`succeed`: a bare result, no node).
    let start = match c % 8 {
        6 | 7 => Some(small(c / 8)),
        _ => None,
    };
    let mut ops = Vec::new();
    while !input.0.is_empty() && ops.len() < 64 {
        ops.push(decode(&mut input));
    }
    if let Err(e) = check(cancel_with, start, ops.clone()) {
        panic!("{e}\nops: {ops:?}\ncanceller: {cancel_with:?}\nstart: {start:?}");
    }
});
